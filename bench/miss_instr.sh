#!/usr/bin/env bash
# User-space instructions per miss of the data plane, counted by callgrind: the same figure run
# after run, where CPU time on this VM drifts by more than the changes it is asked to judge
# (bench/miss_cpu.sh). One worker; a pass of COUNT new ids (every body checked) after a short
# warm-up; only the pass is counted (callgrind_control zeroes and dumps around it). Several
# binaries are run in turn.
#
#   bench/miss_instr.sh [--count N] [--size 4k|100k|..] [--hits] [--keep DIR] BINARY [BINARY ...]
#
# --hits counts hits instead: two passes (not counted) store the COUNT objects and ask for them
# again (a second request admits a 4k object into the RAM tier), the counted pass asks for the
# same ones a third time: a RAM hit's cost (`ram_hits_total` says how many were).
#
# Each line: the binary, instructions per miss, and the share of them in memcpy (callgrind counts
# a `rep movsb` per byte, so large copies weigh more here than in CPU time). --keep DIR keeps
# each profile (DIR/<binary name>.callgrind) for `callgrind_annotate --inclusive=yes`.
# Needs valgrind, the release origin and load generator (cargo build --release -p
# edgecache-origin); ports 18000, 18080, 18090, or from MISS_INSTR_PORT (its origin; +80 the
# cache, +90 the admin port) so that two runs can share a machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}/release
COUNT=3000 SIZE=4k KEEP= WHAT=miss
P=${MISS_INSTR_PORT:-18000}
ORIGIN_PORT=$P CACHE_PORT=$((P + 80)) ADMIN_PORT=$((P + 90))
while [ $# -gt 0 ]; do
    case $1 in
    --count) COUNT=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    --hits) WHAT=hit; shift ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || { sed -n 2,14p "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "miss_instr: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
for b in "$@"; do [ -x "$b" ] || { echo "miss_instr: $b is not an executable" >&2; exit 2; }; done
for b in edgecache-origin edgecache-loadgen; do
    [ -x "$T/$b" ] || { echo "miss_instr: $T/$b missing (cargo build --release -p edgecache-origin)" >&2; exit 2; }
done
WORK=$(mktemp -d /var/tmp/miss-instr.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; return 1; }
printf 'memory:\n  limit: 256MiB\n' >"$WORK/config.yaml"
"$T/edgecache-origin" --listen 127.0.0.1:$ORIGIN_PORT --threads 1 >/dev/null 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT
for b in "$@"; do
    rm -rf "$WORK/cache" && mkdir "$WORK/cache"
    out=$WORK/callgrind.out
    valgrind --tool=callgrind --callgrind-out-file="$out" "$b" serve \
        --origin http://127.0.0.1:$ORIGIN_PORT --listen 127.0.0.1:$CACHE_PORT --admin 127.0.0.1:$ADMIN_PORT \
        --cache-dir "$WORK/cache" --cache-size 1037MiB --workers 1 --access-log off \
        --config "$WORK/config.yaml" >"$WORK/dp.log" 2>&1 &
    dp=$!
    wait_port $CACHE_PORT && wait_port $ADMIN_PORT
    "$T/edgecache-loadgen" pass --target 127.0.0.1:$CACHE_PORT --size "$SIZE" --count 500 \
        --start 900000000 --conns 8 >/dev/null
    if [ "$WHAT" = hit ]; then
        for _ in 1 2; do
            "$T/edgecache-loadgen" pass --target 127.0.0.1:$CACHE_PORT --size "$SIZE" --count "$COUNT" \
                --start 1000 --conns 32 >/dev/null
        done
    fi
    callgrind_control -z "$dp" >/dev/null 2>&1
    "$T/edgecache-loadgen" pass --target 127.0.0.1:$CACHE_PORT --size "$SIZE" --count "$COUNT" \
        --start 1000 --conns 32 >/dev/null
    callgrind_control -d "$dp" >/dev/null 2>&1
    if [ "$WHAT" = hit ]; then
        # Every pass so far: what the requests were (hit_ram after the second pass is the count).
        (exec 3<>/dev/tcp/127.0.0.1/$ADMIN_PORT && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3) |
            grep -E '^edgecache_dataplane_requests_total\{cache="hit_(ram|disk)"' >&2 || true
    fi
    kill "$dp"; wait "$dp" 2>/dev/null || true
    dump=$out.1
    total=$(awk '/^summary:/ {print $2}' "$dump")
    copy=$(callgrind_annotate --inclusive=no --threshold=100 "$dump" 2>/dev/null |
        awk '/__memcpy|__memmove/ {gsub(",", "", $1); s += $1} END {print s + 0}')
    [ -z "$KEEP" ] || { mkdir -p "$KEEP" && cp "$dump" "$KEEP/$(basename "$b").callgrind"; }
    awk -v b="$b" -v t="$total" -v c="$copy" -v n="$COUNT" -v s="$SIZE" \
        -v w="$WHAT" \
        'BEGIN { printf "%s: %.0f instructions per %s %s (%.1f%% in memcpy)\n", b, t / n, s, w, 100 * c / t }'
    rm -f "$out" "$dump"
done
