#!/usr/bin/env python3
"""Deterministic CDN-like request trace (issue 15 item 4, measurement side).

A trace of N requests where
  - a share of the requests (default 30%) goes to keys requested exactly once
    in the whole trace ("one-hit wonders"), counting both the fresh keys the
    generator injects and the keys of the Zipf catalogue that happen to be
    drawn only once; the generator picks how many fresh keys to inject so
    that the total hits the target to within one request;
  - the other requests draw keys from a catalogue of K keys with Zipf(alpha)
    popularity (rank r has weight r^-alpha), the ranks mapped to key ids by a
    seeded permutation;
  - every key has one fixed size, log-uniform between --min-size and
    --max-size bytes (1-64 KiB by default: median ~8 KiB, mean ~15 KiB).

Everything is drawn from numpy's PCG64 seeded by --seed: the same arguments
give the same files, byte for byte (the stats JSON records their sha256).

Outputs (in --out-dir, default /var/tmp/edgecache-trace):
  <name>.oracleGeneral.bin  libCacheSim's oracleGeneral binary, read natively
                            (TraceType.ORACLE_GENERAL_TRACE): one packed
                            little-endian record of 24 bytes per request,
                            uint32 clock_time, uint64 obj_id, uint32 obj_size,
                            int64 next_access_vtime (index of the key's next
                            request, -1 if none).
  <name>.txt                one "key size" line per request (decimal), for
                            the Rust replayer.
  <name>.stats.json         the parameters, the stats printed below, sha256s.
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ORACLE_DTYPE = np.dtype(
    [("time", "<u4"), ("key", "<u8"), ("size", "<u4"), ("next", "<i8")]
)
assert ORACLE_DTYPE.itemsize == 24


def parse_size(s):
    s = str(s).strip()
    units = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
             "MIB": 1 << 20, "G": 1 << 30, "GIB": 1 << 30}
    num = s.rstrip("KMGiBkmgib")
    unit = s[len(num):].upper()
    if unit not in units:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 64KiB, 2GiB)")
    return int(float(num) * units[unit])


def zipf_cdf(n_keys, alpha):
    w = np.arange(1, n_keys + 1, dtype=np.float64) ** -alpha
    c = np.cumsum(w)
    return c / c[-1]


def one_hit_count(first, second, n, m):
    """Requests to keys seen once when the first m Zipf draws are used and
    n - m fresh keys are injected (first/second: sorted positions of each
    key's first and second draw)."""
    s = np.searchsorted(first, m) - np.searchsorted(second, m)
    return int(s) + (n - m)


def generate(n_requests=1_500_000, alpha=0.9, one_hit=0.30, n_keys=500_000,
             min_size=1024, max_size=65536, seed=1, rate=1000):
    """Returns a dict of numpy arrays (keys, sizes, times) and facts."""
    if not 0 <= one_hit < 1:
        raise ValueError("one_hit must be in [0, 1)")
    if not 1 <= min_size <= max_size:
        raise ValueError("need 1 <= min_size <= max_size")
    rng = np.random.Generator(np.random.PCG64(seed))
    n = n_requests
    cdf = zipf_cdf(n_keys, alpha)
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    ranks = np.minimum(ranks, n_keys - 1)  # guard the last float of the cdf

    # First and second position of each rank in the draw stream.
    order = np.argsort(ranks, kind="stable")
    sr = ranks[order]
    starts = np.flatnonzero(np.r_[True, sr[1:] != sr[:-1]])
    first = np.sort(order[starts])
    has2 = np.r_[sr[1:] == sr[:-1], False][starts]  # group has a 2nd entry
    second = np.sort(order[starts[has2] + 1])

    # one_hit_count(m) is non-increasing in m (each extra Zipf draw changes
    # it by 0, -1 or -2): bisect for the largest m still at or above target.
    target = int(round(one_hit * n))
    lo, hi = 0, n
    if one_hit_count(first, second, n, n) > target:
        m = n  # the Zipf tail alone has more singletons than asked for
    else:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if one_hit_count(first, second, n, mid) >= target:
                lo = mid
            else:
                hi = mid - 1
        m = lo
    n_fresh = n - m

    perm = rng.permutation(n_keys)  # rank -> key id
    zipf_keys = perm[ranks[:m]].astype(np.uint64)
    fresh_pos = np.sort(rng.choice(n, size=n_fresh, replace=False))
    is_fresh = np.zeros(n, dtype=bool)
    is_fresh[fresh_pos] = True
    keys = np.empty(n, dtype=np.uint64)
    keys[~is_fresh] = zipf_keys
    keys[is_fresh] = n_keys + np.arange(n_fresh, dtype=np.uint64)

    # Fixed size per key: log-uniform in [min_size, max_size].
    lmin, lmax = np.log(min_size), np.log(max_size + 1)
    key_sizes = np.floor(np.exp(rng.uniform(lmin, lmax, n_keys + n_fresh)))
    key_sizes = np.clip(key_sizes, min_size, max_size).astype(np.uint32)
    sizes = key_sizes[keys.astype(np.int64)]
    times = (np.arange(n, dtype=np.uint64) // max(rate, 1)).astype(np.uint32)
    return {"keys": keys, "sizes": sizes, "times": times, "n_keys": n_keys,
            "perm": perm, "cdf": cdf, "zipf_requests": m,
            "fresh_keys": n_fresh, "target_one_hit": target}


def next_access(keys):
    """Index of each request's key's next request, -1 for its last one."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    nxt = np.full(n, -1, dtype=np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def stats(tr):
    keys, sizes = tr["keys"], tr["sizes"]
    uk, idx, cnt = np.unique(keys, return_index=True, return_counts=True)
    n = len(keys)
    ksize = sizes[idx].astype(np.int64)
    one = cnt == 1
    top = max(1, tr["n_keys"] // 100)
    top_keys = tr["perm"][:top].astype(np.uint64)
    head = int(np.isin(keys, top_keys).sum())
    return {
        "requests": n,
        "distinct_keys": int(len(uk)),
        "one_hit_keys": int(one.sum()),
        "one_hit_request_share": float(one.sum() / n),
        "distinct_bytes": int(ksize.sum()),
        "requested_bytes": int(sizes.astype(np.int64).sum()),
        "one_hit_bytes": int(ksize[one].sum()),
        "zipf_requests": int(tr["zipf_requests"]),
        "fresh_keys_injected": int(tr["fresh_keys"]),
        "size_min": int(sizes.min()), "size_max": int(sizes.max()),
        "size_mean_per_key": float(ksize.mean()),
        "size_median_per_key": float(np.median(ksize)),
        "top1pct_catalogue_keys": top,
        "top1pct_request_share": head / n,
        "top1pct_request_share_expected":
            float(tr["cdf"][top - 1] * tr["zipf_requests"] / n),
        # Best any cache can do: every first request is a miss.
        "max_object_hit_ratio": float(1 - len(uk) / n),
        "max_byte_hit_ratio":
            float(1 - ksize.sum() / sizes.astype(np.int64).sum()),
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(tr, out_dir, name):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(tr["keys"])
    rec = np.empty(n, dtype=ORACLE_DTYPE)
    rec["time"], rec["key"], rec["size"] = tr["times"], tr["keys"], tr["sizes"]
    rec["next"] = next_access(tr["keys"])
    binp = out_dir / f"{name}.oracleGeneral.bin"
    rec.tofile(binp)
    txtp = out_dir / f"{name}.txt"
    with open(txtp, "w") as f:
        step = 1 << 18
        for i in range(0, n, step):
            k = tr["keys"][i:i + step].astype(str)
            s = tr["sizes"][i:i + step].astype(str)
            f.write("\n".join(np.char.add(np.char.add(k, " "), s)))
            f.write("\n")
    return binp, txtp


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.2f} {unit}" if unit != "B" else f"{b} B"
        b /= 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", "-n", type=int, default=1_500_000)
    ap.add_argument("--alpha", type=float, default=0.9, help="Zipf exponent")
    ap.add_argument("--one-hit", type=float, default=0.30,
                    help="share of requests to keys seen exactly once")
    ap.add_argument("--keys", type=int, default=500_000,
                    help="Zipf catalogue size (keys that can repeat)")
    ap.add_argument("--min-size", type=parse_size, default=1024)
    ap.add_argument("--max-size", type=parse_size, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=int, default=1000,
                    help="requests per second of trace time (timestamps)")
    ap.add_argument("--out-dir", default="/var/tmp/edgecache-trace")
    ap.add_argument("--name", default=None,
                    help="file name stem (default from the parameters)")
    a = ap.parse_args(argv)
    name = a.name or (f"zipf{a.alpha}-ohw{a.one_hit}-n{a.requests}"
                      f"-k{a.keys}-s{a.seed}")
    t0 = time.time()
    tr = generate(a.requests, a.alpha, a.one_hit, a.keys, a.min_size,
                  a.max_size, a.seed, a.rate)
    st = stats(tr)
    binp, txtp = write(tr, a.out_dir, name)
    params = {k: getattr(a, k) for k in ("requests", "alpha", "one_hit",
                                         "keys", "min_size", "max_size",
                                         "seed", "rate")}
    doc = {"name": name, "params": params, "stats": st,
           "files": {"oracleGeneral": str(binp), "text": str(txtp)},
           "sha256": {"oracleGeneral": sha256(binp), "text": sha256(txtp)},
           "generator": "bench/workload/trace.py"}
    statp = Path(a.out_dir) / f"{name}.stats.json"
    statp.write_text(json.dumps(doc, indent=2) + "\n")
    if st["one_hit_request_share"] > a.one_hit + 0.005:
        print(f"WARNING: the Zipf tail alone gives a one-hit share of "
              f"{st['one_hit_request_share']:.3f} > {a.one_hit}: use fewer "
              f"--keys or more --requests", file=sys.stderr)
    print(f"trace {name} ({time.time() - t0:.1f} s)")
    print(f"  requests            {st['requests']:,}")
    print(f"  distinct keys       {st['distinct_keys']:,}")
    print(f"  one-hit wonders     {st['one_hit_keys']:,} keys, "
          f"{st['one_hit_request_share']:.4f} of requests "
          f"({st['fresh_keys_injected']:,} injected, the rest Zipf tail)")
    print(f"  distinct bytes      {st['distinct_bytes']:,} "
          f"({human(st['distinct_bytes'])}; one-hit wonders "
          f"{human(st['one_hit_bytes'])})")
    print(f"  requested bytes     {st['requested_bytes']:,} "
          f"({human(st['requested_bytes'])})")
    print(f"  object size         {st['size_min']}..{st['size_max']} B, "
          f"per key mean {st['size_mean_per_key']:.0f}, "
          f"median {st['size_median_per_key']:.0f}")
    print(f"  top 1% of catalogue {st['top1pct_request_share']:.4f} of "
          f"requests (Zipf expects {st['top1pct_request_share_expected']:.4f})")
    print(f"  infinite cache      object hit ratio "
          f"{st['max_object_hit_ratio']:.4f}, byte hit ratio "
          f"{st['max_byte_hit_ratio']:.4f}")
    print(f"  files               {binp}\n                      {txtp}\n"
          f"                      {statp}")
    return doc


if __name__ == "__main__":
    main()
