#!/usr/bin/env bash
# The cluster tier: the chart, the operator and the cache pods on a real Kubernetes (v1.37.2,
# scripts/cluster.sh) on this machine.
#   1. scripts/cluster.sh up --layout e2e --netpol (the three nodes of e2e/kind.yaml, with
#      NetworkPolicies enforced; builds Kubernetes and the NetworkPolicy agent once per machine),
#      load-images (builds the images with images/build-local.sh when Docker
#      does not have them; BUILD_IMAGES=1 rebuilds);
#   2. the operator's namespace at Pod Security `restricted`; helm install with the CRDs off (the
#      operator starts before its CRDs), then helm upgrade --wait with them and
#      charts/edgecache/values-local.yaml: the same operator process turns Ready, and no apply
#      drew a warning (a failure is counted, and the tier goes on when the operator pod at least
#      runs, to report what else works);
#   3. e2e/local.sh: origin + EdgeCache, a MISS then a HIT through the node's port;
#   4. the cluster-agnostic scenarios of e2e/tests/kind.rs against the cluster's KUBECONFIG;
#   5. e2e/tests/helm_release.rs, one at a time: helm upgrade to a changed CRD schema, helm
#      uninstall with and without crds.keep (the release and its CRDs go and come back);
#   6. e2e/tests/control_plane.rs, one at a time: the operator's pod stopped in any state, the
#      API server killed and started again (last: the cluster is slow to recover from it);
#   7. scripts/cluster.sh down (KEEP_CLUSTER=1 keeps it).
# Prints `cluster-tier: N passed, M failed`; exits non-zero on any failure. Root only.
# Env: KEEP_CLUSTER=1, TEST_THREADS (default 1: two cores), SCENARIOS (a cargo test filter),
#      BUILD_IMAGES=1 (rebuild the images), LAYOUT (default e2e; `default` is one node),
#      NETPOL (default 1; 0: no NetworkPolicy agent, and the scenario that needs one is left out).
set -uo pipefail
# One compound command, read whole before it runs: editing this file during a run (minutes long)
# cannot change what runs.
{

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER="$ROOT/scripts/cluster.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}
PASSED=0
FAILED=0
log() { printf '\033[1m[cluster-tier] %s\033[0m\n' "$*" >&2; }
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
summary() { echo "cluster-tier: ${PASSED} passed, ${FAILED} failed"; }
start=$(date +%s)

finish() {
    if [ -z "${KEEP_CLUSTER:-}" ]; then
        "$CLUSTER" down >&2 || fail "scripts/cluster.sh down"
    else
        log "KEEP_CLUSTER=1: cluster kept (KUBECONFIG=$KUBECONFIG)"
    fi
    log "took $(( $(date +%s) - start )) s"
    summary
    [ "$FAILED" = 0 ] || exit 1
}
trap finish EXIT

[ "$(id -u)" = 0 ] || { echo "SKIPPED: the cluster tier needs root"; exit 0; }

t=$(date +%s)
NETPOL=${NETPOL:-1}
up_args=(--layout "${LAYOUT:-e2e}")
[ "$NETPOL" = 1 ] && up_args+=(--netpol)
KUBECONFIG=$("$CLUSTER" up "${up_args[@]}" | tail -n1) || { fail "scripts/cluster.sh up"; exit 1; }
export KUBECONFIG
pass "cluster up, node Ready ($(( $(date +%s) - t )) s)"

t=$(date +%s)
args=()
[ -n "${BUILD_IMAGES:-}" ] && args=(--build)
"$CLUSTER" load-images "${args[@]}" >&2 || { fail "images built and imported"; exit 1; }
pass "images imported ($(( $(date +%s) - t )) s)"

HELM=$("$ROOT/charts/install-helm.sh") || { fail "charts/install-helm.sh"; exit 1; }
kc() { "$CLUSTER" kubectl "$@"; }
OPERATOR_PODS=app.kubernetes.io/name=edgecache-operator
operator_pod() { kc -n edgecache-system get pods -l "$OPERATOR_PODS" -o jsonpath="{.items[0].metadata.name}" 2>/dev/null; }
# Section 3 of issue 35: the operator's namespace enforces Pod Security `restricted` (stricter
# than the `baseline` asked for) and warns at it, and nothing we apply draws a warning.
kc create namespace edgecache-system >/dev/null 2>&1 || true
kc label --overwrite namespace edgecache-system pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/warn=restricted >/dev/null
helm_out=$(mktemp /tmp/cluster-tier-helm.XXXXXX)

# Defect 17: the operator started before its CRDs exist (one `helm install` can start it so), then
# the CRDs arrive with an upgrade of the release: the same process must reconcile, and be Ready,
# promptly.
t=$(date +%s)
"$HELM" upgrade --install edgecache "$ROOT/charts/edgecache" -n edgecache-system \
    -f "$ROOT/charts/edgecache/values-local.yaml" --set crds.enabled=false >"$helm_out" 2>&1
for _ in $(seq 1 240); do
    [ "$(kc -n edgecache-system get pods -l "$OPERATOR_PODS" \
        -o jsonpath='{.items[0].status.containerStatuses[0].started}' 2>/dev/null)" = true ] && break
    sleep 0.5
done
sleep 3
early=$(operator_pod)
# The log read whole first: with pipefail, `kubectl logs | grep -q` fails when grep stops early.
early_log=$([ -n "$early" ] && kc -n edgecache-system logs "$early" 2>/dev/null)
if [ -n "$early" ] && grep -q "a watch failed" <<<"$early_log"; then
    pass "the operator started before its CRDs runs and logs the failing watch ($(( $(date +%s) - t )) s)"
else
    fail "the operator started before its CRDs runs and logs the failing watch"
    kc -n edgecache-system get pods >&2
    [ -n "$early" ] && kc -n edgecache-system logs "$early" --tail=20 >&2
fi

t=$(date +%s)
if "$HELM" upgrade --install edgecache "$ROOT/charts/edgecache" -n edgecache-system \
        -f "$ROOT/charts/edgecache/values-local.yaml" --wait --timeout "${HELM_TIMEOUT:-3m}" >>"$helm_out" 2>&1; then
    took=$(( $(date +%s) - t ))
    now=$(operator_pod)
    if [ "$now" = "$early" ] && [ "$(kc -n edgecache-system get pod "$now" -o jsonpath='{.status.containerStatuses[0].restartCount}')" = 0 ]; then
        pass "helm upgrade --wait adds the CRDs and the same operator process turns Ready (${took} s)"
    else
        fail "the operator started before its CRDs was replaced or restarted ($early -> $now)"
    fi
else
    fail "helm install --wait with values-local.yaml"
    kc -n edgecache-system get all >&2
    kc -n edgecache-system logs deploy/edgecache --tail=50 >&2
    phase=$(kc -n edgecache-system get pods -l "$OPERATOR_PODS" \
        -o jsonpath='{.items[0].status.containerStatuses[0].state.running.startedAt}' 2>/dev/null)
    [ -n "$phase" ] || exit 1
    log "the operator pod runs (not Ready): going on"
fi
if grep -qi 'warning' "$helm_out"; then
    fail "helm install and upgrade drew no warning from the API server"
    grep -i 'warning' "$helm_out" >&2
else
    pass "helm install and upgrade drew no warning from the API server (Pod Security restricted)"
fi

t=$(date +%s)
out=$("$ROOT/e2e/local.sh")
rc=$?
echo "$out" | while read -r l; do echo "  $l"; done
[ "$rc" = 0 ] && pass "e2e/local.sh: MISS then HIT through the node ($(( $(date +%s) - t )) s)" \
    || fail "e2e/local.sh"

# scenarios TARGET THREADS: `cargo test -p edgecache-e2e --test TARGET` on this cluster, one
# PASS/FAIL line per scenario.
scenarios() {
    local target=$1 threads=$2 t log_file failed_names skipped name netpol=()
    # Without the agent, the scenario that needs NetworkPolicies enforced is not run (rather
    # than SKIPPED, which fails the tier).
    if [ "$NETPOL" = 1 ]; then netpol=(env EDGECACHE_E2E_NETPOL=1)
    else netpol=(env); set -- "$target" "$threads" --skip under_a_default_deny_policy; fi
    t=$(date +%s)
    log "cargo test -p edgecache-e2e --test $target (on this cluster)"
    log_file=$(mktemp "/tmp/cluster-tier-$target.XXXXXX")
    (cd "$ROOT" && "${netpol[@]}" EDGECACHE_E2E_ANY_CONTEXT=1 EDGECACHE_CLUSTER_SH="$CLUSTER" EDGECACHE_HELM="$HELM" \
        EDGECACHE_E2E_DATAPLANE_IMAGE=docker.io/library/edgecache-dataplane:dev \
        EDGECACHE_E2E_ORIGIN_IMAGE=docker.io/library/edgecache-origin:dev \
        cargo test -p edgecache-e2e --test "$target" -- --nocapture \
            --test-threads "$threads" "${@:3}" ${SCENARIOS:-}) >"$log_file" 2>&1
    # One line per scenario. With --nocapture a scenario's own output may come between its name
    # and its `ok`, so the names come from the `test NAME ...` lines and the failures from
    # libtest's final `failures:` list. SKIPPED counts as a failure here, where the cluster is up.
    failed_names=$(awk '/^failures:$/ {f = 1; next} f && /^    [a-z0-9_]+$/ {print $1}' "$log_file")
    skipped=$(grep -c "^SKIPPED" "$log_file")
    for name in $(sed -n 's/^test \([a-z0-9_]*\) \.\.\. .*/\1/p' "$log_file"); do
        if echo "$failed_names" | grep -qx "$name"; then fail "$target scenario $name"
        elif [ "$skipped" != 0 ]; then fail "$target scenario $name (SKIPPED: no cluster?)"
        else pass "$target scenario $name"; fi
    done
    grep -q "^test result" "$log_file" || { fail "cargo test --test $target did not run (log: $log_file)"; tail -30 "$log_file" >&2; }
    grep -E '^(the |a )' "$log_file" | sed 's/^/  /' || true
    log "$target scenarios: $(( $(date +%s) - t )) s (log: $log_file)"
}
scenarios kind "${TEST_THREADS:-1}"
# Then, one at a time: these upgrade, uninstall and install again the release and its CRDs
# (every EdgeCache goes with the CRDs), so nothing may run beside them; each installs the release
# again as step 2 did. Not after control_plane: after its API server restart the controller
# manager's garbage collector did not collect the DaemonSets of EdgeCaches deleted with their CRD
# within 2 minutes (once; on a cluster that had not restarted, 1.4 s).
scenarios helm_release 1
# Last, one at a time: these stop the operator's pod and restart the API server.
scenarios control_plane 1
exit
}
