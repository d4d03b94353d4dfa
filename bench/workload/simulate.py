#!/usr/bin/env python3
"""Simulated baselines on a trace from trace.py, with libCacheSim (PyPI
`libcachesim`): hit ratios and bytes written per byte missed, per policy and
capacity.

Every request goes through the policy's own get() (libCacheSim's lookup,
admission, eviction and insert). After a miss the script asks the cache,
without touching its state (find(update_cache=False)), whether the object is
now in it: that is what was admitted, and its bytes are what the cache wrote.

Policies:
  fifo             FIFO, admit everything
  lru              LRU, admit everything
  s3fifo           S3-FIFO (10% small FIFO, ghost 90%, move to main at 2)
  wtinylfu         W-TinyLFU (1% window LRU, SLRU main, count-min sketch)
  fifo-bloom       FIFO behind libCacheSim's "BloomFilter" admissioner: a
                   miss is admitted from its key's second request on. It is
                   an exact, never-reset set of every key seen (not a real
                   Bloom filter): the best case of second-hit admission.
  fifo-doorkeeper  FIFO behind a real, bounded Bloom filter (this script,
                   as a libCacheSim plugin admissioner): 3 hashes, 10 bits
                   per key, cleared after it has recorded --dk-window times
                   the cache's object count of keys; a miss is admitted when
                   its key is already in the filter.
"""

import argparse
import json
import sys
import time
from importlib import metadata
from pathlib import Path

import importlib.util

import libcachesim as lcs

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"


def load_trace_module():
    """bench/workload/trace.py by path (the stdlib has a `trace` module)."""
    spec = importlib.util.spec_from_file_location("ec_trace", HERE / "trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_trace = load_trace_module()
human, parse_size = _trace.human, _trace.parse_size

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Doorkeeper:
    """A Bloom filter of recently missed keys, cleared every `window` keys."""

    def __init__(self, window, bits_per_key=10, hashes=3):
        self.window = max(1, int(window))
        self.m = max(64, self.window * bits_per_key)
        self.k = hashes
        self.bits = bytearray((self.m + 7) // 8)
        self.added = 0
        self.resets = 0

    def seen_or_add(self, key):
        h1 = splitmix64(key)
        h2 = splitmix64(h1) | 1
        pos = [(h1 + i * h2) % self.m for i in range(self.k)]
        bits = self.bits
        if all(bits[p >> 3] & (1 << (p & 7)) for p in pos):
            return True
        for p in pos:
            bits[p >> 3] |= 1 << (p & 7)
        self.added += 1
        if self.added >= self.window:
            self.bits = bytearray(len(bits))
            self.added = 0
            self.resets += 1
        return False


def doorkeeper_admissioner(dk):
    return lcs.PluginAdmissioner(
        "Doorkeeper",
        lambda: dk,
        lambda data, req: dk.seen_or_add(req.obj_id),
        lambda: None,
        lambda data, req, cache_size: None,
        lambda data: None,
    )


POLICIES = ["fifo", "lru", "s3fifo", "wtinylfu", "fifo-bloom",
            "fifo-doorkeeper"]


def make_cache(policy, capacity, mean_size, dk_window):
    """Returns (cache, facts about its configuration)."""
    if policy == "fifo":
        return lcs.FIFO(capacity), {}
    if policy == "lru":
        return lcs.LRU(capacity), {}
    if policy == "s3fifo":
        return lcs.S3FIFO(capacity), {"small_size_ratio": 0.1,
                                      "ghost_size_ratio": 0.9,
                                      "move_to_main_threshold": 2}
    if policy == "wtinylfu":
        return lcs.WTinyLFU(capacity), {"main_cache": "SLRU",
                                        "window_size": 0.01}
    # The cache holds only a raw pointer to its admissioner: the Python
    # objects are kept on the cache so that they live as long as it does.
    if policy == "fifo-bloom":
        adm = lcs.BloomFilterAdmissioner()
        cache = lcs.FIFO(capacity, admissioner=adm)
        cache._admissioner_ref = adm
        return cache, {"admission":
                       "libCacheSim BloomFilter (exact seen-before set)"}
    if policy == "fifo-doorkeeper":
        window = dk_window * capacity / mean_size
        dk = Doorkeeper(window)
        adm = doorkeeper_admissioner(dk)
        cache = lcs.FIFO(capacity, admissioner=adm)
        cache._admissioner_ref, cache._doorkeeper = adm, dk
        return cache, {"admission": "bounded Bloom filter, 3 hashes",
                       "doorkeeper_keys": dk.window,
                       "doorkeeper_bits": dk.m,
                       "doorkeeper_window_x_cache_objects": dk_window}
    raise SystemExit(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


def simulate(reader, cache):
    reader.reset()
    n = hits = 0
    b_req = b_hit = b_adm = n_adm = 0
    get, find = cache.get, cache.find
    for req in reader:
        size = req.obj_size
        n += 1
        b_req += size
        if get(req):
            hits += 1
            b_hit += size
        elif find(req, False) is not None:
            n_adm += 1
            b_adm += size
    b_miss = b_req - b_hit
    return {
        "requests": n,
        "object_hit_ratio": hits / n if n else 0.0,
        "byte_hit_ratio": b_hit / b_req if b_req else 0.0,
        "bytes_requested": b_req,
        "bytes_hit": b_hit,
        "bytes_missed": b_miss,
        "objects_missed": n - hits,
        "objects_admitted": n_adm,
        "bytes_admitted": b_adm,
        "written_per_missed": b_adm / b_miss if b_miss else 0.0,
    }


def run(trace, capacities, policies, dk_window=2.0, out=None, quiet=False):
    reader = lcs.TraceReader(str(trace), lcs.TraceType.ORACLE_GENERAL_TRACE)
    ws_objs, ws_bytes = reader.get_working_set_size()
    mean_size = ws_bytes / ws_objs
    stats_path = Path(str(trace).replace(".oracleGeneral.bin", ".stats.json"))
    trace_doc = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    version = metadata.version("libcachesim")
    rows = []
    fh = open(out, "a") if out else None
    for cap in capacities:
        for pol in policies:
            cache, conf = make_cache(pol, cap, mean_size, dk_window)
            t0 = time.time()
            r = simulate(reader, cache)
            rec = {
                "kind": "workload-sim",
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "trace": trace_doc.get("name", Path(trace).name),
                "trace_file": str(trace),
                "trace_params": trace_doc.get("params"),
                "policy": pol,
                "libcachesim_cache": cache.cache_name,
                "config": conf,
                "capacity_bytes": cap,
                "working_set_objects": ws_objs,
                "working_set_bytes": ws_bytes,
                "capacity_share_of_working_set": cap / ws_bytes,
                **r,
                "seconds": round(time.time() - t0, 2),
                "libcachesim_version": version,
            }
            if pol == "fifo-doorkeeper":
                rec["config"]["doorkeeper_resets"] = cache._doorkeeper.resets
            rows.append(rec)
            if fh:
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
            if not quiet:
                print(f"  {human(cap):>10} {pol:<16} obj {r['object_hit_ratio']:.4f}"
                      f"  byte {r['byte_hit_ratio']:.4f}"
                      f"  written/missed {r['written_per_missed']:.3f}"
                      f"  ({rec['seconds']} s)", file=sys.stderr, flush=True)
            del cache  # the plugin admissioner must go before the interpreter
    if fh:
        fh.close()
    return rows


def table(rows):
    """Markdown table of the rows (one line per capacity and policy)."""
    out = ["| capacity | share of working set | policy | object hit ratio "
           "| byte hit ratio | bytes written per byte missed |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {human(r['capacity_bytes'])} "
                   f"| {r['capacity_share_of_working_set']:.1%} "
                   f"| {r['policy']} | {r['object_hit_ratio']:.3f} "
                   f"| {r['byte_hit_ratio']:.3f} "
                   f"| {r['written_per_missed']:.3f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="<name>.oracleGeneral.bin from trace.py")
    ap.add_argument("--capacity", default="2GiB,512MiB",
                    help="comma-separated cache sizes (default 2GiB,512MiB)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--dk-window", type=float, default=2.0,
                    help="fifo-doorkeeper: keys the filter remembers before "
                         "it is cleared, in cache object counts (default 2)")
    ap.add_argument("--out", default=None,
                    help="JSON lines file (default bench/results/"
                         "workload-<trace>.jsonl; '-' for none)")
    a = ap.parse_args(argv)
    caps = [parse_size(c) for c in a.capacity.split(",") if c]
    pols = [p for p in a.policies.split(",") if p]
    for p in pols:
        if p not in POLICIES:
            ap.error(f"unknown policy {p!r} (known: {', '.join(POLICIES)})")
    name = Path(a.trace).name.replace(".oracleGeneral.bin", "")
    out = None if a.out == "-" else (a.out or RESULTS / f"workload-{name}.jsonl")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("")  # one run per file
    rows = run(a.trace, caps, pols, a.dk_window, out)
    r0 = rows[0]
    print(f"trace {name}: working set {r0['working_set_objects']:,} objects, "
          f"{r0['working_set_bytes']:,} bytes ({human(r0['working_set_bytes'])})")
    print(table(rows))
    if out:
        print(f"results: {out}")


if __name__ == "__main__":
    main()
