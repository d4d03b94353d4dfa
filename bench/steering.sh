#!/usr/bin/env bash
# Seed-2 benchmark (issue 4): steering `queue` vs `off` over a 4-queue veth, >= 1000 connections.
#   bench/steering.sh [--rounds 4] [--duration 20] [--connections 1000] [--workers 2]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
need=()
command -v wrk >/dev/null || need+=(wrk)
command -v ethtool >/dev/null || need+=(ethtool)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release -q -p edgecache-origin
cargo build --release -q -p edgecache-dataplane --bin edgecache-dataplane || {
  echo "SKIPPED: edgecache-dataplane does not build" >&2; exit 0; }
exec "$PY" bench/harness/steering.py --target-dir "$CARGO_TARGET_DIR" "$@"
