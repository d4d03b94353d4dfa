#!/usr/bin/env bash
# EdgeCache HTTPS benchmark (issue 17 section 5): TLS hits over HTTP/1.1 and HTTP/2 and new TLS
# connections per second, against nginx and Traffic Server, with run.sh's cgroup and core rules.
#   bench/tls.sh            full run (4k x 100,000, 100k x 10,000, 1m x 1,000; ~35 min)
#   bench/tls.sh --quick    small sets, 5 s rounds (~11 min)
#   bench/tls.sh --quick --sizes 4k --rounds 1 --no-report    smoke test (~5 min)
#   bench/tls.sh --help     all options (bench/harness/tls.py)
# Needs root (cgroups v1 memory at /sys/fs/cgroup/memory, drop_caches) and 2+ cores.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
for a in "$@"; do
  if [[ "$a" == "-h" || "$a" == "--help" ]]; then exec "$PY" bench/harness/tls.py --help; fi
done

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v nginx >/dev/null || need+=(nginx-light)
command -v traffic_server >/dev/null || need+=(trafficserver)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v taskset >/dev/null || need+=(util-linux)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  for s in nginx trafficserver; do (service "$s" stop || true) >/dev/null 2>&1; done
fi

echo "building edgecache-origin + edgecache-loadgen (release)"
cargo build --release -q -p edgecache-origin
if [[ -z "${SKIP_EDGECACHE_BUILD:-}" ]]; then
  echo "building edgecache-dataplane (release)"
  if ! cargo build --release -q -p edgecache-dataplane --bin edgecache-dataplane 2>"$CARGO_TARGET_DIR/ecbench-dataplane-build.log"; then
    echo "WARNING: edgecache-dataplane did not build (see $CARGO_TARGET_DIR/ecbench-dataplane-build.log); EdgeCache will be skipped" >&2
  fi
fi

exec "$PY" bench/harness/tls.py --target-dir "$CARGO_TARGET_DIR" "$@"
