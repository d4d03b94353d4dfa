#!/usr/bin/env bash
# Realistic CDN workload and simulated baselines (issue 15 item 4), end to end:
#   bench/workload/run.sh                 venv, self-check, 1.5M-request trace, simulations (~3-4 min)
#   bench/workload/run.sh --quick         150,000 requests, capacities scaled down 10x (~30 s)
#   bench/workload/run.sh -- --alpha 1.0  arguments after -- go to trace.py
# Env: VENV (default /var/tmp/trace-venv), TRACE_DIR (default /var/tmp/edgecache-trace),
#      CAPACITY (default 2GiB,512MiB), POLICIES (default: all of simulate.py's).
# Installs python3-venv from Debian when it is missing (needs root), then the
# pinned PyPI packages of requirements.txt into the venv.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV:-/var/tmp/trace-venv}
TRACE_DIR=${TRACE_DIR:-/var/tmp/edgecache-trace}
CAPACITY=${CAPACITY:-2GiB,512MiB}
POLICIES=${POLICIES:-}

quick=0
trace_args=()
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --) shift; trace_args=("$@"); break ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Debian's python3 where there is one (a pyenv shim earlier in PATH may lack venv).
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "installing python3-venv"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
if ! "$VENV/bin/python" -c 'import libcachesim, numpy' >/dev/null 2>&1; then
  echo "creating $VENV"
  "$PY" -m venv "$VENV"
fi
# Idempotent: pip only downloads what is missing or at another version.
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$HERE/requirements.txt"
VPY="$VENV/bin/python"

# libCacheSim logs INFO lines (with colour codes) on stderr: keep them out of the way.
quiet() { grep -v -e 'INFO' -e $'^\e\\[0m$' || true; }

echo "== self-check (small traces)"
"$VPY" "$HERE/test_trace.py" 2>&1 | quiet

if ((quick)); then
  n=150000 keys=50000 CAPACITY=${CAPACITY_QUICK:-200MiB,50MiB}
else
  n=1500000 keys=500000
fi
echo "== trace ($n requests)"
out=$("$VPY" "$HERE/trace.py" --requests "$n" --keys "$keys" --out-dir "$TRACE_DIR" "${trace_args[@]}")
echo "$out"
bin=$(echo "$out" | awk '/\.oracleGeneral\.bin$/ {print $NF}')

echo "== simulations (capacity $CAPACITY)"
"$VPY" "$HERE/simulate.py" "$bin" --capacity "$CAPACITY" ${POLICIES:+--policies "$POLICIES"} 2>&1 | quiet
