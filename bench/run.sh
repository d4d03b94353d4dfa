#!/usr/bin/env bash
# EdgeCache benchmark: one command reproduces the comparison (issue 7).
#   bench/run.sh            full run (~40-60 min)
#   bench/run.sh --quick    small sets, short rounds (~10 min)
#   bench/run.sh --quick --caches nginx,ats --sizes 4k --skip-fio
#   bench/run.sh --help     all options (bench/harness/bench.py)
#   bench/run.sh --sources 64   wrk over 64 client addresses (default: one, 127.0.0.1)
# Memory: each cache's cgroup gets what it needs to finish every round: Traffic Server 1 GiB
# (it needs ~350 MB at 1 MiB and was OOM-killed in 256 MiB), EdgeCache, nginx and Varnish 256 MiB
# (MEM_MIB in bench/harness/bench.py; --mem ats=1024,... or --mem-limit BYTES for all). The log's
# "memory:" and "clients:" lines and the report's setup line say what each got and where wrk's
# connections came from. Rows: 4k, 4k-ram (4 KiB hits from RAM, all resident), 100k, 1m, each with
# the static-file ceiling (nginx serving one file from RAM on the same core).
# Needs root (cgroups v1 memory at /sys/fs/cgroup/memory, drop_caches) and 2+ cores.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_help bench/harness/bench.py "$@"
bench_need \
    wrk:wrk \
    nginx:nginx-light \
    varnishd:varnish \
    traffic_server:trafficserver \
    fio:fio \
    taskset:util-linux \
    gcc:gcc+libc6-dev \
    py:matplotlib=python3-matplotlib
bench_build

exec "$PY" bench/harness/bench.py --target-dir "$CARGO_TARGET_DIR" "$@"
