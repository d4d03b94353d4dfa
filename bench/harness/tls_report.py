#!/usr/bin/env python3
"""Turn an HTTPS results file (bench/results/tls-<run>.jsonl, from harness/tls.py) into the
generated HTTPS section of bench/BENCHMARKS.md: req/s and p99 per size and protocol against
nginx and Traffic Server, and new TLS connections per second.

    python3 bench/harness/tls_report.py bench/results/tls-<run>.jsonl [--md bench/BENCHMARKS.md] [--no-md]
"""

import argparse
from collections import defaultdict
from pathlib import Path

from report import LABEL, SIZE_ORDER, f, load, med, memory, sources

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
BEGIN = "<!-- BEGIN GENERATED HTTPS (bench/harness/tls_report.py) -->"
END = "<!-- END GENERATED HTTPS -->"
ORDER = ["edgecache", "edgecache-b", "ats", "nginx"]
PROTO = {"h1": "HTTP/1.1 (wrk)", "h2": "HTTP/2 (h2load)"}


def ratios(rs, key, c, base, invert=False):
    """Median over rounds of c's `key` / base's `key` (base / c when `invert`, for latency)."""
    by_round = defaultdict(dict)
    for r in rs:
        by_round[r["round"]][r["cache"]] = r
    xs = []
    for rd in by_round.values():
        if c in rd and base in rd and rd[base][key] and rd[c][key]:
            xs.append(rd[base][key] / rd[c][key] if invert else rd[c][key] / rd[base][key])
    return med(xs)


def x(v):
    return "–" if v is None else f"{v:.2f}x"


def ab_row(ab, row, metric, rs, key):
    """The A/B line of one row when both EdgeCache builds ran it."""
    if not any(r["cache"] == "edgecache-b" for r in rs) or not any(r["cache"] == "edgecache" for r in rs):
        return
    vs = [ratios(rs, key, c, b) for b in ("nginx", "ats") for c in ("edgecache", "edgecache-b")]
    cpu = ratios(rs, "cpu_us_per_req", "edgecache", "edgecache-b")
    ab.append((row, metric, ratios(rs, key, "edgecache", "edgecache-b"), cpu, vs))


def build(recs):
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    args, tls = meta.get("args", {}), meta.get("tls", {})
    run = meta.get("run_id", "?")
    out = []
    w = out.append
    w(f"## HTTPS run {run}{' (quick mode: small sets, short rounds; not reference figures)' if meta.get('quick') else ''}")
    w("")
    w(f"- Date: {meta.get('date', '?')}; machine: {meta.get('cpu', '?')}, {meta.get('cores', '?')} cores, "
      f"{meta.get('os', '?')}, kernel {meta.get('host_kernel', '?')}; load average at start: "
      f"{' '.join(meta.get('loadavg', []))}")
    w("- Versions: " + ", ".join(f"{LABEL.get(k, k)} {v}" for k, v in meta.get("versions", {}).items()))
    w(f"- TLS: {tls.get('version')} {tls.get('suite')}, key exchange {tls.get('group')}; one {tls.get('certificate')} "
      f"certificate per run on every server (fingerprint {tls.get('fingerprint', '?')[:23]}...); Host "
      f"`{tls.get('host')}`.")
    w(f"- Setup: {memory(meta)}, each cache pinned to CPU "
      f"{args.get('cache_cpu')}, load generators on CPU {args.get('client_cpu')}; HTTP/1.1: wrk -t1 "
      f"-c{args.get('connections')}; HTTP/2: {args.get('h2_conns')} h2load processes x 1 connection x "
      f"{args.get('h2_streams')} streams; new connections: wrk -c{args.get('connections')} with "
      f"`Connection: close`; {args.get('rounds')} interleaved rounds of {args.get('duration')} s; "
      f"{sources(args)}. "
      "Medians over rounds; ratios are medians of per-round ratios (p99 ratio = other's p99 / EdgeCache's: "
      "above 1 means EdgeCache's is lower).")
    for s in [r for r in recs if r.get("kind") == "skipped"]:
        w(f"- **Skipped {LABEL.get(s['cache'], s['cache'])}**{' at ' + s['size'] if s.get('size') else ''}: "
          f"{s['reason'].splitlines()[0][:300]}")
    for d in [r for r in recs if r.get("kind") == "died"]:
        cg = d.get("cgroup") or {}
        w(f"- **{LABEL.get(d['cache'], d['cache'])} died** in {d.get('what')} round {d.get('round', 0) + 1} "
          f"(exit {d.get('exit')}, oom_kill {cg.get('oom_kill')}); later rounds are missing from its medians.")
    w("")
    probes = [r for r in recs if r.get("kind") == "tls_probe"]
    if probes:
        w("### What each server negotiated (openssl s_client, curl)")
        w("")
        w("| cache | version | suite | group | ALPN | certificate | HTTP/1.1 GET | HTTP/2 GET |")
        w("|---|---|---|---|---|---|---|---|")
        seen = set()
        for p in sorted(probes, key=lambda r: ORDER.index(r["cache"])):
            row = (p["cache"], p.get("protocol"), p.get("suite"), p.get("group"), p.get("alpn"))
            if row in seen:
                continue
            seen.add(row)
            w(f"| {LABEL[p['cache']]} | {p.get('protocol')} | {p.get('suite')} | {p.get('group')} | {p.get('alpn')} | "
              f"{p.get('verification')} | {p.get('curl_h1')} | {p.get('curl_h2')} |")
        w("")
    rounds = [r for r in recs if r.get("kind") == "tls_round" and not r.get("died")]
    goal = []
    ab = []  # (row, metric, EdgeCache / EdgeCache (B), each build's ratios against nginx and ATS)
    if rounds:
        w("### HTTPS hits (warm cache)")
        w("")
        groups = defaultdict(list)
        for r in rounds:
            groups[(r["size"], r["proto"], r["dist"])].append(r)
        for key in sorted(groups, key=lambda k: (SIZE_ORDER.index(k[0]), k[1], k[2] != "uniform")):
            rs = groups[key]
            size, proto, dist = key
            w(f"**{size} x {rs[0]['count']:,}, {PROTO[proto]}, {dist}**")
            w("")
            w("| cache | req/s | MB/s | p50 ms | p99 ms | p99.9 ms | hit ratio | CPU µs/req | CPU cores | peak MiB | "
              "failcnt | errors | req/s vs nginx | req/s vs ATS | p99 vs nginx | p99 vs ATS |")
            w("|---|" + "---|" * 15)
            for c in [c for c in ORDER if any(r["cache"] == c for r in rs)]:
                cr = [r for r in rs if r["cache"] == c]
                w(f"| {LABEL[c]} | {f(med([r['req_per_s'] for r in cr]))} | {f(med([r['mb_per_s'] for r in cr]))} | "
                  f"{med([r['p50_ms'] for r in cr]):.2f} | {med([r['p99_ms'] for r in cr]):.2f} | "
                  f"{med([r['p999_ms'] for r in cr]):.2f} | {med([r['hit_ratio'] for r in cr]):.4f} | "
                  f"{f(med([r['cpu_us_per_req'] for r in cr]), 1)} | {med([r['cpu_cores'] for r in cr]):.2f} | "
                  f"{max(r['mem_peak_mib'] for r in cr):.0f} | {max((r['failcnt'] or 0) for r in cr)} | "
                  f"{sum(r['errors'] for r in cr)} | "
                  + " | ".join("1.00x" if c == b else x(ratios(rs, k, c, b, inv))
                               for k, inv in (("req_per_s", False), ("p99_ms", True)) for b in ("nginx", "ats"))
                  + " |")
            if any(r["cache"] == "edgecache" for r in rs):
                for b in ("nginx", "ats"):
                    q, p = ratios(rs, "req_per_s", "edgecache", b), ratios(rs, "p99_ms", "edgecache", b, True)
                    if q is not None:
                        goal.append((f"{size} {proto} {dist} vs {LABEL[b]}", q, p, None))
            ab_row(ab, f"{size} {proto} {dist}", "req/s", rs, "req_per_s")
            w("")
        w("hit ratio = 1 − origin fetches / requests in the round (the origin's own count). CPU µs/req = the "
          "cgroup's CPU time / requests. HTTP/2 latency: h2load's per-request log (stream open to close).")
        w("")
    hs = [r for r in recs if r.get("kind") == "tls_handshake" and not r.get("died")]
    if hs:
        w("### New TLS connections per second (one 1 KiB hit per connection, `Connection: close`)")
        w("")
        w("| handshakes | cache | connections/s | CPU µs per connection | CPU cores | request p99 ms | errors | "
          "EdgeCache resumed | vs nginx | vs ATS |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for mode in ("full", "resumed"):
            rs = [r for r in hs if r["mode"] == mode]
            for c in [c for c in ORDER if any(r["cache"] == c for r in rs)]:
                cr = [r for r in rs if r["cache"] == c]
                res = "–"
                et = [r.get("edge_tls") for r in cr if r.get("edge_tls")]
                if et:
                    tot = sum(sum(v for k, v in e.items() if k == 'tls_handshakes{result="ok"}') for e in et)
                    rsm = sum(sum(v for k, v in e.items() if k.startswith("tls_resumed")) for e in et)
                    res = f"{rsm:,.0f} of {tot:,.0f}" if tot else "–"
                w(f"| {mode} | {LABEL[c]} | {f(med([r['handshakes_per_s'] for r in cr]))} | "
                  f"{f(med([r['cpu_us_per_handshake'] for r in cr]), 1)} | {med([r['cpu_cores'] for r in cr]):.2f} | "
                  f"{med([r['p99_ms'] for r in cr]):.2f} | {sum(r['errors'] for r in cr)} | {res} | "
                  + " | ".join("1.00x" if c == b else x(ratios(rs, "handshakes_per_s", c, b)) for b in ("nginx", "ats"))
                  + " |")
                if c == "edgecache":
                    ab_row(ab, f"new connections, {mode} handshakes", "connections/s", rs, "handshakes_per_s")
                    # Below 0.9 of its core, EdgeCache did not set the rate (the load generator's
                    # core did): its CPU per connection against the other's is the comparison.
                    cores = med([r["cpu_cores"] for r in cr])
                    for b in ("nginx", "ats"):
                        q = ratios(rs, "handshakes_per_s", c, b)
                        cpu = ratios(rs, "cpu_us_per_handshake", c, b, True) if cores < 0.9 else None
                        if q is not None:
                            goal.append((f"new connections, {mode} handshakes, vs {LABEL[b]}", q, None,
                                         (cpu, cores) if cpu is not None else None))
        w("")
        w("full = no resumption (wrk with harness/tls.py's shim that drops the session wrk keeps on reconnect); "
          "resumed = wrk as shipped, which offers its last session's ticket on every reconnect. "
          "CPU µs per connection = the server cgroup's CPU time / connections: when the server core is not "
          "saturated (CPU cores well below 1) the load generator's core set the rate, and this column is the "
          "comparison.")
        w("")
    if ab:
        w("### A/B: two EdgeCache builds in the same rounds (--edge-b)")
        w("")
        args_b = meta.get("args", {})
        w(f"EdgeCache = `{args_b.get('target_dir')}`, EdgeCache (B) = `{args_b.get('edge_b')}`; versions above. "
          "Each ratio is the median of per-round ratios.")
        w("")
        w("| row | metric | EdgeCache / (B) | CPU µs/req EdgeCache / (B) | EdgeCache vs nginx | (B) vs nginx | "
          "EdgeCache vs ATS | (B) vs ATS |")
        w("|---|---|---|---|---|---|---|---|")
        for row, metric, q, cpu, vs in ab:
            w(f"| {row} | {metric} | {x(q)} | {x(cpu)} | " + " | ".join(x(v) for v in vs) + " |")
        w("")
    if goal:
        w("### Issue 17 §5 goal: EdgeCache ahead of nginx and Traffic Server in every row")
        if meta.get("quick"):
            w("")
            w("Quick mode: indicative only.")
        w("")
        for name, q, p, bound in goal:
            if bound:
                cpu, cores = bound
                w(f"- {name}: {'met' if cpu > 1 else 'NOT met'} by CPU per connection (the other's is {cpu:.2f}x EdgeCache's; "
                  f"the rate was the load generator's: req/s {q:.2f}x with EdgeCache at {cores:.2f} cores)")
                continue
            ok = q > 1 and (p is None or p > 1)
            w(f"- {name}: {'met' if ok else 'NOT met'} (req/s {q:.2f}x" + (f", p99 {p:.2f}x" if p else "") + ")")
        w("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md", default=str(BENCH / "BENCHMARKS.md"))
    ap.add_argument("--no-md", action="store_true")
    a = ap.parse_args()
    text = build(load(a.results))
    if a.no_md:
        print(text)
        return
    md = Path(a.md)
    cur = md.read_text() if md.exists() else "# EdgeCache benchmarks\n"
    if BEGIN in cur and END in cur:
        new = f"{cur.split(BEGIN)[0]}{BEGIN}\n{text}\n{END}{cur.split(END, 1)[1]}"
    else:
        new = f"{cur.rstrip()}\n\n{BEGIN}\n{text}\n{END}\n"
    md.write_text(new)
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
