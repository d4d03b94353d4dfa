#!/usr/bin/env bash
# CPU per miss (4 KiB unless --size says) of the data plane, measured directly: the data plane alone on CPU 1 (one
# worker), the bench origin and the load generator on CPU 0, one pass of COUNT new ids through
# it (every body checked), its CPU time from /proc (user and system). Several binaries are run
# in turn, PAIRS times, so an A/B sees the same machine drift.
#
#   bench/miss_cpu.sh [--pairs N] [--count N] [--size 4k|100k|..] [--config FILE] BINARY [BINARY ...]
#
# Each line: the binary, misses/s, CPU µs per miss (all, user), and the store's record writes
# and the disk writes they went out in (store_record_writes_total, store_record_write_ops_total).
# Default config: `memory.limit: 256MiB`, as the bench's cgroup. Needs the release origin and
# load generator (cargo build --release -p edgecache-origin); ports 18000, 18080, 18090.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}/release
PAIRS=3 COUNT=100000 CONFIG= SIZE=4k
while [ $# -gt 0 ]; do
    case $1 in
    --pairs) PAIRS=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || { sed -n 2,12p "$0"; exit 2; }
for b in "$@"; do [ -x "$b" ] || { echo "miss_cpu: $b is not an executable" >&2; exit 2; }; done
for b in edgecache-origin edgecache-loadgen; do
    [ -x "$T/$b" ] || { echo "miss_cpu: $T/$b missing (cargo build --release -p edgecache-origin)" >&2; exit 2; }
done
WORK=$(mktemp -d /var/tmp/miss-cpu.XXXXXX)
if [ -z "$CONFIG" ]; then
    CONFIG=$WORK/config.yaml
    printf 'memory:\n  limit: 256MiB\n' >"$CONFIG"
fi
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }
metric() { curl -sf http://127.0.0.1:18090/metrics | awk -v n="$1" '$1 == n {print $2}'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; return 1; }

taskset -c 0 "$T/edgecache-origin" --listen 127.0.0.1:18000 --threads 1 >/dev/null 2>&1 &
PIDS+=($!)
wait_port 18000
start=0
for round in $(seq "$PAIRS"); do
    for b in "$@"; do
        rm -rf "$WORK/cache" && mkdir "$WORK/cache"
        taskset -c 1 "$b" serve --origin http://127.0.0.1:18000 --listen 127.0.0.1:18080 \
            --admin 127.0.0.1:18090 --cache-dir "$WORK/cache" --cache-size 1037MiB --workers 1 \
            --access-log off --config "$CONFIG" >"$WORK/dp.log" 2>&1 &
        dp=$!
        wait_port 18080 && wait_port 18090
        read -r u0 s0 < <(cpu $dp)
        out=$(taskset -c 0 "$T/edgecache-loadgen" pass --target 127.0.0.1:18080 --size "$SIZE" \
            --count "$COUNT" --start $((start += COUNT)) --conns 32)
        read -r u1 s1 < <(cpu $dp)
        writes=$(metric edgecache_dataplane_store_record_writes_total || true)
        ops=$(metric edgecache_dataplane_store_record_write_ops_total || true)
        kill $dp; wait $dp 2>/dev/null || true
        hz=$(getconf CLK_TCK)
        rps=$(grep -o '"req_per_s":[0-9.]*' <<<"$out" | cut -d: -f2)
        awk -v b="$b" -v r="$round" -v rps="$rps" -v n="$COUNT" -v hz="$hz" \
            -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v w="${writes:--}" -v o="${ops:--}" \
            'BEGIN { printf "%s round %d: %.0f misses/s, %.1f us CPU per miss (user %.1f), %s records in %s writes\n",
                     b, r, rps, (u + s) * 1e6 / hz / n, u * 1e6 / hz / n, w, o }'
    done
done
