#!/usr/bin/env bash
# The main job with an embedded default: an origin and the data plane on loopback. The first
# request is a MISS fetched from the origin and stored on disk; the second is a HIT read from the
# disk store through io_uring.
. "$(dirname "$0")/common.sh"
ensure_build_deps
cd "$ROOT"
log "building (release)"
cargo build --release -q -p edgecache-dataplane -p edgecache-origin
BIN=$CARGO_TARGET_DIR/release

work=$(mktemp -d /var/tmp/edgecache-demo.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ORIGIN_PORT=$(free_port); LISTEN_PORT=$(free_port); ADMIN_PORT=$(free_port)

"$BIN/edgecache-origin" --listen "127.0.0.1:$ORIGIN_PORT" >"$work/origin.log" 2>&1 &
pids+=($!)
"$BIN/edgecache-dataplane" serve --origin "http://127.0.0.1:$ORIGIN_PORT" \
    --listen "127.0.0.1:$LISTEN_PORT" --admin "127.0.0.1:$ADMIN_PORT" \
    --cache-dir "$work/cache" --cache-size 1GiB --workers 2 >"$work/dataplane.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null || { cat "$work/dataplane.log"; exit 1; }

url="http://127.0.0.1:$LISTEN_PORT/obj/1m/42"
show() {
    local label=$1
    curl -s -o "$work/body" -D "$work/head" "$url"
    local status verdict
    status=$(grep -i '^cache-status:' "$work/head" | cut -d' ' -f2- | tr -d '\r')
    case "$status" in
        *"; hit"*) verdict="HIT  (served from the disk store)" ;;
        *) verdict="MISS (fetched from the origin, stored on disk)" ;;
    esac
    printf '%-6s %s %s\n       cache-status: %s  bytes: %s  sha256: %s\n' "$label" \
        "$(head -1 "$work/head" | tr -d '\r')" "$verdict" "$status" \
        "$(stat -c %s "$work/body")" "$(sha256sum "$work/body" | cut -c1-16)"
}
echo
echo "EdgeCache demo: origin 127.0.0.1:$ORIGIN_PORT -> data plane 127.0.0.1:$LISTEN_PORT (cache in $work/cache)"
show "first"
show "second"
m=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics")
echo
echo "origin requests:  $(curl -s "http://127.0.0.1:$ORIGIN_PORT/__stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')"
echo "$m" | grep -E '^edgecache_dataplane_(requests_total|disk_reads_total|disk_read_bytes_total|io_engine_info|store_objects) ' | sed 's/^/metric:  /'
echo "$m" | grep -E '^edgecache_dataplane_(requests_total|io_engine_info)\{' | sed 's/^/metric:  /'
