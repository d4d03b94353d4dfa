#!/usr/bin/env python3
"""Seed-2 benchmark (issue 4): EdgeCache in one network namespace, wrk with
>= 1000 connections in another, over a 4-queue veth; steering `queue` against
`off` (the kernel's reuseport hash) in the same run, interleaved and repeated.

Both data planes run at once (queue on :8080, off on :8081, same address), are
warmed, then wrk alternates between them: Q O O Q Q O ... Per round: req/s,
MB/s, p50/p99/p99.9, and the per-worker accepted-connection counters from each
data plane's /metrics (the steering verification).

    bench/steering.sh [--rounds 4] [--duration 20] [--connections 1000] [--workers 2]
"""

import argparse
import atexit
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

SRV, CLI = "ecb-srv", "ecb-cli"
SRV_IP, CLI_IP = "10.213.0.1", "10.213.0.2"
BEGIN = "<!-- BEGIN STEERING (bench/harness/steering.py) -->"
END = "<!-- END STEERING -->"


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr.strip()}")
    return r.stdout


def netns_up():
    netns_down()
    for c in (f"ip netns add {SRV}", f"ip netns add {CLI}",
              "ip link add vsrv numtxqueues 4 numrxqueues 4 type veth peer name vcli numtxqueues 4 numrxqueues 4",
              f"ip link set vsrv netns {SRV}", f"ip link set vcli netns {CLI}",
              f"ip -n {SRV} addr add {SRV_IP}/24 dev vsrv", f"ip -n {CLI} addr add {CLI_IP}/24 dev vcli",
              f"ip -n {SRV} link set vsrv up", f"ip -n {CLI} link set vcli up",
              f"ip -n {SRV} link set lo up", f"ip -n {CLI} link set lo up"):
        sh(c)
    # Per-queue NAPI on veth: GRO on the server end, TSO/GSO off on the client end.
    if shutil.which("ethtool"):
        sh(f"ip netns exec {SRV} ethtool -K vsrv gro on", check=False)
        sh(f"ip netns exec {CLI} ethtool -K vcli tso off gso off", check=False)
    else:
        bench.log("warning: ethtool missing (apt-get install ethtool): veth stays without per-queue NAPI")


def netns_down():
    for n in (SRV, CLI):
        sh(f"ip netns pids {n} 2>/dev/null | xargs -r kill -9", check=False)
        sh(f"ip netns del {n} 2>/dev/null", check=False)


def metrics(admin_port):
    out = sh(f"ip netns exec {SRV} curl -s --max-time 5 http://127.0.0.1:{admin_port}/metrics", check=False)
    acc = {}
    other = []
    for line in out.splitlines():
        m = re.match(r'edgecache_dataplane_accepted_connections_total\{[^}]*worker="(\d+)"[^}]*\}\s+([\d.e+]+)', line)
        if m:
            acc[m.group(1)] = acc.get(m.group(1), 0) + float(m.group(2))
        elif "steer" in line and not line.startswith("#"):
            other.append(line)
    return acc, other


def wrk(args, port):
    cmd = (f"ip netns exec {CLI} sh -c 'ulimit -n $(ulimit -Hn); exec wrk -t{args.wrk_threads} "
           f"-c{args.connections} -d{args.duration}s --timeout 10s -s {bench.HERE / 'objects.lua'} "
           f"http://{SRV_IP}:{port} -- {args.size} {args.count} {args.dist} 1.0 {int(time.time())}'")
    out = sh(cmd, check=False)
    for line in out.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:])
    raise RuntimeError(f"wrk gave no result: {out[-500:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target-dir", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", default="4k")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--dist", default="uniform")
    ap.add_argument("--modes", default="queue,off")
    ap.add_argument("--work", default="/var/tmp/ec-bench-steering")
    ap.add_argument("--run-id", default="steering-" + time.strftime("%Y%m%d-%H%M%S"))
    ap.add_argument("--no-md", action="store_true")
    args = ap.parse_args()

    exe = Path(args.target_dir) / "release" / "edgecache-dataplane"
    if not exe.exists():
        sys.exit(f"SKIPPED: {exe} is not built (cargo build --release -p edgecache-dataplane)")
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bench.RESULTS.mkdir(parents=True, exist_ok=True)
    out_path = bench.RESULTS / f"{args.run_id}.jsonl"
    out = open(out_path, "a")

    def emit(r):
        r.setdefault("run_id", args.run_id)
        out.write(json.dumps(r) + "\n")
        out.flush()

    def cleanup():
        for _, p in list(bench.PROCS):
            bench.stop(p, 3)
        netns_down()
        for m in args.modes.split(","):
            shutil.rmtree(work / m / "cache", ignore_errors=True)
    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: sys.exit(130))

    netns_up()
    emit({"kind": "steering_meta", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "args": vars(args),
          "loadavg": Path("/proc/loadavg").read_text().split()[:3]})
    ns = ["ip", "netns", "exec", SRV]
    origin = bench.start("origin", ns + [str(Path(args.target_dir) / "release" / "edgecache-origin"),
                                         "--listen", "127.0.0.1:18000", "--max-age", "86400"],
                         logfile=work / "origin.log")
    time.sleep(0.5)
    if origin.poll() is not None:
        sys.exit("origin did not start")
    (work / "veth.yaml").write_text("workers:\n  queueOffset: 0\n  steeringRequired: true\n")
    modes = [m for m in args.modes.split(",") if m]
    inst = {}
    for i, mode in enumerate(modes):
        d = work / mode
        (d / "cache").mkdir(parents=True)
        port, admin = 8080 + i, 19090 + i
        p = bench.start(f"dp-{mode}", ns + [str(exe), "serve", "--origin", "http://127.0.0.1:18000",
                                            "--listen", f"{SRV_IP}:{port}", "--admin", f"127.0.0.1:{admin}",
                                            "--cache-dir", str(d / "cache"), "--cache-size", "2GiB",
                                            "--config", str(work / "veth.yaml"),
                                            "--workers", str(args.workers), "--steering", mode,
                                            "--access-log", "off"],
                        logfile=d / "server.log")
        inst[mode] = (port, admin, p)
    time.sleep(2)
    for mode, (port, admin, p) in inst.items():
        if p.poll() is not None:
            sys.exit(f"data plane ({mode}) exited: {(work / mode / 'server.log').read_text()[-1500:]}")
        r = json.loads(sh(f"ip netns exec {CLI} sh -c 'ulimit -n $(ulimit -Hn); exec "
                          f"{Path(args.target_dir) / 'release' / 'edgecache-loadgen'} pass --target {SRV_IP}:{port} "
                          f"--size {args.size} --count {args.count} --conns 32'").strip().splitlines()[-1])
        bench.log(f"warm {mode}: {r['ok']}/{args.count} ok, {r['bad_body']} bad bodies, {r['errors']} errors")
        emit({"kind": "steering_warm", "mode": mode, **r})

    order = []
    for rnd in range(args.rounds):
        order += modes if rnd % 2 == 0 else list(reversed(modes))
    results = []
    for k, mode in enumerate(order):
        port, admin, p = inst[mode]
        a0, _ = metrics(admin)
        w = wrk(args, port)
        a1, other = metrics(admin)
        secs = w["duration_us"] / 1e6
        acc = {wk: a1.get(wk, 0) - a0.get(wk, 0) for wk in a1}
        r = {"kind": "steering_round", "mode": mode, "slot": k, "connections": args.connections,
             "req_per_s": w["requests"] / secs, "mb_per_s": w["bytes"] / secs / 1e6,
             "p50_ms": w["p50_us"] / 1e3, "p99_ms": w["p99_us"] / 1e3, "p999_ms": w["p999_us"] / 1e3,
             "errors": sum(w[x] for x in w if x.startswith("err_")), "accepted_per_worker": acc,
             "steering_metrics": other[:20]}
        emit(r)
        results.append(r)
        bench.log(f"{mode:6s} {r['req_per_s']:9.0f} req/s p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} "
                  f"p99.9 {r['p999_ms']:.2f} ms errors {r['errors']} accepted/worker {acc}")

    import statistics as st
    lines = [f"## Steering (seed 2): run {args.run_id}", "",
             f"EdgeCache with {args.workers} workers in netns {SRV}, wrk -t{args.wrk_threads} -c{args.connections} "
             f"in netns {CLI} over a 4-queue veth (GRO on the server end, TSO/GSO off on the client end); "
             f"{args.size} x {args.count} objects, {args.dist} ids, {args.rounds} interleaved rounds of "
             f"{args.duration} s per mode. Medians.", "",
             "| steering | in effect (metric) | fallbacks | req/s | MB/s | p50 ms | p99 ms | p99.9 ms | errors | "
             "accepted per worker (sum) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode in modes:
        rs = [r for r in results if r["mode"] == mode]
        if not rs:
            continue
        accs = {}
        for r in rs:
            for wk, v in r["accepted_per_worker"].items():
                accs[wk] = accs.get(wk, 0) + v
        eff, fb = "?", "?"
        for ln in rs[-1].get("steering_metrics", []):
            m = re.match(r'edgecache_dataplane_steering_info\{mode="([^"]+)"\}\s+1', ln)
            if m:
                eff = m.group(1)
            m = re.match(r"edgecache_dataplane_steering_fallbacks_total\s+([\d.]+)", ln)
            if m:
                fb = m.group(1)
        lines.append(f"| {mode} | {eff} | {fb} | {st.median(r['req_per_s'] for r in rs):,.0f} | "
                     f"{st.median(r['mb_per_s'] for r in rs):,.0f} | {st.median(r['p50_ms'] for r in rs):.2f} | "
                     f"{st.median(r['p99_ms'] for r in rs):.2f} | {st.median(r['p999_ms'] for r in rs):.2f} | "
                     f"{sum(r['errors'] for r in rs)} | "
                     f"{', '.join(f'w{k}: {int(v)}' for k, v in sorted(accs.items())) or '–'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_md:
        md = bench.BENCH / "BENCHMARKS.md"
        cur = md.read_text() if md.exists() else "# EdgeCache benchmarks\n"
        if BEGIN in cur and END in cur:
            cur = cur.split(BEGIN)[0] + f"{BEGIN}\n{text}{END}" + cur.split(END, 1)[1]
        else:
            cur = cur.rstrip() + f"\n\n{BEGIN}\n{text}{END}\n"
        md.write_text(cur)
    bench.log(f"results: {out_path}")


if __name__ == "__main__":
    main()
