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
cd "$(dirname "$0")/.."
REPO=$(pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

# Debian's python3 gets python3-matplotlib from apt (a pyenv python3 earlier in PATH would not see it).
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
for a in "$@"; do
  if [[ "$a" == "-h" || "$a" == "--help" ]]; then exec "$PY" bench/harness/bench.py --help; fi
done

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v varnishd >/dev/null || need+=(varnish)
command -v traffic_server >/dev/null || need+=(trafficserver)
command -v fio >/dev/null || need+=(fio)
command -v taskset >/dev/null || need+=(util-linux)
command -v gcc >/dev/null || need+=(gcc libc6-dev)  # harness/srcaddr.c
"$PY" -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts the packaged services where it can; the benchmark runs its own.
  for s in nginx varnish trafficserver; do (service "$s" stop || true) >/dev/null 2>&1; done
fi

echo "building edgecache-origin + edgecache-loadgen (release)"
cargo build --release -q -p edgecache-origin
if [[ -z "${SKIP_EDGECACHE_BUILD:-}" ]]; then
  echo "building edgecache-dataplane (release)"
  if ! cargo build --release -q -p edgecache-dataplane --bin edgecache-dataplane 2>"$CARGO_TARGET_DIR/ecbench-dataplane-build.log"; then
    echo "WARNING: edgecache-dataplane did not build (see $CARGO_TARGET_DIR/ecbench-dataplane-build.log); EdgeCache will be skipped" >&2
  fi
fi

exec "$PY" bench/harness/bench.py --target-dir "$CARGO_TARGET_DIR" "$@"
