#!/usr/bin/env python3
"""Turn a compression results file (bench/results/compress-<run>.jsonl, from harness/compress.py)
into the generated Compression section of bench/BENCHMARKS.md: the corpus, the level sweep, the
bytes each cache serves per Accept-Encoding, misses and hits side by side, and the issue 33
check (EdgeCache's compressed hit rate within 10% of its identity hit rate).

    python3 bench/harness/compress_report.py bench/results/compress-<run>.jsonl [--md bench/BENCHMARKS.md] [--no-md]
"""

import argparse
from collections import defaultdict
from pathlib import Path

from report import f, load, med, sources

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
BEGIN = "<!-- BEGIN GENERATED COMPRESSION (bench/harness/compress_report.py) -->"
END = "<!-- END GENERATED COMPRESSION -->"
ORDER = ["edgecache", "nginx", "ats", "varnish"]
NAME = {"edgecache": "EdgeCache", "nginx": "nginx", "ats": "Traffic Server", "varnish": "Varnish"}
ROW_LABEL = {"miss": "misses (cold, `gzip`)", "gzip": "hits, `gzip`", "br": "hits, `br`",
             "browser": "hits, `gzip, deflate, br, zstd`", "identity": "hits, no Accept-Encoding"}


def codings(check):
    if not check:
        return "–"
    return ", ".join(f"{k} {v}" for k, v in sorted(check["codings"].items(), key=lambda kv: -kv[1]))


def build(recs):
    meta = next((r for r in recs if r.get("kind") == "meta"), {})
    args = meta.get("args", {})
    corpus = meta.get("corpus", {})
    out = []
    w = out.append
    w(f"## Compression run {meta.get('run_id', '?')}")
    w("")
    w(f"- Date: {meta.get('date', '?')}; machine: {meta.get('cpu', '?')}, {meta.get('cores', '?')} cores, "
      f"{meta.get('os', '?')}, kernel {meta.get('host_kernel', '?')}; load average at start: "
      f"{' '.join(meta.get('loadavg', []))}" + (f"; {meta['note']}" if meta.get("note") else ""))
    w("- Versions: " + ", ".join(f"{NAME.get(k, k)} {v}" for k, v in meta.get("versions", {}).items()))
    w("- Caches: " + "; ".join(meta.get("labels", {}).get(c, c) for c in ORDER if c in meta.get("labels", {})))
    mem = meta.get("mem_mib", {})
    w(f"- Setup: each cache in its memory cgroup ({', '.join(f'{NAME.get(k, k)} {v} MiB' for k, v in mem.items())}) "
      f"pinned to CPU {args.get('cache_cpu')}, wrk on CPU {args.get('client_cpu')}, {sources(args)}; misses: one "
      f"pass over every file, cold, wrk -t1 -c{args.get('warm_conns')} (harness/corpus_pass.lua); hits: "
      f"{args.get('rounds')} interleaved rounds of {args.get('duration')} s per row, wrk -t1 -c{args.get('connections')} "
      "uniform over the files (harness/corpus.lua), after warm-up passes until none reaches the origin. Medians "
      "over rounds. CPU: the cache's cgroup (cpuacct) over the round / responses. Bytes per response: what wrk "
      "read (headers included) / responses.")
    if corpus:
        w(f"- Corpus: {corpus.get('files')} files, {corpus.get('bytes', 0) / 1e6:.1f} MB, "
          f"{', '.join(e for e in corpus.get('selection', {}).get('extensions', []))} of at least "
          f"{corpus.get('selection', {}).get('min_file')} bytes from `npm pack` of: "
          + ", ".join(f"{p['spec']} ({p['files']} files, {p['bytes'] / 1e6:.1f} MB)" for p in corpus.get("packages", []))
          + "; at most 80 files per package, evenly spaced in path order.")
    for s in [r for r in recs if r.get("kind") == "skipped"]:
        w(f"- **Skipped {NAME.get(s['cache'], s['cache'])}**: {s['reason'].splitlines()[0][:300]}")
    for d in [r for r in recs if r.get("kind") == "died"]:
        w(f"- **{NAME.get(d['cache'], d['cache'])} died** in {d.get('what')} round {d.get('round', 0) + 1}.")
    w("")

    levels = [r for r in recs if r.get("kind") == "level"]
    if levels:
        w("### Level sweep: the data plane's encoder over the corpus, one core")
        w("")
        w("`compress_levels` (dataplane/serve/examples/compress_levels.rs) runs dataplane/serve/src/compress.rs's `Encoder` "
          "over every file in 64 KiB chunks, a fresh encoder per file as a fill does; rate = MB of input per "
          "CPU second of its thread (schedstat), the faster of two passes. Ratio = compressed / original. "
          "Slow levels on every 4th file (sample 1/4).")
        w("")
        w("| coding | level | ratio | saved | MB/s (1 core) | sample |")
        w("|---|---:|---:|---:|---:|---|")
        for r in levels:
            d = " **(default)**" if r.get("default") else ""
            w(f"| {r['coding']} | {r['level']}{d} | {r['ratio']:.4f} | {(1 - r['ratio']) * 100:.1f}% | "
              f"{r['mb_per_cpu_s']:.1f} | {'all' if r['sample'] == 1 else '1/' + str(r['sample'])} |")
        w("")

    checks = {(r["cache"], r["row"]): r for r in recs if r.get("kind") == "check"}
    caches = [c for c in ORDER if any(k[0] == c for k in checks)]
    rows = [r for r in ["gzip", "br", "browser", "identity"] if any(k[1] == r for k in checks)]
    if checks:
        w("### What each cache serves: codings and body bytes per Accept-Encoding (every file once)")
        w("")
        w("Body bytes over the whole corpus / the files' bytes; every body decoded and compared with its file.")
        w("")
        w("| Accept-Encoding | " + " | ".join(NAME[c] for c in caches) + " |")
        w("|---|" + "---|" * len(caches))
        for row in rows:
            cells = []
            for c in caches:
                k = checks.get((c, row))
                if not k:
                    cells.append("–")
                    continue
                bad = f", **{k['bad']} bad**" if k["bad"] else ""
                cells.append(f"{k['ratio']:.3f} ({codings(k)}{bad})")
            w(f"| {ROW_LABEL[row]} | " + " | ".join(cells) + " |")
        w("")

    rounds = [r for r in recs if r.get("kind") == "compress_round" and not r.get("died")]
    misses = {r["cache"]: r for r in recs if r.get("kind") == "compress_miss"}
    by = defaultdict(list)
    for r in rounds:
        by[(r["cache"], r["row"])].append(r)
    caches = [c for c in ORDER if any(k[0] == c for k in by) or c in misses]
    if caches:
        w("### Misses and hits side by side")
        w("")
        w("req/s; CPU µs per response; KiB read per response (headers included), and in brackets the bytes "
          "saved against the same cache's identity hits; hit ratio from the origin's count.")
        w("")
        w("| row | " + " | ".join(NAME[c] for c in caches) + " |")
        w("|---|" + "---|" * len(caches))

        def ident(c):
            return med([x["bytes_per_req"] for x in by.get((c, "identity"), [])])

        def cell(rs, c):
            if not rs:
                return "–"
            rps = med([x["req_per_s"] for x in rs])
            cpu = med([x["cpu_us_per_req"] for x in rs])
            bpr = med([x["bytes_per_req"] for x in rs])
            hit = med([x["hit_ratio"] for x in rs])
            base = ident(c)
            saved = f" ({(1 - bpr / base) * 100:.0f}% saved)" if base and bpr else ""
            return f"{f(rps)} req/s, {f(cpu, 1)} µs, {f(bpr / 1024, 1)} KiB{saved}, hit {hit:.3f}"
        w("| " + ROW_LABEL["miss"] + " | " + " | ".join(cell([misses[c]] if c in misses else [], c) for c in caches)
          + " |")
        for row in [r for r in ["gzip", "br", "browser", "identity"] if any(k[1] == r for k in by)]:
            w(f"| {ROW_LABEL[row]} | " + " | ".join(cell(by.get((c, row)), c) for c in caches) + " |")
        w("")
        # Ratios in the same rounds: EdgeCache against each other cache, per row.
        others = [c for c in caches if c != "edgecache"]
        if "edgecache" in caches and others:
            w("EdgeCache's req/s / the other's, median of per-round ratios (same rounds), and CPU µs per response "
              "other / EdgeCache (above 1: EdgeCache spends less):")
            w("")
            w("| row | " + " | ".join(f"vs {NAME[c]} req/s | vs {NAME[c]} CPU" for c in others) + " |")
            w("|---|" + "---:|---:|" * len(others))
            for row in [r for r in ["gzip", "br", "browser", "identity"] if any(k[1] == r for k in by)]:
                cells = []
                for c in others:
                    per = defaultdict(dict)
                    for r in by.get(("edgecache", row), []) + by.get((c, row), []):
                        per[r["round"]][r["cache"]] = r
                    rq = med([d["edgecache"]["req_per_s"] / d[c]["req_per_s"] for d in per.values()
                              if "edgecache" in d and c in d and d[c]["req_per_s"]])
                    cp = med([d[c]["cpu_us_per_req"] / d["edgecache"]["cpu_us_per_req"] for d in per.values()
                              if "edgecache" in d and c in d and d["edgecache"]["cpu_us_per_req"]])
                    cells += ["–" if rq is None else f"{rq:.2f}x", "–" if cp is None else f"{cp:.2f}x"]
                w(f"| {ROW_LABEL[row]} | " + " | ".join(cells) + " |")
            w("")
        ident_rps = med([x["req_per_s"] for x in by.get(("edgecache", "identity"), [])])
        if ident_rps:
            w("### Issue 33 §1 check: EdgeCache's compressed hit rate within 10% of its identity hit rate")
            w("")
            w("| row | req/s | / identity | within 10% |")
            w("|---|---:|---:|---|")
            for row in ["gzip", "br", "browser"]:
                rs = by.get(("edgecache", row))
                if not rs:
                    continue
                rps = med([x["req_per_s"] for x in rs])
                ratio = rps / ident_rps
                w(f"| {ROW_LABEL[row]} | {f(rps)} | {ratio:.3f} | {'yes' if ratio >= 0.9 else '**no**'} |")
            w(f"| {ROW_LABEL['identity']} | {f(ident_rps)} | 1.000 | |")
            w("")
    metrics = next((r for r in recs if r.get("kind") == "edge_metrics"), None)
    if metrics and metrics.get("lines"):
        w("<details><summary>EdgeCache's compression counters at the end of the run</summary>")
        w("")
        w("```")
        out.extend(metrics["lines"][:60])
        w("```")
        w("</details>")
        w("")
    return "\n".join(out).rstrip() + "\n"


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
