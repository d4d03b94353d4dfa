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
cd "$(dirname "$0")/.."
REPO=$(pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
for a in "$@"; do
  if [[ "$a" == "-h" || "$a" == "--help" ]]; then exec "$PY" bench/harness/compress.py --help; fi
done

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v varnishd >/dev/null || need+=(varnish)
command -v traffic_server >/dev/null || need+=(trafficserver)
command -v npm >/dev/null || need+=(npm)
command -v zstd >/dev/null || need+=(zstd)
command -v taskset >/dev/null || need+=(util-linux)
command -v gcc >/dev/null || need+=(gcc libc6-dev)  # harness/srcaddr.c
"$PY" -c 'import brotli' 2>/dev/null || need+=(python3-brotli)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  for s in nginx varnish trafficserver; do (service "$s" stop || true) >/dev/null 2>&1; done
fi

echo "building edgecache-origin + edgecache-loadgen (release)"
cargo build --release -q -p edgecache-origin
if [[ -z "${SKIP_EDGECACHE_BUILD:-}" ]]; then
  echo "building edgecache-dataplane and its level sweep (release)"
  if ! { cargo build --release -q -p edgecache-dataplane --bin edgecache-dataplane &&
      cargo build --release -q -p edgecache-serve --example compress_levels; } \
      2>"$CARGO_TARGET_DIR/ecbench-dataplane-build.log"; then
    echo "WARNING: edgecache-dataplane did not build (see $CARGO_TARGET_DIR/ecbench-dataplane-build.log); EdgeCache will be skipped" >&2
  fi
fi

exec "$PY" bench/harness/compress.py --target-dir "$CARGO_TARGET_DIR" "$@"
