#!/usr/bin/env python3
"""Self-check of trace.py and simulate.py on small traces.

Runs under pytest (`pytest bench/workload/test_trace.py`) or alone
(`python bench/workload/test_trace.py`, as run.sh does), which prints
`N passed, N failed`.
"""

import importlib.util
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


T = _load("ec_trace", "trace.py")
N = 200_000
KEYS = 60_000


def _gen(**kw):
    args = dict(n_requests=N, n_keys=KEYS, seed=7)
    args.update(kw)
    return T.generate(**args)


def test_seeded_determinism():
    a, b, c = _gen(), _gen(), _gen(seed=8)
    assert np.array_equal(a["keys"], b["keys"])
    assert np.array_equal(a["sizes"], b["sizes"])
    assert not np.array_equal(a["keys"], c["keys"])
    with tempfile.TemporaryDirectory() as d:
        p1 = T.write(a, d, "x")
        p2 = T.write(b, d, "y")
        for f1, f2 in zip(p1, p2):
            assert T.sha256(f1) == T.sha256(f2)


def test_one_hit_share_within_a_point():
    for target in (0.30, 0.10, 0.45):
        st = T.stats(_gen(one_hit=target))
        assert abs(st["one_hit_request_share"] - target) <= 0.01, (target, st)


def test_sizes_in_bounds_and_fixed_per_key():
    tr = _gen(min_size=1024, max_size=65536)
    s, k = tr["sizes"], tr["keys"]
    assert s.min() >= 1024 and s.max() <= 65536
    order = np.argsort(k, kind="stable")
    ks, ss = k[order], s[order]
    same = ks[1:] == ks[:-1]
    assert np.all(ss[1:][same] == ss[:-1][same]), "a key changed size"
    # log-uniform: the median per key is near the geometric mean (8 KiB)
    st = T.stats(tr)
    assert 6500 < st["size_median_per_key"] < 10000, st


def test_zipf_head_share():
    for alpha in (0.9, 1.1):
        tr = _gen(alpha=alpha)
        st = T.stats(tr)
        got, exp = st["top1pct_request_share"], st["top1pct_request_share_expected"]
        assert abs(got - exp) <= 0.05 * exp, (alpha, got, exp)
        # slope of log(count) against log(rank) over the top 200 ranks
        counts = np.bincount(tr["keys"].astype(np.int64), minlength=KEYS)[:KEYS]
        by_rank = counts[tr["perm"][:200]]
        slope = np.polyfit(np.log(np.arange(1, 201)), np.log(by_rank), 1)[0]
        assert abs(-slope - alpha) < 0.1, (alpha, slope)


def test_files_read_back():
    import libcachesim as lcs
    tr = _gen(n_requests=20_000, n_keys=5_000)
    st = T.stats(tr)
    with tempfile.TemporaryDirectory() as d:
        binp, txtp = T.write(tr, d, "rb")
        lines = Path(txtp).read_text().splitlines()
        assert len(lines) == 20_000
        k0, s0 = map(int, lines[0].split())
        assert (k0, s0) == (int(tr["keys"][0]), int(tr["sizes"][0]))
        rec = np.fromfile(binp, dtype=T.ORACLE_DTYPE)
        nxt = rec["next"]
        i = int(np.flatnonzero(nxt >= 0)[0])
        assert rec["key"][nxt[i]] == rec["key"][i]
        assert not np.any(rec["key"][i + 1:nxt[i]] == rec["key"][i])
        r = lcs.TraceReader(str(binp), lcs.TraceType.ORACLE_GENERAL_TRACE)
        assert r.get_num_of_req() == 20_000
        assert r.get_working_set_size() == (st["distinct_keys"],
                                            st["distinct_bytes"])


def test_simulate_accounting():
    S = _load("ec_simulate", "simulate.py")
    import libcachesim as lcs
    tr = _gen(n_requests=50_000, n_keys=15_000)
    with tempfile.TemporaryDirectory() as d:
        binp, _ = T.write(tr, d, "sim")
        cap = 32 << 20
        rows = {r["policy"]: r for r in S.run(binp, [cap], S.POLICIES, quiet=True)}
        for p in ("fifo", "lru", "s3fifo", "wtinylfu"):
            assert abs(rows[p]["written_per_missed"] - 1.0) < 1e-9, rows[p]
        for p in ("fifo-bloom", "fifo-doorkeeper"):
            assert 0 < rows[p]["written_per_missed"] < 1, rows[p]
        assert rows["fifo-bloom"]["byte_hit_ratio"] > rows["fifo"]["byte_hit_ratio"]
        # The per-request loop agrees with libCacheSim's own trace loop.
        r = lcs.TraceReader(str(binp), lcs.TraceType.ORACLE_GENERAL_TRACE)
        omr, bmr = lcs.FIFO(cap).process_trace(r)
        assert abs((1 - omr) - rows["fifo"]["object_hit_ratio"]) < 1e-9
        assert abs((1 - bmr) - rows["fifo"]["byte_hit_ratio"]) < 1e-9


def main():
    tests = [(n, f) for n, f in sorted(globals().items())
             if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, f in tests:
        try:
            f()
            passed += 1
            print(f"ok   {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
