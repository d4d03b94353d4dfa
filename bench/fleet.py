#!/usr/bin/env python3
"""Fleet benchmark (issue 16 section 1): hit ratio and origin bytes of 1, 2 and 3 nodes.

One origin (edgecache-origin) and N data planes (edgecache-dataplane, one worker each, RAM tier
off, each its own store under --work) on 127.0.0.1, sharded (`--node-name`, `--peers`) for N > 1.
The same trace (bench/workload/trace.py, `key size` lines) is replayed for each N, each request
sent to one node chosen the way a Service would (seeded random, or round robin), by --concurrency
threads on keep-alive http.client connections, all with one Host.

Measured per fleet:
  - as the clients see it, from each response's Cache-Status (the owner's entry comes first when
    a node forwarded the miss to it): object and byte hit ratio, and the split into local hits,
    hits at the owner through a peer, local misses and misses through a peer;
  - at the origin (its own /__stats counters, reset before each fleet): requests and body bytes,
    and from them the origin-side hit ratios (1 - origin requests / requests, 1 - origin bytes /
    requested bytes); the data planes' origin_fetches_total summed, as a cross-check;
  - per node (/metrics): objects and bytes stored, requests by outcome, peer forwards by result,
    requests served for peers.

Output: one JSON object per fleet (and a meta line) in bench/results/fleet-<id>.jsonl, the log in
bench/results/fleet-<id>.log, a Markdown table on stdout. Python 3 standard library only (the
trace generator needs numpy: a trace that exists is reused; see bench/workload/README.md).
"""

import argparse
import atexit
import http.client
import itertools
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
HOST = "fleet.example"  # one site: every node must see the same cache key

PROCS = []
DIRS = []
LOG = None


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG:
        LOG.write(s + "\n")
        LOG.flush()


def parse_size(s):
    s = str(s).strip()
    units = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20,
             "G": 1 << 30, "GIB": 1 << 30}
    num = s.rstrip("KMGiBkmgib")
    unit = s[len(num):].upper()
    if unit not in units:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 512MiB)")
    return int(float(num) * units[unit])


def gib(b):
    return b / (1 << 30)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def start(argv, logfile):
    f = open(logfile, "ab")
    p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    f.close()
    PROCS.append(p)
    return p


def stop(p, grace=5.0):
    if p is None or p.poll() is not None:
        return
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)
    except ProcessLookupError:
        pass


def cleanup():
    for p in PROCS:
        stop(p)
    for d in DIRS:
        shutil.rmtree(d, ignore_errors=True)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait_http(url, timeout, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if http_get(url, 1)[0] == 200:
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


def origin_stats(port):
    return json.loads(http_get(f"http://127.0.0.1:{port}/__stats")[1])


def origin_reset(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/__reset", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


def metrics(admin_port):
    """edgecache_dataplane_* samples as {name: value} and {name: {labels: value}}."""
    txt = http_get(f"http://127.0.0.1:{admin_port}/metrics")[1].decode(errors="replace")
    flat, labelled = {}, {}
    for ln in txt.splitlines():
        if not ln.startswith("edgecache_dataplane_"):
            continue
        try:
            name_part, val = ln.rsplit(" ", 1)
            v = float(val)
        except ValueError:
            continue
        name = name_part[len("edgecache_dataplane_"):]
        if "{" in name:
            base, lab = name.split("{", 1)
            labelled.setdefault(base, {})[lab.rstrip("}")] = v
        else:
            flat[name] = v
    return flat, labelled


def label_values(labelled, name, key):
    """{label value: sample} of a one-label family, e.g. requests_total by cache."""
    out = {}
    for lab, v in labelled.get(name, {}).items():
        k, _, val = lab.partition("=")
        if k == key:
            out[val.strip('"')] = v
    return out


# --------------------------------------------------------------------------
# trace

def trace_python():
    """A python that can import numpy: the workload venv, or this one."""
    venv = Path(os.environ.get("VENV", "/var/tmp/trace-venv")) / "bin" / "python"
    for py in (str(venv), sys.executable):
        if Path(py).exists() and subprocess.run([py, "-c", "import numpy"],
                                                capture_output=True).returncode == 0:
            return py
    return None


def ensure_trace(args):
    name = f"zipf{args.alpha}-ohw{args.one_hit}-n{args.requests}-k{args.keys}-s{args.seed}"
    d = Path(args.trace_dir)
    txt, stats = d / f"{name}.txt", d / f"{name}.stats.json"
    if not (txt.exists() and stats.exists()):
        py = trace_python()
        if py is None:
            sys.exit(f"{txt} is missing and no python with numpy is there to make it: run "
                     "bench/workload/run.sh --quick once (it makes /var/tmp/trace-venv), or pass --trace")
        log(f"making the trace {name} with {py}")
        subprocess.run([py, str(HERE / "workload" / "trace.py"), "--requests", str(args.requests),
                        "--keys", str(args.keys), "--alpha", str(args.alpha),
                        "--one-hit", str(args.one_hit), "--seed", str(args.seed),
                        "--out-dir", str(d)], check=True)
    return txt, stats


def load_trace(path, limit):
    keys, sizes = [], []
    with open(path) as f:
        for ln in f:
            k, s = ln.split()
            keys.append(k)
            sizes.append(int(s))
            if limit and len(keys) >= limit:
                break
    return keys, sizes


# --------------------------------------------------------------------------
# fleet

class Fleet:
    def __init__(self, args, bins, origin_port, n, sharded, label):
        self.args, self.bins, self.n, self.sharded, self.label = args, bins, n, sharded, label
        self.root = Path(args.work) / label
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        DIRS.append(self.root)
        ports = free_ports(2 * n)
        self.names = [f"n{i}" for i in range(n)]
        self.ports, self.admins = ports[:n], ports[n:]
        self.origin_port = origin_port
        self.procs = []

    def start(self):
        a = self.args
        peers = self.root / "peers"
        peers.write_text("".join(f"{nm} 127.0.0.1:{p}\n" for nm, p in zip(self.names, self.ports)))
        for i, nm in enumerate(self.names):
            cache = self.root / nm / "cache"
            cache.mkdir(parents=True)
            cfg = self.root / nm / "config.yaml"
            # RAM tier off: the store is the node's whole cache. Cache-Status names the node.
            body = f"memory:\n  ramTier: 0B\ncache:\n  name: {nm}\n"
            if self.sharded and (a.popularity_threshold is not None or a.popularity_window):
                body += "sharding:\n"
                if a.popularity_threshold is not None:
                    body += f"  popularityThreshold: {a.popularity_threshold}\n"
                if a.popularity_window:
                    body += f"  popularityWindow: {a.popularity_window}\n"
            cfg.write_text(body)
            argv = [str(self.bins["dataplane"]), "serve", "--config", str(cfg),
                    "--origin", f"http://127.0.0.1:{self.origin_port}",
                    "--listen", f"127.0.0.1:{self.ports[i]}",
                    "--admin", f"127.0.0.1:{self.admins[i]}",
                    "--cache-dir", str(cache), "--cache-size", f"{a.store_size >> 20}MiB",
                    "--workers", "1", "--memory-limit", f"{a.memory_limit >> 20}MiB",
                    "--access-log", "off"]
            if self.sharded:
                argv += ["--node-name", nm, "--peers", str(peers)]
            self.procs.append(start(argv, self.root / f"{nm}.log"))
        for i, p in enumerate(self.procs):
            if not wait_http(f"http://127.0.0.1:{self.admins[i]}/readyz", 60, p):
                raise RuntimeError(f"{self.names[i]} did not become ready, see {self.root}/{self.names[i]}.log: "
                                   + (self.root / f"{self.names[i]}.log").read_text()[-2000:])
        if self.sharded and self.n > 1:
            # Every node sees every other one up (one started before its peers listened may have
            # marked them down; a probe brings them back within seconds).
            end = time.time() + 30
            while True:
                ups = [label_values(metrics(ad)[1], "peers", "state").get("up", 0) for ad in self.admins]
                if all(u == self.n - 1 for u in ups):
                    break
                if time.time() > end:
                    raise RuntimeError(f"peers not all up after 30 s: {ups}")
                time.sleep(0.5)

    def stop(self):
        for p in self.procs:
            stop(p)
        for nm in self.names:
            shutil.rmtree(self.root / nm, ignore_errors=True)

    def node_metrics(self):
        out = []
        for nm, ad in zip(self.names, self.admins):
            flat, lab = metrics(ad)
            out.append({
                "node": nm,
                "store_objects": int(flat.get("store_objects", 0)),
                "store_bytes": int(flat.get("store_bytes", 0)),
                "store_capacity_bytes": int(flat.get("store_capacity_bytes", 0)),
                "requests": {k: int(v) for k, v in label_values(lab, "requests_total", "cache").items()},
                "origin_fetches": int(flat.get("origin_fetches_total", 0)),
                "peer_forwards": {k: int(v) for k, v in label_values(lab, "peer_forwards_total", "result").items()},
                "peer_served": int(flat.get("peer_served_total", 0)),
                "response_body_bytes": int(flat.get("response_body_bytes_total", 0)),
            })
        return out


def classify(values):
    """Cache-Status field values -> one of local_hit, copy_hit, peer_hit, peer_miss, local_miss.

    Entries run from the origin's side to the client's: the last is the node the client asked.
    A node that forwarded a miss to the key's owner appends its entry after the owner's, so the
    owner's entry is the one before it, fresh. A hit replays the stored response's headers, and a
    copy a non-owner kept of a popular object was stored with the owner's entry in it: so a hit
    at the receiving node counts as a local hit whatever precedes it (copy_hit when something
    does), and only a non-hit there is judged by the entry before it."""
    entries = [e.strip() for v in values for e in v.split(",") if e.strip()]
    if not entries:
        return "local_miss"

    def is_hit(e):
        return "hit" in [p.strip() for p in e.split(";")][1:]

    if is_hit(entries[-1]):
        return "copy_hit" if len(entries) > 1 else "local_hit"
    if len(entries) > 1:
        return "peer_hit" if is_hit(entries[-2]) else "peer_miss"
    return "local_miss"


def replay(args, fleet, keys, sizes):
    n = fleet.n
    if args.route == "random":
        rng = random.Random(args.route_seed)
        choice = [rng.randrange(n) for _ in range(len(keys))]
    else:
        choice = [i % n for i in range(len(keys))]
    nxt = itertools.count()
    total = len(keys)
    lock = threading.Lock()
    agg = {"requests": 0, "bytes": 0, "hits": 0, "hit_bytes": 0,
           "local_hit": 0, "copy_hit": 0, "peer_hit": 0, "local_miss": 0, "peer_miss": 0,
           "local_hit_bytes": 0, "copy_hit_bytes": 0, "peer_hit_bytes": 0, "local_miss_bytes": 0,
           "peer_miss_bytes": 0,
           "errors": 0, "short_bodies": 0, "status": {}}
    per_node = [{"requests": 0, "hits": 0} for _ in range(n)]
    errors = []
    progress = {"done": 0}
    t0 = time.time()

    def worker():
        conns = {}
        loc = {k: 0 for k in agg if k != "status"}
        st = {}
        pn = [{"requests": 0, "hits": 0} for _ in range(n)]
        while True:
            i = next(nxt)
            if i >= total:
                break
            node, key, size = choice[i], keys[i], sizes[i]
            path = f"/obj/{size}/{key}"
            resp = body = None
            for attempt in range(2):
                c = conns.get(node)
                if c is None:
                    c = conns[node] = http.client.HTTPConnection("127.0.0.1", fleet.ports[node], timeout=30)
                try:
                    c.request("GET", path, headers={"Host": HOST})
                    resp = c.getresponse()
                    body = resp.read()
                    break
                except (OSError, http.client.HTTPException) as e:
                    c.close()
                    conns.pop(node, None)
                    resp = None
                    if attempt == 1:
                        loc["errors"] += 1
                        if len(errors) < 10:
                            errors.append(f"{path} on {fleet.names[node]}: {e!r}")
            if resp is None:
                continue
            st[resp.status] = st.get(resp.status, 0) + 1
            if resp.status != 200:
                loc["errors"] += 1
                continue
            if len(body) != size:
                loc["short_bodies"] += 1
            cat = classify(resp.headers.get_all("cache-status") or [])
            hit = cat.endswith("_hit")
            loc["requests"] += 1
            loc["bytes"] += size
            loc[cat] += 1
            loc[cat + "_bytes"] += size
            pn[node]["requests"] += 1
            if hit:
                loc["hits"] += 1
                loc["hit_bytes"] += size
                pn[node]["hits"] += 1
            if loc["requests"] % 100 == 0:
                with lock:
                    progress["done"] += 100
        for c in conns.values():
            c.close()
        with lock:
            for k, v in loc.items():
                agg[k] += v
            for k, v in st.items():
                agg["status"][str(k)] = agg["status"].get(str(k), 0) + v
            for a, b in zip(per_node, pn):
                a["requests"] += b["requests"]
                a["hits"] += b["hits"]

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    step = max(total // 10, 1)
    mark = step
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        done = progress["done"]
        if done >= mark:
            el = time.time() - t0
            log(f"    {done:,}/{total:,} requests, {el:.0f} s, {done / el:.0f} req/s")
            mark = (done // step + 1) * step
        for p in fleet.procs:
            if p.poll() is not None:
                raise RuntimeError(f"a data plane exited ({p.poll()}) during the replay; see {fleet.root}")
    agg["seconds"] = time.time() - t0
    agg["per_node"] = per_node
    agg["error_samples"] = errors
    return agg


def run_fleet(args, bins, origin_port, n, sharded, keys, sizes, emit, trace_info):
    label = f"n{n}-{'sharded' if sharded else 'unsharded'}"
    log(f"== {n} node{'s' if n > 1 else ''}, sharding {'on' if sharded else 'off'}: "
        f"{len(keys):,} requests, {args.concurrency} threads, route {args.route}")
    fl = Fleet(args, bins, origin_port, n, sharded, label)
    try:
        fl.start()
        origin_reset(origin_port)
        r = replay(args, fl, keys, sizes)
        o = origin_stats(origin_port)
        nodes = fl.node_metrics()
    finally:
        fl.stop()
    req, byt = r["requests"], r["bytes"]
    rec = {
        "kind": "fleet", "label": label, "nodes": n, "sharding": sharded and n > 1,
        "route": args.route, "concurrency": args.concurrency,
        "store_size_per_node": args.store_size,
        "requests": req, "requested_bytes": byt,
        "object_hit_ratio": r["hits"] / req if req else None,
        "byte_hit_ratio": r["hit_bytes"] / byt if byt else None,
        "origin_requests": o["requests"], "origin_bytes": o["body_bytes"],
        "origin_object_hit_ratio": 1 - o["requests"] / req if req else None,
        "origin_byte_hit_ratio": 1 - o["body_bytes"] / byt if byt else None,
        "origin_max_per_path": o.get("max_per_path"),
        "dataplane_origin_fetches": sum(x["origin_fetches"] for x in nodes),
        "forwarded_to_peers": sum(sum(x["peer_forwards"].values()) for x in nodes),
        "peer_forwards": {k: sum(x["peer_forwards"].get(k, 0) for x in nodes)
                          for k in sorted({k for x in nodes for k in x["peer_forwards"]})},
        "served_for_peers": sum(x["peer_served"] for x in nodes),
        "stored_objects": [x["store_objects"] for x in nodes],
        "stored_bytes": [x["store_bytes"] for x in nodes],
        "client": {k: r[k] for k in ("local_hit", "copy_hit", "peer_hit", "local_miss", "peer_miss",
                                     "local_hit_bytes", "copy_hit_bytes", "peer_hit_bytes",
                                     "local_miss_bytes", "peer_miss_bytes", "errors", "short_bodies", "status",
                                     "per_node", "error_samples")},
        "seconds": r["seconds"], "req_per_s": req / r["seconds"] if r["seconds"] else None,
        "node_metrics": nodes, "trace": trace_info,
    }
    emit(rec)
    log(f"  object hit {rec['object_hit_ratio']:.4f} byte hit {rec['byte_hit_ratio']:.4f} "
        f"(origin-side {rec['origin_object_hit_ratio']:.4f} / {rec['origin_byte_hit_ratio']:.4f}); "
        f"origin {o['requests']:,} requests {gib(o['body_bytes']):.3f} GiB "
        f"(data planes' fetches {rec['dataplane_origin_fetches']:,}); stored {rec['stored_objects']}; "
        f"forwarded {rec['forwarded_to_peers']:,} {rec['peer_forwards']}; "
        f"client split {[(k, r[k]) for k in ('local_hit', 'copy_hit', 'peer_hit', 'local_miss', 'peer_miss')]}; "
        f"errors {r['errors']} short {r['short_bodies']}; {rec['req_per_s']:.0f} req/s")
    return rec


def table(recs):
    base = next((r for r in recs if r["nodes"] == 1), None)
    lines = ["| nodes | sharding | object hit ratio | byte hit ratio | origin requests | origin bytes "
             "| origin bytes vs 1 node | objects stored per node | forwarded to peers | req/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        vs = f"{r['origin_bytes'] / base['origin_bytes']:.2f}x" if base and base["origin_bytes"] else "-"
        lines.append(
            f"| {r['nodes']} | {'on' if r['sharding'] else 'off'} | {r['object_hit_ratio']:.3f} "
            f"| {r['byte_hit_ratio']:.3f} | {r['origin_requests']:,} | {gib(r['origin_bytes']):.2f} GiB "
            f"| {vs} | {' / '.join(f'{x:,}' for x in r['stored_objects'])} "
            f"(sum {sum(r['stored_objects']):,}) | {r['forwarded_to_peers']:,} "
            f"| {r['req_per_s']:.0f} |")
    return "\n".join(lines)


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,3", help="fleet sizes with sharding on (N > 1)")
    ap.add_argument("--unsharded", default="3",
                    help="fleet sizes also run with sharding off, as a contrast ('' for none)")
    ap.add_argument("--requests", type=int, default=300_000, help="trace length (trace.py --requests)")
    ap.add_argument("--keys", type=int, default=200_000, help="Zipf catalogue (trace.py --keys)")
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--one-hit", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1, help="trace seed")
    ap.add_argument("--trace-dir", default="/var/tmp/edgecache-trace")
    ap.add_argument("--trace", help="a `key size` text trace to use instead (the options above then only name it)")
    ap.add_argument("--limit", type=int, default=0, help="replay only the first N requests (a quick check)")
    ap.add_argument("--store-size", type=parse_size, default=512 << 20, help="disk store per node")
    ap.add_argument("--memory-limit", type=parse_size, default=1 << 30,
                    help="memory each data plane plans with (--memory-limit); the RAM tier is off anyway")
    ap.add_argument("--popularity-threshold", type=int, default=None,
                    help="sharding.popularityThreshold (default: the data plane's, 4)")
    ap.add_argument("--popularity-window", default=None,
                    help="sharding.popularityWindow, e.g. 60s (default: the data plane's)")
    ap.add_argument("--concurrency", type=int, default=16, help="client threads")
    ap.add_argument("--route", choices=("random", "roundrobin"), default="random",
                    help="how a request picks its node (a Service: random)")
    ap.add_argument("--route-seed", type=int, default=1)
    ap.add_argument("--work", default="/var/tmp/edgecache-fleet", help="stores and logs (deleted after)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", "/var/tmp/edgecache-target"))
    ap.add_argument("--keep-logs", action="store_true", help="keep the data planes' logs under --work")
    ap.add_argument("--run-id", default=time.strftime("%Y%m%d-%H%M%S"))
    args = ap.parse_args()

    RESULTS.mkdir(parents=True, exist_ok=True)
    LOG = open(RESULTS / f"fleet-{args.run_id}.log", "a")
    out_path = RESULTS / f"fleet-{args.run_id}.jsonl"
    out = open(out_path, "a")

    def emit(rec):
        rec = dict(rec, run_id=args.run_id)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: sys.exit(130))

    work = Path(args.work) / args.run_id
    args.work = str(work)
    work.mkdir(parents=True, exist_ok=True)
    if not args.keep_logs:
        DIRS.append(work)

    if args.trace:
        txt, stats_path = Path(args.trace), Path(str(args.trace).removesuffix(".txt") + ".stats.json")
    else:
        txt, stats_path = ensure_trace(args)
    st = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    keys, sizes = load_trace(txt, args.limit)
    distinct = {}
    for k, s in zip(keys, sizes):
        distinct[k] = s
    ws = sum(distinct.values())
    trace_info = {"file": str(txt), "requests": len(keys), "distinct_keys": len(distinct),
                  "distinct_bytes": ws, "requested_bytes": sum(sizes),
                  "params": st.get("params"),
                  "infinite_cache": {k: st.get("stats", {}).get(f"max_{k}_hit_ratio")
                                     for k in ("object", "byte")}}
    nodes = [int(x) for x in args.nodes.split(",") if x]
    unsharded = [int(x) for x in args.unsharded.split(",") if x]
    log(f"fleet run {args.run_id}: trace {txt.name}: {len(keys):,} requests, {len(distinct):,} distinct "
        f"objects, working set {gib(ws):.2f} GiB, requested {gib(sum(sizes)):.2f} GiB")
    log(f"  store per node {args.store_size >> 20} MiB = {args.store_size / ws:.0%} of the working set; "
        + ", ".join(f"{n} nodes {n * args.store_size / ws:.0%}" for n in sorted(set(nodes + unsharded)) if n > 1)
        + "; RAM tier off, 1 worker a node")
    inf = trace_info["infinite_cache"]
    if inf["object"] is not None and not args.limit:
        log(f"  infinite cache (every first request a miss): object hit ratio {inf['object']:.4f}, "
            f"byte hit ratio {inf['byte']:.4f}")

    # Private copies under neutral names (a name-based kill elsewhere does not hit them).
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    bins = {}
    for src, dst in (("edgecache-origin", "ecf-origin"), ("edgecache-dataplane", "ecf-dataplane")):
        f = Path(args.target_dir) / "release" / src
        if not f.exists():
            sys.exit(f"{f} is missing: cargo build --release -p edgecache-dataplane -p edgecache-origin "
                     "(or run bench/fleet.sh)")
        shutil.copy2(f, bindir / dst)
        bins[dst.split("-")[1]] = bindir / dst

    emit({"kind": "meta", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "args": vars(args),
          "host_kernel": platform.release(), "cores": os.cpu_count(),
          "loadavg": Path("/proc/loadavg").read_text().split()[:3], "trace": trace_info,
          "git": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()})

    (oport,) = free_ports(1)
    origin = start([str(bins["origin"]), "--listen", f"127.0.0.1:{oport}", "--threads", "1",
                    "--max-age", "86400"], work / "origin.log")
    if not wait_http(f"http://127.0.0.1:{oport}/__health", 10, origin):
        sys.exit(f"origin did not start, see {work / 'origin.log'}")

    recs = []
    plan = [(n, n > 1) for n in nodes] + [(n, False) for n in unsharded]
    for n, sharded in plan:
        try:
            recs.append(run_fleet(args, bins, oport, n, sharded, keys, sizes, emit, trace_info))
        except Exception as e:
            log(f"  FAILED: {e}")
            emit({"kind": "error", "nodes": n, "sharding": sharded, "error": str(e)[:4000]})
    stop(origin)
    out.close()
    if recs:
        t = table(recs)
        log("")
        log(t)
    log(f"results: {out_path}")


if __name__ == "__main__":
    main()
