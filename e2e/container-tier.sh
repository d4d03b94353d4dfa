#!/usr/bin/env bash
# The container tier: the shipped images and the pod the operator renders, run for real with
# Docker on this machine (no Kubernetes needed).
#
#  1. Start a Docker engine (installing docker.io if missing) and build edgecache-dataplane:dev,
#     edgecache-operator:dev and edgecache-origin:dev by the local path (images/build-local.sh:
#     no image is pulled).
#  2. Run `edgecache-operator render` in the operator image for an EdgeCache in `capabilities`
#     mode (e2e/container-tier/edgecache.yaml) and turn its DaemonSet's pod container into a
#     `docker run` (e2e/container-tier/pod_to_docker.py): same image, command, args, env, config
#     file from the ConfigMap, hostPath cache directory, memory limit, capabilities and seccomp,
#     on the host network with loopback ports.
#     The admin token Secret's volume is a file with a fresh random token, and $(POD_IP) in the
#     args is 127.0.0.1 (host network, loopback).
#  3. Assert: MISS then HIT; the cgroup's memory limit is the pod's; the eBPF steering program
#     attached (steering mode from the metrics); io_uring in use; a container restart keeps the
#     hits; under a seccomp profile that denies io_uring (what containerd 2.0 and Docker 25 ship)
#     the thread-pool engine in use, still serving the hits.
#  `privileged` mode is reported SKIPPED: `docker run --privileged` fails on this machine.
#
# Prints `container-tier: N passed, M failed`; exits non-zero on any failure. Root only.
# Env: CARGO_TARGET_DIR (default /var/tmp/edgecache-target), EDGECACHE_TOOLS, NO_CARGO=1 uses the
# release binaries already built, KEEP=1 keeps the containers and the work directory.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE="$ROOT/e2e/container-tier"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}
BIN="$CARGO_TARGET_DIR/release"
PASSED=0
FAILED=0
NAME_PREFIX="ec-tier-$$"
ORIGIN_PID=
WORK=

log() { printf '[container-tier] %s\n' "$*"; }
pass() { PASSED=$((PASSED + 1)); printf 'PASS: %s\n' "$*"; }
fail() { FAILED=$((FAILED + 1)); printf 'FAIL: %s\n' "$*"; }
summary() { echo "container-tier: ${PASSED} passed, ${FAILED} failed"; }
die() { fail "$*"; summary; exit 1; }

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED: container tier needs root (dockerd, capabilities, cgroups)"
    summary
    exit 0
fi

# --- Docker engine -----------------------------------------------------------------------------
if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq docker.io >/dev/null || die "apt-get install docker.io"
fi
for p in python3 curl; do
    command -v "$p" >/dev/null || apt-get install -y -qq "$p" >/dev/null || die "apt-get install $p"
done
python3 -c 'import yaml' 2>/dev/null || apt-get install -y -qq python3-yaml >/dev/null \
    || die "apt-get install python3-yaml"
# The Debian CLI matches the Debian daemon (API 1.41); another docker CLI on PATH may be newer.
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
export DOCKER
# The runtime `edgecache-runc`: runc plus the capabilities docker 20.10 cannot name (CAP_BPF);
# see e2e/container-tier/oci-runtime.sh. Registered in /etc/docker/daemon.json (reloadable).
TOOLS=${EDGECACHE_TOOLS:-/var/tmp/edgecache-tools}
mkdir -p "$TOOLS" /etc/docker
install -m 0755 "$HERE/oci-runtime.sh" "$TOOLS/edgecache-oci-runtime"
python3 - "$TOOLS/edgecache-oci-runtime" <<'PY' || die "cannot register the edgecache-runc runtime"
import json, os, sys
path = "/etc/docker/daemon.json"
cfg = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
want = {"path": sys.argv[1]}
if cfg.get("runtimes", {}).get("edgecache-runc") != want:
    cfg.setdefault("runtimes", {})["edgecache-runc"] = want
    with open(path + ".tmp", "w") as f:
        json.dump(cfg, f, indent=2)
    os.replace(path + ".tmp", path)
PY
if ! "$DOCKER" info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/dockerd.log)"
    (setsid dockerd >/var/log/dockerd.log 2>&1 &)
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && break
        sleep 0.5
    done
    "$DOCKER" info >/dev/null 2>&1 || die "dockerd did not start (see /var/log/dockerd.log)"
fi
if ! "$DOCKER" info --format '{{json .Runtimes}}' | grep -q edgecache-runc; then
    log "reloading dockerd's configuration (SIGHUP) for the edgecache-runc runtime"
    for pid in $(pidof dockerd); do kill -HUP "$pid"; done
    for _ in $(seq 1 50); do
        "$DOCKER" info --format '{{json .Runtimes}}' | grep -q edgecache-runc && break
        sleep 0.2
    done
    "$DOCKER" info --format '{{json .Runtimes}}' | grep -q edgecache-runc \
        || die "dockerd did not pick up the edgecache-runc runtime from /etc/docker/daemon.json"
fi

cleanup() {
    if [ -z "${KEEP:-}" ]; then
        for c in $("$DOCKER" ps -aq --filter "name=^${NAME_PREFIX}-" 2>/dev/null); do
            "$DOCKER" rm -f "$c" >/dev/null 2>&1
        done
        [ -n "$WORK" ] && rm -rf "$WORK"
    else
        log "KEEP=1: containers ${NAME_PREFIX}-* and $WORK kept"
    fi
    [ -n "$ORIGIN_PID" ] && kill "$ORIGIN_PID" 2>/dev/null
}
trap cleanup EXIT

# --- images ------------------------------------------------------------------------------------
log "building the images by the local path (images/build-local.sh)"
build_args=()
[ -n "${NO_CARGO:-}" ] && build_args=(--no-cargo)
"$ROOT/images/build-local.sh" "${build_args[@]}" || die "images/build-local.sh"
user=$("$DOCKER" image inspect edgecache-operator:dev --format '{{.Config.User}}')
ep=$("$DOCKER" image inspect edgecache-operator:dev --format '{{json .Config.Entrypoint}}')
if [ "$user" = "65532:65532" ] && [ "$ep" = '["/usr/local/bin/edgecache-operator"]' ]; then
    pass "operator image: non-root 65532, entrypoint /usr/local/bin/edgecache-operator"
else
    fail "operator image: user=$user entrypoint=$ep"
fi
# `crd` prints every CRD, in the order of crds/' two files.
if "$DOCKER" run --rm --network none --read-only --cap-drop ALL edgecache-operator:dev crd \
        | cmp -s - <(cat "$ROOT/crds/edgecache.dev_edgecaches.yaml" \
            "$ROOT/crds/edgecache.dev_edgecachepurges.yaml"); then
    pass "operator image runs (read-only, no capabilities): its CRDs equal crds/"
else
    fail "operator image: \`crd\` output differs from crds/*.yaml"
fi
libs_missing=$("$DOCKER" run --rm --entrypoint /usr/bin/ldd edgecache-dataplane:dev \
    /usr/local/bin/edgecache-dataplane 2>&1 | grep -c 'not found')
if [ "$libs_missing" = 0 ]; then
    pass "data-plane image: every shared library of the binary present"
else
    fail "data-plane image: $libs_missing shared libraries missing"
fi

# --- origin and the rendered pod ---------------------------------------------------------------
WORK=$(mktemp -d /var/tmp/ec-container-tier.XXXXXX)
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ORIGIN_PORT=$(free_port)
PORT=$(free_port)
ADMIN_PORT=$(free_port)
while [ "$PORT" = "$ORIGIN_PORT" ] || [ "$ADMIN_PORT" = "$PORT" ] || [ "$ADMIN_PORT" = "$ORIGIN_PORT" ]; do
    PORT=$(free_port); ADMIN_PORT=$(free_port)
done
"$BIN/edgecache-origin" --listen "127.0.0.1:$ORIGIN_PORT" --max-age 3600 >"$WORK/origin.log" 2>&1 &
ORIGIN_PID=$!
for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$ORIGIN_PORT/__health" >/dev/null && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$ORIGIN_PORT/__health" >/dev/null || die "origin did not start ($(cat "$WORK/origin.log"))"
log "origin on 127.0.0.1:$ORIGIN_PORT; data plane on 127.0.0.1:$PORT, admin 127.0.0.1:$ADMIN_PORT"

render() { # MODE -> $WORK/rendered-MODE.yaml
    local mode=$1
    sed -e "s|@ORIGIN_PORT@|$ORIGIN_PORT|; s|@PORT@|$PORT|; s|@ADMIN_PORT@|$ADMIN_PORT|" \
        -e "s|@CACHE_DIR@|$WORK/cache|; s|@SECURITY_MODE@|$mode|; s|@IMAGE@|edgecache-dataplane:dev|" \
        "$HERE/edgecache.yaml" >"$WORK/edgecache-$mode.yaml"
    # The cache directory is a temporary one, outside the default allowed host paths.
    "$DOCKER" run --rm -i --network none --read-only --cap-drop ALL edgecache-operator:dev \
        render -f - --allowed-host-path "$WORK" <"$WORK/edgecache-$mode.yaml" >"$WORK/rendered-$mode.yaml"
}
render capabilities || die "edgecache-operator render (in the operator image) failed"
pass "edgecache-operator render in the operator image: $(grep -c '^kind:' "$WORK/rendered-capabilities.yaml") objects"

render privileged || die "edgecache-operator render (privileged mode) failed"
if grep -q 'privileged: true' "$WORK/rendered-privileged.yaml"; then
    why=$("$DOCKER" run --rm --privileged --network none --entrypoint /bin/true edgecache-dataplane:dev 2>&1 \
        | grep -o 'unable to apply caps[^.]*' | head -1)
    echo "SKIPPED: privileged mode: docker run --privileged fails on this machine (${why:-it failed}; CAP_SYS_RESOURCE is missing from the bounding set); the rendered pod asks for privileged: true"
fi

# docker run arguments of the rendered pod; $1 = container name, $2.. = extra pod_to_docker args
pod_args() {
    python3 "$HERE/pod_to_docker.py" "$WORK/rendered-capabilities.yaml" "$WORK" "$@"
}
start() { # NAME [--seccomp-profile FILE]
    local name=$1
    shift
    local args
    args=$(pod_args "$name" "$@") || return 1
    mapfile -t argv <<<"$args"
    log "docker run ${argv[*]}"
    "$DOCKER" run -d "${argv[@]}" >/dev/null || return 1
    wait_ready "$name"
}
wait_ready() {
    for _ in $(seq 1 150); do
        curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null && return 0
        if [ "$("$DOCKER" inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" != true ]; then
            "$DOCKER" logs "$1" 2>&1 | tail -20
            return 1
        fi
        sleep 0.2
    done
    "$DOCKER" logs "$1" 2>&1 | tail -20
    return 1
}
metric_label() { # METRIC LABEL
    curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" \
        | sed -n "s/^$1{.*$2=\"\\([^\"]*\\)\".*/\\1/p" | head -1
}
metric_value() { # METRIC
    curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v m="$1" '$1 == m {print $2; exit}'
}
cache_status() { # PATH
    curl -s -o /dev/null -D - "http://127.0.0.1:$PORT$1" | tr -d '\r' \
        | sed -n 's/^[Cc]ache-[Ss]tatus: *//p'
}
origin_requests() { # PATH
    curl -sf "http://127.0.0.1:$ORIGIN_PORT/__stats?path=$1" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin).get("path_requests", 0))'
}

C1="$NAME_PREFIX-caps"
if ! start "$C1"; then
    die "the rendered pod's container did not become ready"
fi
pass "the rendered pod runs under docker (capabilities mode, seccomp $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seccomp"]["type"])' "$WORK/pod.json"))"

# The container's effective capabilities are exactly the pod's, less what this host lacks.
cap_check=$(python3 - "$WORK/pod.json" "$("$DOCKER" exec "$C1" grep CapEff /proc/1/status | awk '{print $2}')" <<'PY'
import json, sys
BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
        "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
        "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
        "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
        "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
        "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
        "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
        "BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40}
pod = json.load(open(sys.argv[1]))
eff = int(sys.argv[2], 16)
have = {n for n, b in BITS.items() if eff >> b & 1}
want = set(pod["capabilities"].get("add", [])) - set(pod["caps_unavailable"])
print("ok" if have == want else "bad", ",".join(sorted(have)), "|", ",".join(sorted(want)),
      "|", ",".join(pod["caps_unavailable"]) or "none", "|", ",".join(pod["caps_via_runtime"]) or "none")
PY
)
read -r verdict have _ want _ unavailable _ via <<<"$cap_check"
if [ "$verdict" = ok ]; then
    pass "container capabilities are the pod's: $have (added through the edgecache-runc runtime: $via; not in this host's bounding set, so left out: $unavailable)"
else
    fail "container capabilities $have, pod wants $want (unavailable here: $unavailable)"
fi

OBJ=/obj/256k/tier-1
first=$(cache_status "$OBJ")
second=$(cache_status "$OBJ")
if [[ "$first" == *fwd=* && "$first" != *hit* && "$second" == *hit* && "$(origin_requests "$OBJ")" == 1 ]]; then
    pass "MISS then HIT: first '$first', second '$second', origin asked once"
else
    fail "MISS then HIT: first '$first', second '$second', origin requests $(origin_requests "$OBJ")"
fi

want_mem=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory_limit"])' "$WORK/pod.json")
cg_mem=$("$DOCKER" exec "$C1" cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null \
    || "$DOCKER" exec "$C1" cat /sys/fs/cgroup/memory.max 2>/dev/null)
planned=$(metric_value edgecache_dataplane_memory_limit_bytes)
if [ "$cg_mem" = "$want_mem" ] && [ "$planned" = "$want_mem" ]; then
    pass "memory limit: the pod's $want_mem bytes is the container cgroup's and the data plane's plan"
else
    fail "memory limit: pod $want_mem, cgroup '$cg_mem', edgecache_dataplane_memory_limit_bytes '$planned'"
fi

mode=$(metric_label edgecache_dataplane_steering_info mode)
fallbacks=$(metric_value edgecache_dataplane_steering_fallbacks_total)
if [ "$mode" = cpu ] && [ "$fallbacks" = 0 ]; then
    pass "eBPF steering program attached: steering mode '$mode' in effect (no fallback)"
else
    fail "eBPF steering: mode '$mode' (wanted cpu), fallbacks '${fallbacks:-?}'"
fi

engine=$(metric_label edgecache_dataplane_io_engine_info engine)
if [ "$engine" = uring ]; then
    pass "io_uring in use (engine=\"$engine\") under seccomp Unconfined"
else
    fail "io engine '$engine', wanted uring"
fi

"$DOCKER" restart -t 20 "$C1" >/dev/null
if wait_ready "$C1"; then
    after=$(cache_status "$OBJ")
    if [[ "$after" == *hit* && "$(origin_requests "$OBJ")" == 1 ]]; then
        pass "container restart keeps the hits: '$after', origin still asked once"
    else
        fail "after a restart: '$after', origin requests $(origin_requests "$OBJ")"
    fi
else
    fail "the container did not come back after a restart"
fi
"$DOCKER" rm -f "$C1" >/dev/null

C2="$NAME_PREFIX-deny-uring"
if start "$C2" --seccomp-profile "$ROOT/e2e/fixtures/seccomp/deny-io-uring.json"; then
    engine=$(metric_label edgecache_dataplane_io_engine_info engine)
    said=$("$DOCKER" logs "$C2" 2>&1 | grep -Eci 'io_uring.*(not available|unavailable|denied)')
    after=$(cache_status "$OBJ")
    if [ "$engine" = threads ] && [ "$said" -gt 0 ] && [[ "$after" == *hit* ]]; then
        pass "seccomp denying io_uring: engine=\"threads\", its log says io_uring is not available, still serves the hit ('$after')"
    else
        fail "seccomp denying io_uring: engine '$engine', log lines about io_uring being unavailable: $said, '$after'"
        "$DOCKER" logs "$C2" 2>&1 | tail -10
    fi
    # The admin port wants the token for a PURGE (the token file the pod's Secret volume holds).
    token=$(cat "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin_token_file"])' "$WORK/pod.json")")
    purge() { # [TOKEN] -> HTTP status
        curl -s -o /dev/null -w '%{http_code}' -X PURGE -H "Host: 127.0.0.1:$PORT" \
            ${1:+-H "Authorization: Bearer $1"} "http://127.0.0.1:$ADMIN_PORT$OBJ"
    }
    without=$(purge)
    wrong=$(purge "not-the-token")
    with=$(purge "$token")
    refetched=$(cache_status "$OBJ")
    if [[ "$without" =~ ^40[13]$ && "$wrong" =~ ^40[13]$ && "$with" == 200 && "$refetched" == *fwd=* ]]; then
        pass "PURGE needs the admin token: without $without, wrong token $wrong, with it $with (then '$refetched')"
    else
        fail "PURGE and the admin token: without $without, wrong token $wrong, with it $with, then '$refetched'"
    fi
else
    fail "the data plane did not start under a seccomp profile denying io_uring"
fi

summary
[ "$FAILED" = 0 ]
