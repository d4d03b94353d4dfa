#!/usr/bin/env bash
# The store at scale (issue 15): for 1, 10 and 50 million objects (where the disk holds them),
#   - a bulk fill through the store API (examples/index_scale.rs: 32 writers at once, 100-byte
#     bodies, one 4 KiB packed record each), with the index's bytes per object, RSS growth per
#     object, hit and miss lookup cost, and the store's own restart times;
#   - then the data plane started on that store: time to /readyz from its checkpoint, its RSS
#     (and peak RSS) per object against the same data plane on an empty 1 GiB store, time to
#     /readyz after a clean stop (SIGTERM) and after SIGKILL with objects written since.
#   bench/store_scale.sh [--counts "1000000 10000000 50000000"] [--work /var/tmp/ec-scale]
# Results: bench/results/store-scale-<run id>.txt (the lines the tools print, and a summary).
set -euo pipefail
. "$(dirname "$0")/../scripts/common.sh"
cd "$ROOT"

counts="1000000 10000000 50000000"
work=/var/tmp/ec-scale
run_id=$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
    --counts) counts=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --run-id) run_id=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

ensure_build_deps
apt_install bc  # the timings and ratios below
cargo build --release -q -p edgecache-store --example index_scale
cargo build --release -q -p edgecache-dataplane -p edgecache-origin
bin=$CARGO_TARGET_DIR/release
out=bench/results/store-scale-$run_id.txt
mkdir -p "$work" bench/results
: >"$out"
say() { echo "$*" | tee -a "$out"; }

origin_port=18400 listen=18480 admin=18490
"$bin/edgecache-origin" --listen 127.0.0.1:$origin_port >/dev/null 2>&1 &
origin_pid=$!
dp_pid=
cleanup() {
    [ -n "$dp_pid" ] && kill -9 "$dp_pid" 2>/dev/null || true
    kill "$origin_pid" 2>/dev/null || true
    rm -rf "$work"/index-scale-* "$work"/empty
}
trap cleanup EXIT

# start_dp DIR MIB: a data plane on DIR (its pid in dp_pid); the seconds to /readyz in ready.
start_dp() {
    local t0 now
    t0=$(date +%s.%N)
    "$bin/edgecache-dataplane" serve --origin http://127.0.0.1:$origin_port \
        --listen 127.0.0.1:$listen --admin 127.0.0.1:$admin --cache-dir "$1" \
        --cache-size "$2MiB" --workers 1 --access-log off >>"$work/dp.log" 2>&1 &
    dp_pid=$!
    until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1; do
        kill -0 "$dp_pid" 2>/dev/null || { echo "data plane exited; see $work/dp.log" >&2; exit 1; }
        sleep 0.02
    done
    now=$(date +%s.%N)
    ready=$(printf "%.2f" "$(echo "$now - $t0" | bc)")
}
rss_kib() { awk -v f="${1:-VmRSS}:" '$1 == f {print $2}' "/proc/$dp_pid/status"; }
metric() { curl -s "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
stop_dp() {
    kill "-$1" "$dp_pid"
    wait "$dp_pid" 2>/dev/null || true
    dp_pid=
}

say "store scale run $run_id, $(git rev-parse --short HEAD), $(nproc) cores, $(uname -r)"
for n in $counts; do
    # One 4 KiB record an object, 2% spare and 256 MiB (index_scale sizes its store so).
    need=$((n * 4096 + n * 4096 / 50 + (1 << 30)))
    free=$(df --output=avail -B1 "$work" | tail -1)
    if [ "$free" -lt "$need" ]; then
        say "$n objects: not run, $work has $((free >> 30)) GiB free and they need $((need >> 30)) GiB"
        continue
    fi
    say "== $n objects"
    "$bin/examples/index_scale" --count "$n" --body 100 --writers 32 --dir "$work" | tee -a "$out"
    kept=$(grep -o 'kept [^ ]*' "$out" | tail -1 | cut -d' ' -f2)
    mib=$(grep -o 'cache-size [0-9]*MiB' "$out" | tail -1 | grep -o '[0-9]*')
    # The same data plane on an empty 1 GiB store: the baseline for RSS (a store of the same
    # size would not fit beside this one).
    mkdir -p "$work/empty"
    start_dp "$work/empty" 1024
    sleep 1
    rss0=$(rss_kib)
    stop_dp TERM
    rm -rf "$work/empty"
    start_dp "$kept" "$mib"
    sleep 1
    objects=$(metric edgecache_dataplane_store_objects)
    index_bytes=$(metric edgecache_dataplane_store_index_bytes)
    rss=$(rss_kib)
    hwm=$(rss_kib VmHWM)
    say "dataplane open: ready in ${ready} s (from the fill's checkpoint), objects $objects, index $index_bytes B, RSS $rss KiB (peak $hwm KiB; on an empty 1 GiB store $rss0 KiB): $(echo "scale=1; ($rss - $rss0) * 1024 / $objects" | bc) B/object RSS, $(echo "scale=1; $index_bytes / $objects" | bc) B/object index"
    stop_dp TERM
    start_dp "$kept" "$mib"
    say "dataplane after a clean stop (SIGTERM): ready in ${ready} s, objects $(metric edgecache_dataplane_store_objects)"
    # Objects written since the last checkpoint, then a kill.
    "$bin/edgecache-loadgen" pass --target 127.0.0.1:$listen --size 4k --count 20000 --conns 32 >/dev/null
    before=$(metric edgecache_dataplane_store_objects)
    stop_dp KILL
    start_dp "$kept" "$mib"
    say "dataplane after SIGKILL (20,000 objects written since the start): ready in ${ready} s, objects $(metric edgecache_dataplane_store_objects) (before the kill $before)"
    stop_dp TERM
    rm -rf "$kept"
done
say "results in $out"
