#!/usr/bin/env python3
"""EdgeCache compression benchmark (issue 33 section 1): bytes saved and CPU per request on a
corpus of real text assets, misses and hits, side by side with nginx (proxy_cache + gzip on),
Traffic Server (compress plugin, gzip and br, cached alternates) and Varnish (do_gzip on fetch);
and the level sweep behind EdgeCache's default levels.

Run through bench/compress.sh, which installs the tools and builds the binaries. The caches,
their cgroups, CPU pinning (caches on CPU 1, load generators on CPU 0, one client address),
storage and interleaved rounds are bench.py's; this file adds:

- the corpus: a few well-known npm packages fetched with `npm pack` into --corpus-dir (reused
  when present), their .js/.css/.json/.svg/.html files of at least 1 KiB (capped per package
  and in total), served uncompressed by edgecache-origin --dir (Content-Type by extension,
  strong ETag, every request counted, so hit ratios come from the origin's count as in bench.py);
- the level sweep: examples/compress_levels.rs (the data plane's own encoder) over the corpus,
  pinned to the caches' CPU;
- per cache: a miss pass (every file once, Accept-Encoding: gzip, wrk -c32, harness/corpus_pass.lua),
  warm-up passes for every Accept-Encoding row until a pass makes no origin fetch, a check of every
  file in every row (status, Content-Encoding, decoded body equal to the file, body bytes), then
  interleaved hit rounds per row (wrk -t1 -c256, harness/corpus.lua, uniform over the files).

Rows (Accept-Encoding sent): gzip, br, browser (`gzip, deflate, br, zstd`, what Chrome and
Firefox send), identity (none). Results: bench/results/compress-<run>.jsonl and a generated
section of bench/BENCHMARKS.md (harness/compress_report.py).
"""

import argparse
import gzip
import hashlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import bench as B

# Pinned, so a run in a year measures the same bytes. Each brings JavaScript, CSS, JSON or SVG.
PACKAGES = [
    "react-dom@19.3.1",
    "three@0.187.0",
    "d3@7.9.2",
    "bootstrap@5.3.9",
    "moment@2.31.0",
    "mime-db@1.54.0",
    "@fortawesome/fontawesome-free@7.3.1",
]
EXTENSIONS = (".js", ".css", ".json", ".svg", ".html")
MIN_FILE = 1024
PER_PACKAGE_FILES = 80
PER_PACKAGE_BYTES = 8 << 20
TOTAL_BYTES = 30 << 20

ROWS = {  # row -> Accept-Encoding sent (None: none)
    "gzip": "gzip",
    "br": "br",
    "browser": "gzip, deflate, br, zstd",
    "identity": None,
}
MISS_AE = "gzip"
# The media types every cache compresses (EdgeCache's defaults; the others are told the same).
TYPES = ["text/*", "application/javascript", "application/json", "application/xml", "application/wasm",
         "image/svg+xml"]
NGINX_LEVEL = 6  # gzip_comp_level: Traffic Server's and Varnish's level (nginx's own default is 1)
VARNISH_LEVEL = 6  # gzip_level (Varnish's default, 6)


# --------------------------------------------------------------------------
# corpus

def sh_out(cmd, cwd=None, timeout=600):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-1500:]}")
    return r.stdout


def pick(members):
    """At most PER_PACKAGE_FILES files, evenly spaced in path order, within PER_PACKAGE_BYTES."""
    members = sorted(members, key=lambda m: m.name)
    if len(members) > PER_PACKAGE_FILES:
        step = len(members) / PER_PACKAGE_FILES
        members = [members[int(i * step)] for i in range(PER_PACKAGE_FILES)]
    out, total = [], 0
    for m in members:
        if total + m.size > PER_PACKAGE_BYTES:
            continue
        out.append(m)
        total += m.size
    return out


def make_corpus(cdir):
    """Fetch PACKAGES with npm pack into cdir/tgz (kept), extract the chosen files into
    cdir/files/<package>@<version>/; returns the manifest (also cdir/corpus.json)."""
    manifest_path = cdir / "corpus.json"
    want = {"packages": PACKAGES, "extensions": list(EXTENSIONS), "min_file": MIN_FILE,
            "per_package_files": PER_PACKAGE_FILES, "per_package_bytes": PER_PACKAGE_BYTES,
            "total_bytes": TOTAL_BYTES}
    if manifest_path.exists():
        m = json.loads(manifest_path.read_text())
        if m.get("selection") == want and (cdir / "files").is_dir():
            B.log(f"corpus: reusing {cdir} ({m['files']} files, {m['bytes'] / 1e6:.1f} MB)")
            return m
    tgz = cdir / "tgz"
    tgz.mkdir(parents=True, exist_ok=True)
    files = cdir / "files"
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir(parents=True)
    pkgs, total, nfiles = [], 0, 0
    for spec in PACKAGES:
        name, _, version = spec.rpartition("@")
        fname = name.lstrip("@").replace("/", "-") + f"-{version}.tgz"
        if not (tgz / fname).exists():
            B.log(f"corpus: npm pack {spec}")
            sh_out(["npm", "pack", spec, "--silent"], cwd=tgz)
        if not (tgz / fname).exists():
            raise RuntimeError(f"npm pack {spec} did not leave {fname} in {tgz}")
        sha = hashlib.sha256((tgz / fname).read_bytes()).hexdigest()
        base = name.lstrip("@").replace("/", "-") + "@" + version
        with tarfile.open(tgz / fname) as tf:
            cands = [m for m in tf.getmembers()
                     if m.isfile() and m.name.lower().endswith(EXTENSIONS) and m.size >= MIN_FILE
                     and all(c.isalnum() or c in "._@+/-" for c in m.name)]
            chosen, nb = [], 0
            for m in pick(cands):
                if total + nb + m.size > TOTAL_BYTES:
                    continue
                rel = m.name.split("/", 1)[1] if "/" in m.name else m.name  # drop npm's package/
                dst = files / base / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(tf.extractfile(m).read())
                chosen.append(m)
                nb += m.size
        by_ext = {}
        for m in chosen:
            e = Path(m.name).suffix.lower()
            by_ext[e] = by_ext.get(e, 0) + 1
        pkgs.append({"spec": spec, "tgz": fname, "sha256": sha, "candidates": len(cands), "files": len(chosen),
                     "bytes": nb, "by_ext": by_ext})
        total += nb
        nfiles += len(chosen)
        B.log(f"corpus: {spec}: {len(chosen)} of {len(cands)} files, {nb / 1e6:.1f} MB {by_ext}")
    m = {"selection": want, "packages": pkgs, "files": nfiles, "bytes": total}
    manifest_path.write_text(json.dumps(m, indent=1) + "\n")
    return m


def corpus_paths(cdir):
    """(URL path, file) of every corpus file, in path order."""
    root = cdir / "files"
    return [("/files/" + str(p.relative_to(root)), p) for p in sorted(root.rglob("*")) if p.is_file()]


# --------------------------------------------------------------------------
# caches with compression

class CEdgeCache(B.EdgeCache):
    """EdgeCache with its defaults: compression is on (DEFAULT_LEVELS: gzip 4, br 5, zstd 6)."""
    label = "EdgeCache (defaults)"


class CNginx(B.Nginx):
    label = f"nginx (proxy_cache, gzip on, level {NGINX_LEVEL})"

    def prepare(self, disk_bytes):
        super().prepare(disk_bytes)
        p = self.dir / "nginx.conf"
        conf = p.read_text()
        anchor = "    access_log off;\n"
        assert conf.count(anchor) == 1, "nginx.conf changed shape"
        types = " ".join(t for t in TYPES if t != "text/*") + " text/css text/javascript text/plain text/xml"
        gz = (f"    gzip on;\n    gzip_comp_level {NGINX_LEVEL};\n    gzip_min_length 1024;\n"
              f"    gzip_proxied any;\n    gzip_vary on;\n    gzip_buffers 32 16k;\n    gzip_types {types};\n")
        p.write_text(conf.replace(anchor, anchor + gz))


class CVarnish(B.Varnish):
    label = f"Varnish (do_gzip, gzip_level {VARNISH_LEVEL})"

    def prepare(self, disk_bytes):
        super().prepare(disk_bytes)
        (self.dir / "default.vcl").write_text(f"""vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{B.ORIGIN_PORT}"; }}
sub vcl_recv {{ set req.backend_hint = origin; }}
sub vcl_backend_response {{
    if (!beresp.http.Content-Encoding && beresp.http.Content-Type ~
            "^(text/|application/(javascript|json|xml|wasm)|image/svg\\+xml)") {{
        set beresp.do_gzip = true;
    }}
}}
""")

    def argv(self):
        return super().argv() + ["-p", f"gzip_level={VARNISH_LEVEL}", "-p", "http_gzip_support=on"]


class CTrafficServer(B.TrafficServer):
    label = "Traffic Server (compress plugin, gzip + br, cached)"

    def prepare(self, disk_bytes):
        super().prepare(disk_bytes)
        etc = self.dir / "etc"
        # Its compressed variants are alternates of one object (Vary: Accept-Encoding);
        # normalize_ae 2 reduces a request's Accept-Encoding to br, gzip or none before the lookup.
        with open(etc / "records.config", "a") as f:
            f.write("CONFIG proxy.config.http.normalize_ae INT 2\n")
        cts = "\n".join(f"compressible-content-type {t}" for t in TYPES)
        (etc / "compress.config").write_text(f"""enabled true
cache true
remove-accept-encoding true
{cts}
minimum-content-length 1024
supported-algorithms br,gzip
""")
        (etc / "plugin.config").write_text(f"/usr/lib/trafficserver/modules/compress.so {etc}/compress.config\n")


CACHE_TYPES = {c.name: c for c in (CEdgeCache, CNginx, CVarnish, CTrafficServer)}


# --------------------------------------------------------------------------
# load

def pinned(args, cmd):
    return ["sh", "-c", 'ulimit -n $(ulimit -Hn) && exec "$@"', "sh",
            "nice", "-n", str(B.NICE), "taskset", "-c", str(args.client_cpu)] + cmd


def wrk(args, port, script, lua_args, conns, duration, ae):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--timeout", "10s", "-s", str(B.HERE / script)]
    if ae:
        cmd += ["-H", f"Accept-Encoding: {ae}"]
    cmd += [f"http://127.0.0.1:{port}", "--"] + [str(x) for x in lua_args]
    r = subprocess.run(pinned(args, cmd), capture_output=True, text=True, timeout=duration + 60,
                       env=B.client_env(args))
    for line in r.stdout.splitlines():
        if line.startswith("WRKJSON "):
            w = json.loads(line[len("WRKJSON "):])
            w["errors"] = sum(w[k] for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
            w["err_detail"] = {k: w[k] for k in w if k.startswith("err_")}
            return w
    raise RuntimeError(f"wrk produced no result: rc={r.returncode} {r.stdout[-1000:]} {r.stderr[-1000:]}")


def wrk_pass(args, port, plist, conns, ae, limit=300):
    """One pass over every file (harness/corpus_pass.lua): wrk runs to its -d whatever its script
    does, so it is interrupted (SIGINT: it then prints its summary) when the script says every
    file has been answered; the pass's time is measured here, from start to that line."""
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{limit}s", "--timeout", "10s", "-s", str(B.HERE / "corpus_pass.lua")]
    if ae:
        cmd += ["-H", f"Accept-Encoding: {ae}"]
    cmd += [f"http://127.0.0.1:{port}", "--", str(plist)]
    t0 = time.time()
    p = subprocess.Popen(pinned(args, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=B.client_env(args), start_new_session=True)
    lines, t_done = [], None
    for line in p.stdout:
        lines.append(line)
        if line.startswith("PASSDONE") and t_done is None:
            t_done = time.time()
            os.killpg(p.pid, signal.SIGINT)
    p.wait(30)
    for line in lines:
        if line.startswith("WRKJSON "):
            w = json.loads(line[len("WRKJSON "):])
            w["errors"] = sum(w[k] for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
            w["err_detail"] = {k: w[k] for k in w if k.startswith("err_")}
            w["duration_us"] = int(((t_done or time.time()) - t0) * 1e6)
            w["complete"] = t_done is not None
            return w
    raise RuntimeError(f"wrk produced no result: rc={p.returncode} {''.join(lines)[-1500:]}")


def measured(cache, load):
    """bench.measure_round's counters (origin fetches, cgroup CPU and memory) around one load."""
    name = cache.name
    B.cg_reset_peak(name)
    B.pin_for_round(cache)
    o0, c0 = B.origin_requests(), B.cg_read(name)
    t0 = time.time()
    w = load()
    t1 = time.time()
    c1, o1 = B.cg_read(name), B.origin_requests()
    secs = w["duration_us"] / 1e6
    reqs = w["requests"]
    fetches = o1 - o0
    hits = max(reqs - fetches, 0)
    cpu_s = ((c1["cpu_ns"] or 0) - (c0["cpu_ns"] or 0)) / 1e9
    return {
        "cache": name, "seconds": secs, "requests": reqs, "req_per_s": reqs / secs if secs else 0.0,
        "mb_per_s": w["bytes"] / secs / 1e6 if secs else 0.0, "bytes": w["bytes"],
        "bytes_per_req": w["bytes"] / reqs if reqs else None,
        "p50_ms": w["p50_us"] / 1e3, "p99_ms": w["p99_us"] / 1e3, "p999_ms": w["p999_us"] / 1e3,
        "errors": w["errors"], "err_detail": w["err_detail"],
        "origin_fetches": fetches, "hit_ratio": hits / reqs if reqs else 0.0,
        "cpu_s": cpu_s, "cpu_cores": cpu_s / (t1 - t0),
        "cpu_us_per_req": cpu_s * 1e6 / reqs if reqs else None,
        "mem_peak_mib": (c1["mem_peak"] or 0) / 2**20, "rss_mib": (c1.get("rss") or 0) / 2**20,
        "failcnt_delta": (c1["failcnt"] or 0) - (c0["failcnt"] or 0), "oom_kill": c1["oom_kill"],
    }


def decode(coding, body):
    if coding in (None, "", "identity"):
        return body
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "br":
        import brotli  # python3-brotli (compress.sh installs it)
        return brotli.decompress(body)
    if coding == "zstd":
        return subprocess.run(["zstd", "-dcq"], input=body, capture_output=True, check=True).stdout
    raise ValueError(f"unknown coding {coding!r}")


def check(cache, row, paths):
    """Every file once over one connection with the row's Accept-Encoding: status 200, the
    decoded body equal to the file; the codings served and the body bytes."""
    ae = ROWS[row]
    o0 = B.origin_requests()
    conn = http.client.HTTPConnection("127.0.0.1", cache.port, timeout=30)
    codings, bad, body_bytes, file_bytes, first_bad = {}, 0, 0, 0, None
    for url, f in paths:
        hdrs = {"Accept-Encoding": ae} if ae else {}
        for attempt in range(2):
            try:
                conn.request("GET", url, headers=hdrs)
                r = conn.getresponse()
                body = r.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", cache.port, timeout=30)
                if attempt:
                    raise
        ce = (r.getheader("Content-Encoding") or "identity").strip().lower()
        codings[ce] = codings.get(ce, 0) + 1
        want = f.read_bytes()
        file_bytes += len(want)
        body_bytes += len(body)
        try:
            ok = r.status == 200 and decode(ce, body) == want
        except Exception as e:  # a body that does not decode
            ok = False
            first_bad = first_bad or f"{url}: {e}"
        if not ok:
            bad += 1
            first_bad = first_bad or f"{url}: status {r.status}, {ce}, {len(body)} bytes"
    conn.close()
    return {"kind": "check", "cache": cache.name, "row": row, "accept_encoding": ae, "files": len(paths),
            "bad": bad, "first_bad": first_bad, "codings": codings, "body_bytes": body_bytes,
            "file_bytes": file_bytes, "ratio": body_bytes / file_bytes if file_bytes else None,
            "origin_fetches": B.origin_requests() - o0}


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--caches", default="edgecache,nginx,ats,varnish",
                    help="comma list from edgecache,nginx,ats,varnish")
    ap.add_argument("--rows", default="gzip,br,browser,identity",
                    help="hit rows, comma list from " + ",".join(ROWS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk round")
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--warm-conns", type=int, default=32, help="connections of the miss and warm-up passes")
    ap.add_argument("--max-warm-passes", type=int, default=10)
    ap.add_argument("--sources", type=int, default=B.SOURCES,
                    help="loopback source addresses wrk spreads its connections over (1 = all from 127.0.0.1)")
    ap.add_argument("--corpus-dir", default="/var/tmp/edgecache-tools/compress-corpus",
                    help="npm packages and the extracted corpus (reused when present; outside the clone)")
    ap.add_argument("--skip-levels", action="store_true", help="no level sweep")
    ap.add_argument("--quick-levels", action="store_true", help="fewer levels in the sweep")
    ap.add_argument("--skip-caches", action="store_true", help="level sweep only")
    ap.add_argument("--mem-limit", type=int, default=None,
                    help="cgroup memory limit of every cache, bytes (default bench.py's MEM_MIB)")
    ap.add_argument("--mem", type=B.parse_mem, default={}, help="as bench.py's --mem")
    ap.add_argument("--cache-cpu", default="1")
    ap.add_argument("--client-cpu", default="0")
    ap.add_argument("--work", default="/var/tmp/ec-bench", help="cache storage and logs (on the disk)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", str(B.REPO / "target")))
    ap.add_argument("--keep-storage", action="store_true")
    ap.add_argument("--directio", "--nginx-directio", dest="directio", default="4k")
    ap.add_argument("--edge-directio", default=None)
    ap.add_argument("--ats-ram-cache", type=int, default=16 << 20)
    ap.add_argument("--ats-fragment", type=int, default=256 << 10)
    ap.add_argument("--edge-workers", type=int, default=1)
    ap.add_argument("--edge-config", default=None)
    ap.add_argument("--edge-b", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--note", default="", help="what else the machine was doing (recorded in the report)")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--run-id", default="compress-" + time.strftime("%Y%m%d-%H%M%S"))
    args = ap.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if set(rows) - set(ROWS):
        sys.exit(f"unknown --rows value; rows: {','.join(ROWS)}")
    B.NICE = args.nice
    work, emit, out_path = B.begin_run(args, [B.ORIGIN_PORT, B.EDGE_ADMIN_PORT, *B.PORTS.values()])

    cdir = Path(args.corpus_dir)
    manifest = make_corpus(cdir)
    paths = corpus_paths(cdir)
    plist = work / "corpus-paths.txt"
    plist.write_text("".join(u + "\n" for u, _ in paths))

    caches = []
    for n in [c for c in args.caches.split(",") if c] if not args.skip_caches else []:
        if n not in CACHE_TYPES:
            sys.exit(f"unknown cache {n}")
        c = CACHE_TYPES[n](args, work)
        if c.available():
            caches.append(c)
        else:
            B.log(f"SKIPPED {n}: {c.skip_reason or 'not installed'}")
            emit({"kind": "skipped", "cache": n, "reason": c.skip_reason or "not installed"})
    meta = B.machine_info(caches)
    meta.update({"args": vars(args), "mem_mib": {c.name: B.cache_mem(args, c.name) >> 20 for c in caches},
                 "rows": {r: ROWS[r] for r in rows}, "miss_accept_encoding": MISS_AE,
                 "labels": {c.name: c.label for c in caches}, "note": args.note,
                 "corpus": {k: manifest[k] for k in ("packages", "files", "bytes", "selection")}})
    emit(meta)
    B.log(f"run {args.run_id}: corpus {manifest['files']} files {manifest['bytes'] / 1e6:.1f} MB; caches "
          f"{[c.name for c in caches]}, rows {rows}, {args.rounds} rounds x {args.duration}s -c{args.connections}; "
          f"results -> {out_path}")

    if not args.skip_levels:
        exe = Path(args.target_dir) / "release" / "examples" / "compress_levels"
        if not exe.exists():
            B.log(f"SKIPPED level sweep: {exe} not built")
            emit({"kind": "skipped", "cache": "levels", "reason": f"{exe} not built"})
        else:
            B.log("level sweep (examples/compress_levels.rs, the data plane's encoder, on CPU "
                  f"{args.cache_cpu})")
            cmd = ["taskset", "-c", str(args.cache_cpu), str(exe), str(cdir / "files"), "--json"]
            if args.quick_levels:
                cmd.append("--quick")
            for line in sh_out(cmd, timeout=3600).splitlines():
                rec = json.loads(line)
                emit(rec)
                B.log(f"  {rec['coding']:5s} {rec['level']:2d}{' (1/' + str(rec['sample']) + ')' if rec['sample'] > 1 else '':7s} "
                      f"ratio {rec['ratio']:.4f} {rec['mb_per_cpu_s']:7.1f} MB/s"
                      f"{'  <- default' if rec['default'] else ''}")

    if not caches:
        emit.close()
        if not args.no_report:
            subprocess.run([sys.executable, str(B.HERE / "compress_report.py"), str(out_path)])
        return

    B.copy_binaries(args, work)
    # The origin also serves the corpus (--dir).
    ensure_origin = B.origin_keeper(work, emit, ["--dir", str(cdir / "files")])
    B.ensure_origin = ensure_origin
    ensure_origin()
    st, body, hd = B.http_get(f"http://127.0.0.1:{B.ORIGIN_PORT}{paths[0][0]}")
    if st != 200 or body != paths[0][1].read_bytes() or hd.get("Content-Encoding"):
        sys.exit(f"origin does not serve the corpus as it is: {st} {hd}")

    disk = 1 << 30
    live = []
    for c in caches:
        try:
            c.prepare(disk)
            B.cg_create(c.name, B.cache_mem(args, c.name))
            c.start()
            # The miss pass: every file once, cold, Accept-Encoding: gzip.
            r = measured(c, lambda c=c: wrk_pass(args, c.port, plist, args.warm_conns, MISS_AE))
            r.update({"kind": "compress_miss", "row": "miss", "accept_encoding": MISS_AE,
                      "connections": args.warm_conns, "files": len(paths)})
            emit(r)
            B.log(f"  miss {c.name:9s} {r['requests']} responses {r['req_per_s']:7.0f} req/s, {r['origin_fetches']} "
                  f"origin fetches, cpu {r['cpu_us_per_req']:.0f} us/req, {r['bytes_per_req'] / 1024:.1f} KiB/resp, "
                  f"err {r['errors']}")
            # Warm every row's variant until a pass makes no origin fetch.
            for row in dict.fromkeys(["gzip"] + rows):
                for i in range(1, args.max_warm_passes + 1):
                    w = measured(c, lambda c=c, row=row: wrk_pass(args, c.port, plist, args.warm_conns,
                                                                  ROWS[row]))
                    emit({**w, "kind": "compress_warm", "row": row, "pass": i})
                    if w["origin_fetches"] == 0 and w["errors"] == 0:
                        break
                else:
                    B.log(f"  warm {c.name} {row}: still {w['origin_fetches']} origin fetches after {i} passes")
                B.log(f"  warm {c.name} {row}: {i} passes, last {w['origin_fetches']} origin fetches")
            for row in rows:
                r = check(c, row, paths)
                emit(r)
                B.log(f"  check {c.name:9s} {row:8s}: {r['files'] - r['bad']}/{r['files']} ok, codings {r['codings']}, "
                      f"body {r['body_bytes'] / 1e6:.2f} MB of {r['file_bytes'] / 1e6:.2f} MB ({r['ratio']:.3f}), "
                      f"{r['origin_fetches']} origin fetches" + (f"; FIRST BAD {r['first_bad']}" if r["bad"] else ""))
            live.append(c)
        except Exception as e:
            B.log(f"SKIPPED {c.name}: {e}")
            emit({"kind": "skipped", "cache": c.name, "reason": str(e)[:2000]})
            c.stop()

    for row in rows:
        for rnd in range(args.rounds):
            order = live if rnd % 2 == 0 else list(reversed(live))
            B.log(f"  {row} round {rnd + 1}/{args.rounds}: {' '.join(c.name for c in order)}")
            for c in order:
                ensure_origin()
                if c.proc and c.proc.poll() is not None:
                    if not getattr(c, "death_reported", False):
                        c.death_reported = True
                        B.log(f"  {c.name} is DEAD (exit {c.proc.poll()}); skipped")
                        emit({"kind": "died", "cache": c.name, "what": row, "round": rnd, "exit": c.proc.poll(),
                              "cgroup": B.cg_read(c.name)})
                    continue
                try:
                    r = measured(c, lambda c=c, row=row: wrk(args, c.port, "corpus.lua", [plist, int(time.time())],
                                                             args.connections, args.duration, ROWS[row]))
                except Exception as e:
                    B.log(f"  {c.name}: {row} round failed: {e}")
                    emit({"kind": "error", "cache": c.name, "what": row, "round": rnd, "error": str(e)[:2000]})
                    continue
                r.update({"kind": "compress_round", "row": row, "accept_encoding": ROWS[row], "round": rnd,
                          "connections": args.connections, "sources": args.sources})
                if c.proc and c.proc.poll() is not None:
                    r["died"] = True
                emit(r)
                B.log(f"    {c.name:9s} {r['req_per_s']:9.0f} req/s {r['mb_per_s']:7.0f} MB/s "
                      f"{r['bytes_per_req'] / 1024:6.1f} KiB/resp p99 {r['p99_ms']:7.2f} ms hit {r['hit_ratio']:.4f} "
                      f"cpu {r['cpu_cores']:.2f} cores {(r['cpu_us_per_req'] or 0):.1f} us/req err {r['errors']}")
    for c in live:
        if isinstance(c, B.EdgeCache):
            try:
                txt = B.http_get(f"http://127.0.0.1:{c.admin_port}/metrics", 5)[1].decode(errors="replace")
                emit({"kind": "edge_metrics", "cache": c.name,
                      "lines": [ln for ln in txt.splitlines() if "compress" in ln and not ln.startswith("#")][:200]})
            except Exception as e:
                B.log(f"  edgecache metrics: {e}")
        emit({"kind": "cgroup_final", "cache": c.name, "cgroup": B.cg_read(c.name)})
        c.stop()
    ensure_origin.stop()
    emit.close()
    B.log(f"results: {out_path}")
    if not args.no_report:
        r = subprocess.run([sys.executable, str(B.HERE / "compress_report.py"), str(out_path)])
        if r.returncode != 0:
            B.log("report failed")


if __name__ == "__main__":
    main()
