#!/usr/bin/env bash
# EdgeCache compression benchmark (issue 33 section 1): bytes saved and CPU per request on a corpus
# of real text assets (pinned npm packages, fetched with `npm pack` into
# /var/tmp/edgecache-tools/compress-corpus and reused), misses and hits with Accept-Encoding gzip,
# br, a browser's list and none, against nginx (gzip on), Traffic Server (compress plugin) and
# Varnish (do_gzip), with run.sh's cgroup and core rules; and the level sweep behind EdgeCache's
# default levels (dataplane/serve/examples/compress_levels.rs).
#   bench/compress.sh                       full run: level sweep + 4 rows x 3 rounds x 10 s (~15 min)
#   bench/compress.sh --skip-caches         level sweep only (~3 min)
#   bench/compress.sh --skip-levels --rows gzip,identity --rounds 1 --no-report   smoke test
#   bench/compress.sh --help                all options (bench/harness/compress.py)
# Needs root (cgroups v1 memory at /sys/fs/cgroup/memory), 2+ cores and the npm registry.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_help bench/harness/compress.py "$@"
bench_need \
    wrk:wrk \
    nginx:nginx-light \
    varnishd:varnish \
    traffic_server:trafficserver \
    npm:npm \
    zstd:zstd \
    taskset:util-linux \
    gcc:gcc+libc6-dev \
    py:brotli=python3-brotli
bench_build -p edgecache-serve --example compress_levels

exec "$PY" bench/harness/compress.py --target-dir "$CARGO_TARGET_DIR" "$@"
