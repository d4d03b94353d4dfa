#!/usr/bin/env python3
"""Turn a results file (bench/results/<run>.jsonl) into the generated section of
bench/BENCHMARKS.md and a PNG chart.

    python3 bench/harness/report.py bench/results/<run>.jsonl [--md bench/BENCHMARKS.md] [--no-md]
"""

import argparse
import json
import shutil
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
BEGIN = "<!-- BEGIN GENERATED (bench/harness/report.py) -->"
END = "<!-- END GENERATED -->"
ORDER = ["edgecache", "edgecache-b", "ats", "nginx", "varnish"]
# (LABEL below is also the set of known cache names)
LABEL = {"edgecache": "EdgeCache", "edgecache-b": "EdgeCache (B)", "ats": "Traffic Server", "nginx": "nginx",
         "varnish": "Varnish"}
SIZE_ORDER = ["4k", "4k-ram", "100k", "1m"]
# What a row is, where its name does not say (bench.py ROW_OBJECT, RESIDENT).
ROW_TITLE = {"4k-ram": "4 KiB hits from RAM (every object resident; page cache not dropped)"}
FIO_BS = {"4k": "4k", "100k": "128k", "1m": "1m"}
CEILING = "ceiling"
CEILING_LABEL = "nginx static file from RAM (ceiling)"



def sources(args):
    """Where the load generators' connections came from (bench.py --sources)."""
    n = args.get("sources") or 1
    return ("connections from 127.0.0.1 alone" if n <= 1
            else f"connections spread over {n} loopback client addresses (harness/srcaddr.c)")

def memory(meta):
    """What memory each cache's cgroup had (bench.py cache_mem); older runs had one limit."""
    per = meta.get("mem_mib")
    if per:
        return "memory cgroups (v1): " + ", ".join(f"{LABEL.get(c, c)} {m} MiB" for c, m in per.items())
    return f"a {meta.get('args', {}).get('mem_limit', 0) // 2**20} MiB memory cgroup (v1) each"


def object_size(r):
    """The object size of a round (older runs' rows were object sizes)."""
    return r.get("object_size") or r["size"]


def ceilings(recs):
    """The ceiling record per object size (measured once, before the rows)."""
    return {r["size"]: r for r in recs if r.get("kind") == "ceiling"}


def ceiling_rounds(recs, rs):
    """The ceiling measured in the rounds of the row of rounds `rs` (bench.py `ceiling_round`:
    the RAM rows), by round; empty for other rows and older runs."""
    row, dist = rs[0]["size"], rs[0]["dist"]
    return {r["round"]: r for r in recs
            if r.get("kind") == "ceiling_round" and r.get("row") == row and r.get("dist") == dist}


def row_ceiling(recs, rs):
    """The ceiling of the row of rounds `rs`: the medians of the ceiling in its own rounds where
    it ran in them, else the one measured before the rows (None without either)."""
    cr = ceiling_rounds(recs, rs)
    if cr:
        keys = ("req_per_s", "mb_per_s", "p50_ms", "p99_ms", "cpu_cores", "cpu_us_per_req")
        return {**{k: med([r[k] for r in cr.values()]) for k in keys}, "in_rounds": len(cr)}
    return ceilings(recs).get(object_size(rs[0]))


def vs_ceiling(recs, rs, cache):
    """`cache`'s req/s against the row's ceiling: the median of per-round ratios where the ceiling
    ran in the row's rounds, else its median against the ceiling measured before the rows."""
    cr = ceiling_rounds(recs, rs)
    if cr:
        return med([r["req_per_s"] / cr[r["round"]]["req_per_s"] for r in rs
                    if r["cache"] == cache and r["round"] in cr and cr[r["round"]]["req_per_s"]])
    c = ceilings(recs).get(object_size(rs[0]))
    e = med([r["req_per_s"] for r in rs if r["cache"] == cache])
    return e / c["req_per_s"] if (e and c and c.get("req_per_s")) else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, nd=0):
    if x is None:
        return "–"
    if isinstance(x, float) and nd == 0 and abs(x) < 10:
        return f"{x:.2f}"
    return f"{x:,.{nd}f}"


def load(path):
    recs = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line:
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return recs


def died_records(recs):
    """`died` records; older runs stored the cgroup counters flat, clobbering `cache`."""
    out = []
    for d in [r for r in recs if r.get("kind") == "died"]:
        d = dict(d)
        if d.get("cache") not in LABEL:
            m = next((r for r in recs if r.get("kind") == "round" and r.get("died") and r["size"] == d["size"]
                      and r["dist"] == d["dist"] and r["round"] == d["round"]), None)
            d["cache"] = m["cache"] if m else "?"
        out.append(d)
    # A cache that was OOM-killed outside a round (older runs did not record that).
    for f in [r for r in recs if r.get("kind") == "cgroup_final"]:
        cg = f.get("cgroup") or f
        if (cg.get("oom_kill") or 0) > 0 and f.get("cache") in LABEL and not any(
                d["cache"] == f["cache"] and d["size"] == f["size"] for d in out):
            out.append({"cache": f["cache"], "size": f["size"], "dist": "(between rounds)", "round": -1,
                        "exit": "?", "cgroup": cg})
    return out


def caches_in(recs):
    seen = {r["cache"] for r in recs if "cache" in r and r.get("kind") in ("round", "warm", "coalesce")}
    return [c for c in ORDER if c in seen]


def round_ratio(rs, cache, base):
    """Median of per-round req/s ratios of `cache` against `base` in one row."""
    by_round = defaultdict(dict)
    for r in rs:
        by_round[r["round"]][r["cache"]] = r
    xs = [v[cache]["req_per_s"] / v[base]["req_per_s"] for v in by_round.values()
          if cache in v and base in v and v[base]["req_per_s"] > 0]
    return med(xs)


def lead_table(recs, caches):
    """The one current table BENCHMARKS.md leads with: req/s of every cache in every row (hits from
    disk and RAM, misses), EdgeCache's ratios, and the static-file ceiling."""
    rounds = [r for r in recs if r.get("kind") == "round" and not r.get("died")]
    miss = [r for r in recs if r.get("kind") == "miss"]
    peers = [c for c in caches if c != "edgecache"]
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    out = [f"### The current figures: req/s, one core per cache, {sources(meta.get('args', {}))}", ""]
    w = out.append
    w("| row | " + " | ".join(LABEL[c] for c in caches) + " | ceiling | "
      + " | ".join(f"EdgeCache vs {LABEL[c]}" for c in peers) + " | EdgeCache vs ceiling |")
    w("|---|" + "---|" * (len(caches) + 1 + len(peers) + 1))
    rows = defaultdict(list)
    for r in rounds:
        rows[(r["size"], r["dist"])].append(r)

    def ratio_cell(x):
        return "–" if x is None else f"{x:.2f}x"

    for (size, dist) in sorted(rows, key=lambda k: (SIZE_ORDER.index(k[0]), k[1] != "uniform", k[1])):
        rs = rows[(size, dist)]
        where = "RAM" if size in ROW_TITLE else "disk"
        c_r = row_ceiling(recs, rs)
        cells = [f(med([r["req_per_s"] for r in rs if r["cache"] == c])) for c in caches]
        vs_ceil = vs_ceiling(recs, rs, "edgecache")
        w(f"| hits from {where}, {object_size(rs[0])} x {rs[0].get('count', 0):,}, {dist} | " + " | ".join(cells)
          + f" | {f(c_r['req_per_s']) if c_r else '–'} | "
          + " | ".join(ratio_cell(round_ratio(rs, "edgecache", c)) for c in peers)
          + f" | {'–' if vs_ceil is None else f'{vs_ceil:.2f}x'} |")
    miss_rounds = [r for r in recs if r.get("kind") == "miss_round"]
    for size in SIZE_ORDER:
        if size in ROW_TITLE:  # a resident row's misses are the plain row's again
            continue
        mr = [r for r in miss_rounds if r["size"] == size]
        ms = {r["cache"]: r for r in miss if r["size"] == size}
        if mr:
            # Interleaved rounds of new ids: medians, and medians of per-round ratios.
            cells = [f(med([r["req_per_s"] for r in mr if r["cache"] == c])) if any(
                r["cache"] == c for r in mr) else "–" for c in caches]
            ratios = [ratio_cell(round_ratio(mr, "edgecache", c)) for c in peers]
            rounds_n = len({r["round"] for r in mr})
            w(f"| misses, {size} ({rounds_n} rounds of {mr[0]['count']:,} new objects, 32 connections) | "
              + " | ".join(cells) + " | – | " + " | ".join(ratios) + " | – |")
            continue
        if not ms:
            continue
        e = ms.get("edgecache")
        cells = [f(ms[c]["req_per_s"]) if c in ms else "–" for c in caches]
        ratios = [ratio_cell(e["req_per_s"] / ms[c]["req_per_s"])
                  if e and c in ms and ms[c]["req_per_s"] else "–" for c in peers]
        count = next(iter(ms.values()))["count"]
        w(f"| misses, {size} x {count:,} (first pass, 32 connections) | " + " | ".join(cells) + " | – | "
          + " | ".join(ratios) + " | – |")
    w("")
    in_rounds = any(r.get("kind") == "ceiling_round" for r in recs)
    miss_how = ("medians over interleaved rounds and of per-round ratios, as the hit rows'" if miss_rounds
                else "one pass each")
    w("A ratio below 1.00x is a row where EdgeCache loses. Hit rows: medians of per-round ratios; miss rows: "
      + miss_how + ". The ceiling is nginx serving one static file of the row's size from RAM on the same core"
      + ("; in the RAM rows it ran in every round beside the caches (its median, and the median of per-round "
         "ratios), elsewhere once before the rows" if in_rounds else "") + ". Details of every row follow.")
    w("")
    return out


def build(recs, png_rel):
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    args = meta.get("args", {})
    rounds = [r for r in recs if r.get("kind") == "round" and not r.get("died")]
    caches = caches_in(recs)
    out = []
    w = out.append
    run = meta.get("run_id", "?")
    w(f"## Run {run}{' (quick mode: small sets, short rounds; not the reference figures)' if meta.get('quick') else ''}")
    w("")
    w(f"- Date: {meta.get('date', '?')}; machine: {meta.get('cpu', '?')}, {meta.get('cores', '?')} cores, "
      f"{meta.get('mem_gib', '?')} GiB, {meta.get('os', '?')}, kernel {meta.get('host_kernel', '?')}; "
      f"disk: {meta.get('disk', '?')}; load average at start: {' '.join(meta.get('loadavg', []))}")
    v = meta.get("versions", {})
    w("- Versions: " + ", ".join(f"{LABEL.get(k, k)} {val}" for k, val in v.items()))
    w(f"- Setup: {memory(meta)}, each cache pinned to CPU "
      f"{args.get('cache_cpu')}; wrk -t1 -c{args.get('connections')} pinned to CPU {args.get('client_cpu')}; "
      f"{args.get('rounds')} interleaved rounds of {args.get('duration')} s per distribution "
      f"(A B C D, D C B A, ...); caches warmed until a pass makes no origin fetch; page cache dropped "
      f"before the rounds (except for RAM-hit rows); zipf s={args.get('zipf_s')}; {sources(args)}. Medians over rounds; ratios are medians "
      "of per-round ratios.")
    w("- Access logs: off in every cache (nginx `access_log off`, Traffic Server `logging_enabled 0`, "
      "Varnish without varnishncsa, EdgeCache `--access-log off`).")
    skipped = [r for r in recs if r.get("kind") == "skipped"]
    for s in skipped:
        w(f"- **Skipped {LABEL.get(s['cache'], s['cache'])}**{' at ' + s['size'] if s.get('size') else ''}: "
          f"{s['reason'].splitlines()[0][:300]}")
    for d in died_records(recs):
        cg = d.get("cgroup") or d
        where = (f"warm-up pass {d['round'] + 1}" if d["dist"] == "warm-up" else
                 f"{d['dist']} round {d['round'] + 1}" if d["round"] >= 0 else d["dist"])
        w(f"- **{LABEL.get(d['cache'], d['cache'])} died** at {d['size']} {where} "
          f"(exit {d.get('exit')}, cgroup oom_kill {cg.get('oom_kill')}, failcnt {cg.get('failcnt')}); "
          f"that round and later ones are missing from its medians.")
    died_at = {(d["cache"], d["size"]) for d in died_records(recs)}
    for c in ORDER:
        for size in SIZE_ORDER:
            warmed = any(r.get("kind") == "warm" and r.get("cache") == c and r.get("size") == size for r in recs)
            measured = any(r["cache"] == c and r["size"] == size for r in rounds)
            skipped_here = any(r.get("kind") == "skipped" and r.get("cache") == c and r.get("size") == size
                               for r in recs)
            if warmed and not measured and not skipped_here and (c, size) not in died_at:
                w(f"- **{LABEL[c]}: no measured round at {size}**: the process had exited after the warm-up "
                  f"(see results/{run}.log and the kernel log for an OOM kill)")
    w("")

    if rounds:
        out += lead_table(recs, caches)

    # Machine limits.
    fio = [r for r in recs if r.get("kind") == "fio" and "mb_per_s" in r]
    if fio:
        w("### Machine limits: fio random reads, O_DIRECT (MB/s, IOPS)")
        w("")
        engines = [e for e in ("io_uring", "libaio", "psync") if any(r["engine"] == e for r in fio)]
        w("| block | " + " | ".join(f"{e}" for e in engines) + " |")
        w("|---|" + "---|" * len(engines))
        for bs in ("4k", "128k", "1m"):
            cells = []
            for e in engines:
                r = next((x for x in fio if x["bs"] == bs and x["engine"] == e), None)
                cells.append(f"{r['mb_per_s']:.0f} MB/s ({r['iops']:.0f} IOPS)" if r else "–")
            w(f"| {bs} | " + " | ".join(cells) + " |")
        w("")
        w("io_uring and libaio at iodepth 32, psync with 4 jobs. One run each, so the disk's swings show.")
        w("")
    ceil = [r for r in recs if r.get("kind") == "ceiling"]
    if ceil:
        w("### Loopback ceiling: nginx serving one file from RAM (same core and wrk setup)")
        w("")
        w("| size | req/s | MB/s | p50 ms | p99 ms | CPU µs/req |")
        w("|---|---|---|---|---|---|")
        for r in sorted(ceil, key=lambda r: SIZE_ORDER.index(r["size"])):
            w(f"| {r['size']} | {r['req_per_s']:,.0f} | {r['mb_per_s']:,.0f} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['cpu_us_per_req']:.1f} |")
        w("")
        again = defaultdict(list)
        for r in recs:
            if r.get("kind") == "ceiling_round":
                again[(r["row"], r["dist"])].append(r)
        for (row, dist), rs in sorted(again.items()):
            w(f"Measured again in each round of the {row} {dist} row, beside the caches: "
              + ", ".join(f"{r['req_per_s']:,.0f}" for r in sorted(rs, key=lambda r: r["round"]))
              + " req/s (that row's ratios use these).")
            w("")

    # Hits.
    if rounds:
        w("### Hits (warm cache)")
        w("")
        groups = defaultdict(list)
        for r in rounds:
            groups[(r["size"], r["dist"])].append(r)
        for (size, dist) in sorted(groups, key=lambda k: (SIZE_ORDER.index(k[0]), k[1] != "uniform", k[1])):
            rs = groups[(size, dist)]
            count = rs[0].get("count")
            ceil_r = row_ceiling(recs, rs)
            w(f"**{size} x {count:,}, {dist}{': ' + ROW_TITLE[size] if size in ROW_TITLE else ''}**")
            w("")
            w("| cache | req/s | MB/s | p50 ms | p99 ms | p99.9 ms | hit ratio | CPU µs/hit | core µs/hit | CPU cores | "
              "disk MB/s | peak MiB | failcnt | errors | req/s vs nginx | req/s vs ATS | req/s vs ceiling |")
            w("|---|" + "---|" * 16)
            by_round = defaultdict(dict)
            for r in rs:
                by_round[r["round"]][r["cache"]] = r
            for c in caches:
                cr = [r for r in rs if r["cache"] == c]
                if not cr:
                    continue

                def ratio(base):
                    xs = [by_round[k][c]["req_per_s"] / by_round[k][base]["req_per_s"]
                          for k in by_round if c in by_round[k] and base in by_round[k]
                          and by_round[k][base]["req_per_s"] > 0]
                    return f"{med(xs):.2f}x" if xs else "–"

                def vs_ceil(c):
                    x = vs_ceiling(recs, rs, c)
                    return "–" if x is None else f"{x:.2f}x"

                w(f"| {LABEL[c]} | {f(med([r['req_per_s'] for r in cr]))} | {f(med([r['mb_per_s'] for r in cr]))} | "
                  f"{med([r['p50_ms'] for r in cr]):.2f} | {med([r['p99_ms'] for r in cr]):.2f} | "
                  f"{med([r['p999_ms'] for r in cr]):.2f} | {med([r['hit_ratio'] for r in cr]):.4f} | "
                  f"{f(med([r['cpu_us_per_hit'] for r in cr]), 1)} | "
                  f"{f(med([r.get('core_us_per_hit') for r in cr if r.get('core_us_per_hit')]), 1)} | "
                  f"{med([r['cpu_cores'] for r in cr]):.2f} | "
                  f"{f(med([r['disk_read_mb_s'] for r in cr]))} | {max(r['mem_peak_mib'] for r in cr):.0f} | "
                  f"{max((r['failcnt'] or 0) for r in cr)} | {sum(r['errors'] for r in cr)} | "
                  f"{ratio('nginx') if c != 'nginx' else '1.00x'} | {ratio('ats') if c != 'ats' else '1.00x'} | "
                  f"{vs_ceil(c)} |")
            if ceil_r:
                where = ", in the same rounds" if ceil_r.get("in_rounds") else ""
                w(f"| {CEILING_LABEL}{where} | {f(ceil_r['req_per_s'])} | {f(ceil_r['mb_per_s'])} | {ceil_r['p50_ms']:.2f} | "
                  f"{ceil_r['p99_ms']:.2f} | – | – | {f(ceil_r['cpu_us_per_req'], 1)} (per request) | – | "
                  f"{ceil_r['cpu_cores']:.2f} | – | – | – | – | – | – | 1.00x |")
            w("")
        w("CPU µs/hit = the cgroup's CPU time (cpuacct) / hits, hits = wrk requests − origin fetches in the round. "
          "core µs/hit = the busy time of the cache's core (/proc/stat) / hits: it adds the kernel's threads on that "
          "core, which no cgroup is charged for (the block layer's workers that submit Traffic Server's threaded reads). "
          "disk MB/s = reads on the block device during the round (/proc/diskstats). peak = the cgroup's "
          "memory.max_usage_in_bytes in the round (page cache included); failcnt = memory.failcnt (cumulative).")
        w("")

    miss = [r for r in recs if r.get("kind") == "miss"]
    if miss:
        w("### Miss path (first pass over a cold cache, origin → cache → client, 32 connections)")
        w("")
        w("| cache | size | objects | req/s | MB/s | first byte p50 ms | first byte p99 ms | bad bodies |")
        w("|---|---|---|---|---|---|---|---|")
        for r in sorted(miss, key=lambda r: (SIZE_ORDER.index(r["size"]), ORDER.index(r["cache"]))):
            w(f"| {LABEL[r['cache']]} | {r['size']} | {r['count']:,} | {r['req_per_s']:,.0f} | {r['mb_per_s']:,.0f} | "
              f"{r['ttfb']['p50_ms']:.2f} | {r['ttfb']['p99_ms']:.2f} | {r['bad_body']} |")
        w("")
    mr = [r for r in recs if r.get("kind") == "miss_round"]

    def cpu_per_miss(rs):
        """The cache's CPU per miss over a round (recorded from s32 on), median; – before."""
        v = [r["cpu_us_per_miss"] for r in rs if r.get("cpu_us_per_miss") is not None]
        return f"{med(v):.1f}" if v else "–"

    if mr:
        w("### Miss rounds (after a row's hit rounds: interleaved passes over new ids, A B C D, D C B A, ...)")
        w("")
        w("| cache | size | new objects a round | req/s per round | median req/s | CPU µs per miss (median) "
          "| first byte p99 ms (median) | bad bodies | origin fetches |")
        w("|---|---|---|---|---|---|---|---|---|")
        keys = sorted({(r["size"], r["cache"]) for r in mr},
                      key=lambda k: (SIZE_ORDER.index(k[0]), ORDER.index(k[1])))
        for size, cache in keys:
            rs = sorted((r for r in mr if r["size"] == size and r["cache"] == cache), key=lambda r: r["round"])
            w(f"| {LABEL[cache]} | {size} | {rs[0]['count']:,} | "
              + ", ".join(f"{r['req_per_s']:,.0f}" for r in rs)
              + f" | {med([r['req_per_s'] for r in rs]):,.0f} | {cpu_per_miss(rs)} | "
              f"{med([r['ttfb']['p99_ms'] for r in rs]):.2f} | "
              f"{sum(r['bad_body'] for r in rs)} | {sum(r.get('origin_fetches', 0) for r in rs):,} |")
        w("")
    co = [r for r in recs if r.get("kind") == "coalesce"]
    if co:
        src = sorted({r["from_run"] for r in co if r.get("from_run")})
        w("### Coalescing (N simultaneous requests for one cold key on a fresh cache; the origin delays its head)"
          + (f" — from run {', '.join(src)}" if src else ""))
        w("")
        w("Two bursts on two cold keys, one after the other: the first also pays for the freshly started "
          "process (its last column); the second, the steady state, fills the rest of the row.")
        w("")
        w("| cache | key size | requests | ok | origin fetches | origin alone ms | waiter first byte p99 ms | "
          "waiter p50 ms | p99 ms | max ms | added p99 ms | first burst: fetches, added p99 ms |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(co, key=lambda r: ORDER.index(r["cache"])):
            dead = "" if r.get("survived", True) else " (OOM-killed)"
            fb = r.get("first_burst")
            first = f"{fb['origin_fetches']}, {fb['added_p99_ms']:.0f}" if fb else "–"
            w(f"| {LABEL[r['cache']]}{dead} | {r.get('size', '1m')} | {r['n']} | {r['ok']} | {r['origin_fetches']} | "
              f"{r['origin_ms']:.0f} | {r['ttfb']['p99_ms']:.0f} | "
              f"{r['latency']['p50_ms']:.0f} | {r['latency']['p99_ms']:.0f} | {r['latency']['max_ms']:.0f} | "
              f"{r['added_p99_ms']:.0f} | {first} |")
        w("")

    # Targets (issue 7) for EdgeCache.
    if "edgecache" in caches and rounds:
        w("### Issue 7 targets (EdgeCache)")
        if meta.get("quick"):
            w("")
            w("Quick mode: the sets mostly fit in memory and rounds last 5 s, so these checks are "
              "indicative only; the targets are defined for the full sets (`bench/run.sh`).")
        w("")
        best_fio = {}
        for r in fio:
            best_fio[r["bs"]] = max(best_fio.get(r["bs"], 0), r["mb_per_s"])
        def of(size, dist, cache):
            return [r for r in rounds if r["size"] == size and r["dist"] == dist and r["cache"] == cache]

        for size in ("4k", "100k", "1m"):  # the issue 7 rows (hits from disk)
            e = of(size, "uniform", "edgecache")
            if not e:
                if any(d["cache"] == "edgecache" and d["size"] == size for d in died_records(recs)):
                    w(f"- {size}: NOT met: EdgeCache did not survive a round (OOM-killed)")
                continue
            ok = lambda b: "met" if b else "NOT met"  # noqa: E731
            for dist in ("uniform", "zipf"):
                ed, ad = of(size, dist, "edgecache"), of(size, dist, "ats")
                if ed and ad:
                    ep, ap = med([r["p99_ms"] for r in ed]), med([r["p99_ms"] for r in ad])
                    w(f"- {size} {dist}: req/s ≥ Traffic Server: "
                      f"{ok(med([r['req_per_s'] for r in ed]) >= med([r['req_per_s'] for r in ad]))}; "
                      f"p99 lower: {ok(ep < ap)} ({ep:.1f} vs {ap:.1f} ms)")
                elif ed and dist == "zipf":
                    w(f"- {size} {dist}: no Traffic Server figure (it did not survive a round)")
            if size == "4k":
                cpu = med([r["cpu_us_per_hit"] for r in e])
                w(f"- 4k: ≤ 25 µs CPU per hit: {ok(cpu is not None and cpu <= 25)} ({f(cpu, 1)} µs)")
            else:
                fb = best_fio.get(FIO_BS[size])
                mb = med([r["mb_per_s"] for r in e])
                cores = med([r["cpu_cores"] for r in e])
                if fb:
                    w(f"- {size}: ≥ 90% of fio {FIO_BS[size]} ({fb:.0f} MB/s) using < 0.5 core: "
                      f"{ok(mb >= 0.9 * fb and cores < 0.5)} ({mb:.0f} MB/s = {100 * mb / fb:.0f}%, {cores:.2f} cores)")
        all_e = [r for r in recs if r.get("kind") == "round" and r["cache"] == "edgecache"]
        fc = max([(r["failcnt"] or 0) for r in all_e] or [0])
        ooms = [d for d in died_records(recs) if d["cache"] == "edgecache"]
        w(f"- cgroup never at its limit (failcnt 0, no OOM kill): {'met' if fc == 0 and not ooms else 'NOT met'} "
          f"(failcnt {fc}, {len(ooms)} rounds where it died"
          f"{': ' + ', '.join(sorted({d['size'] for d in ooms})) if ooms else ''})")
        ce = [r for r in co if r["cache"] == "edgecache"]
        if ce:
            r = ce[0]
            fb = r.get("first_burst")
            one = r["origin_fetches"] == 1 and (fb is None or fb["origin_fetches"] == 1)
            first = f"; first burst of the fresh process +{fb['added_p99_ms']:.0f} ms" if fb else ""
            w(f"- coalescing: one origin fetch, added p99 < 50 ms: "
              f"{'met' if one and r['added_p99_ms'] < 50 else 'NOT met'} "
              f"({r['origin_fetches']} fetches, +{r['added_p99_ms']:.0f} ms{first})")
        w("")
    if png_rel:
        w(f"![req/s and p99 per cache]({png_rel})")
        w("")
    return "\n".join(out)


def chart(recs, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no chart", file=sys.stderr)
        return False
    rounds = [r for r in recs if r.get("kind") == "round" and not r.get("died")]
    if not rounds:
        return False
    caches = caches_in(recs)
    groups = sorted({(r["size"], r["dist"]) for r in rounds},
                    key=lambda k: (SIZE_ORDER.index(k[0]), k[1] != "uniform"))
    # The ceiling is a bar of its own in each group of its object size (a RAM row's: measured in
    # its rounds).
    ceil = {g: row_ceiling(recs, [r for r in rounds if (r["size"], r["dist"]) == g]) for g in groups}
    series = caches + ([CEILING] if any(ceil.values()) else [])
    metrics = [("req_per_s", "req/s (median)"), ("mb_per_s", "MB/s (median)"), ("p99_ms", "p99 latency, ms (median)"),
               ("cpu_us_per_hit", "CPU µs per hit (median)")]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(max(8, 1.6 * len(groups) * len(series) / 2), 3.2 * len(metrics)))
    colors = {"edgecache": "#d62728", "edgecache-b": "#ff7f0e", "ats": "#1f77b4", "nginx": "#2ca02c", "varnish": "#9467bd",
              CEILING: "#7f7f7f"}
    width = 0.8 / max(len(series), 1)
    for ax, (key, title) in zip(axes, metrics):
        for i, c in enumerate(series):
            ys = []
            for g in groups:
                if c == CEILING:
                    cr = ceil.get(g) or {}
                    ys.append(cr.get("cpu_us_per_req" if key == "cpu_us_per_hit" else key) or 0)
                else:
                    ys.append(med([r[key] for r in rounds if r["cache"] == c and (r["size"], r["dist"]) == g]) or 0)
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
            ax.bar(xs, ys, width, label=CEILING_LABEL if c == CEILING else LABEL[c], color=colors.get(c))
        if key == "req_per_s":
            dead = {(d["cache"], d["size"]) for d in died_records(recs)}
            for i, c in enumerate(caches):
                for j, g in enumerate(groups):
                    has = any(r["cache"] == c and (r["size"], r["dist"]) == g for r in rounds)
                    warmed = any(r.get("kind") == "warm" and r.get("cache") == c and r.get("size") == g[0]
                                 for r in recs)
                    if not has and ((c, g[0]) in dead or warmed):
                        x = j + (i - (len(series) - 1) / 2) * width
                        ax.text(x, 0.03, "died", rotation=90, ha="center", va="bottom", fontsize=8,
                                color=colors.get(c), transform=ax.get_xaxis_transform())
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{s} {d}" for s, d in groups])
        ax.set_title(title, fontsize=10)
        if key in ("req_per_s", "p99_ms"):
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=min(len(series), 3), fontsize=8)
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    fig.suptitle(f"EdgeCache bench {meta.get('run_id', '')}{' (quick)' if meta.get('quick') else ''}: hits, "
                 f"1 core; {memory(meta)}; {sources(meta.get('args', {}))}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+",
                    help="results files; the first is the main run, later ones add or replace measurements "
                         "of a kind per cache (e.g. a coalescing-only run)")
    ap.add_argument("--md", default=str(BENCH / "BENCHMARKS.md"))
    ap.add_argument("--no-md", action="store_true")
    a = ap.parse_args()
    recs = load(a.results[0])
    for extra in a.results[1:]:
        more = load(extra)
        kinds = {(r.get("kind"), r.get("cache")) for r in more if r.get("kind") not in ("meta", "skipped")}
        recs = [r for r in recs if (r.get("kind"), r.get("cache")) not in kinds]
        recs += [dict(r, from_run=Path(extra).stem) for r in more if r.get("kind") not in ("meta", "skipped")]
    res = Path(a.results[0])
    png = res.with_suffix(".png")
    png_rel = None
    if chart(recs, png):
        if a.no_md:
            print(f"chart: {png}", file=sys.stderr)
        else:
            shutil.copyfile(png, BENCH / "benchmarks.png")
            png_rel = "benchmarks.png"
            print(f"chart: {png} (and bench/benchmarks.png)")
    text = build(recs, png_rel)
    if a.no_md:
        print(text)
        return
    md = Path(a.md)
    if md.exists():
        cur = md.read_text()
    else:
        cur = ("# EdgeCache benchmarks\n\n"
               "Reproduce with `bench/run.sh` (see bench/README.md). The section between the markers is "
               "generated by `bench/harness/report.py` from `bench/results/<run>.jsonl`; notes outside it are kept.\n\n"
               f"{BEGIN}\n{END}\n")
    if BEGIN in cur and END in cur:
        pre = cur.split(BEGIN)[0]
        post = cur.split(END, 1)[1]
        new = f"{pre}{BEGIN}\n{text}\n{END}{post}"
    else:
        new = f"{cur.rstrip()}\n\n{BEGIN}\n{text}\n{END}\n"
    md.write_text(new)
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
