#!/usr/bin/env bash
# Fleet benchmark (issue 16 section 1): hit ratio and origin bytes of 1, 2 and 3 nodes with
# sharding, on one seeded trace, all on loopback. No root needed, nothing installed.
#   bench/fleet.sh                      1, 2, 3 nodes sharded + 3 unsharded, 300,000 requests (~15-20 min on 2 busy cores)
#   bench/fleet.sh --limit 20000 --nodes 1,2 --unsharded ''   a quick check (~1 min)
#   bench/fleet.sh --help               every option (bench/fleet.py)
# Builds edgecache-dataplane and edgecache-origin (release) into $CARGO_TARGET_DIR
# (default /var/tmp/edgecache-target). The trace comes from bench/workload/trace.py, which needs
# numpy: an existing trace is reused; otherwise /var/tmp/trace-venv (bench/workload/run.sh makes
# it) or a python3 with numpy makes it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
for a in "$@"; do
  if [[ "$a" == "-h" || "$a" == "--help" ]]; then exec "$PY" bench/fleet.py --help; fi
done
echo "building edgecache-dataplane + edgecache-origin (release, into $CARGO_TARGET_DIR)"
cargo build --release -q -p edgecache-dataplane -p edgecache-origin
exec "$PY" bench/fleet.py --target-dir "$CARGO_TARGET_DIR" "$@"
