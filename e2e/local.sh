#!/usr/bin/env bash
# The README's quick start on the cluster of scripts/cluster.sh: the test origin (bench/origin)
# as a Deployment and Service, an EdgeCache sized for this machine (e2e/local/edgecache.yaml:
# operator/controller/examples/edgecache.yaml asks for 4 CPUs, 8Gi and 200GiB), then a request
# through the node's port from the node itself: a MISS, then a HIT.
# Assumes `scripts/cluster.sh up`, `scripts/cluster.sh load-images` and the chart installed
# (scripts/cluster-tier.sh does all of it). Prints PASS/FAIL lines; exits non-zero on failure.
# Env: SECURITY_MODE (privileged, the default, or capabilities), KEEP=1 keeps the namespace.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER="$ROOT/scripts/cluster.sh"
NS=edge
MODE=${SECURITY_MODE:-privileged}
kc() { "$CLUSTER" kubectl "$@"; }
log() { printf '[local] %s\n' "$*" >&2; }

kc get nodes >/dev/null || { echo "no cluster: run scripts/cluster.sh up" >&2; exit 1; }
if [ -z "${KEEP:-}" ]; then
    trap 'kc delete namespace "$NS" --wait=false >/dev/null 2>&1 || true' EXIT
fi

# A previous run's namespace may still be terminating: objects cannot be created in it.
if kc get namespace "$NS" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null | grep -q .; then
    log "waiting for the previous namespace $NS to go"
    kc wait --for=delete "namespace/$NS" --timeout=180s >&2
fi
log "origin and EdgeCache web (security mode $MODE) in namespace $NS"
sed "s/@SECURITY_MODE@/$MODE/" "$ROOT/e2e/local/edgecache.yaml" | kc apply -f - >&2
kc -n "$NS" rollout status deploy/origin --timeout=120s >&2
log "waiting for EdgeCache web to be Ready"
if ! kc -n "$NS" wait edgecaches.edgecache.dev/web --for=condition=Ready --timeout=240s >&2; then
    kc -n "$NS" get edgecaches.edgecache.dev,daemonset,pods -o wide >&2 || true
    kc -n "$NS" describe pods >&2 || true
    echo "FAIL: EdgeCache web did not become Ready"
    exit 1
fi
kc -n "$NS" get pods -o wide >&2
# The node the cache pod runs on (host network: the node's address is the cache's). The
# request comes from node 1's namespace; the nodes' addresses are all on one bridge.
node_ip=$(kc -n "$NS" get pods -l app.kubernetes.io/instance=web -o jsonpath='{.items[0].status.hostIP}')

path="/obj/4096/local-$RANDOM$RANDOM"
status() { # the Cache-Status header of GET $path through the node's port
    "$CLUSTER" exec curl -sS -o /dev/null -D - --max-time 10 "http://$node_ip:8080$path" \
        | tr -d '\r' | sed -n 's/^[Cc]ache-[Ss]tatus: //p'
}
first=$(status)
second=$(status)
log "first:  Cache-Status: $first"
log "second: Cache-Status: $second"
rc=0
if [[ "$first" == *fwd=* && "$first" != *hit* ]]; then echo "PASS: first request through $node_ip:8080 is a MISS ($first)"; else
    echo "FAIL: first request should miss: Cache-Status $first"; rc=1; fi
if [[ "$second" == *hit* ]]; then echo "PASS: second request is a HIT ($second)"; else
    echo "FAIL: second request should hit: Cache-Status $second"; rc=1; fi
exit "$rc"
