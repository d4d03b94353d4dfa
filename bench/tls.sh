#!/usr/bin/env bash
# EdgeCache HTTPS benchmark (issue 17 section 5): TLS hits over HTTP/1.1 and HTTP/2 and new TLS
# connections per second, against nginx and Traffic Server, with run.sh's cgroup and core rules.
#   bench/tls.sh            full run (4k x 100,000, 100k x 10,000, 1m x 1,000; ~35 min)
#   bench/tls.sh --quick    small sets, 5 s rounds (~11 min)
#   bench/tls.sh --quick --sizes 4k --rounds 1 --no-report    smoke test (~5 min)
#   bench/tls.sh --help     all options (bench/harness/tls.py)
# Needs root (cgroups v1 memory at /sys/fs/cgroup/memory, drop_caches) and 2+ cores.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_help bench/harness/tls.py "$@"
bench_need \
    wrk:wrk \
    h2load:nghttp2-client \
    nginx:nginx-light \
    traffic_server:trafficserver \
    openssl:openssl \
    curl:curl \
    gcc:gcc+libc6-dev \
    taskset:util-linux
bench_build

exec "$PY" bench/harness/tls.py --target-dir "$CARGO_TARGET_DIR" "$@"
