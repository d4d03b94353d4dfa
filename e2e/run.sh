#!/usr/bin/env bash
# The kind end-to-end run (for machines with Docker, kind, kubectl, cargo and internet access):
#   1. create the cluster of e2e/kind.yaml (labelled NVMe/ADQ workers, a plain one, host cache
#      dirs, a seccompDefault kubelet on one worker) and check the kubelet patch took effect;
#   2. build the images (images/build-local.sh, or the shipped Dockerfiles with
#      USE_DOCKERFILES=1) and `kind load` them;
#   3. `helm install --wait` the chart (charts/edgecache/ci/kind-values.yaml), then `helm test`;
#   4. run the e2e crate's kind tests (e2e/tests/kind.rs) against the cluster;
#   5. on failure, collect diagnostics into $ARTIFACTS; always delete the cluster (KEEP_CLUSTER=1
#      keeps it).
# Env: KIND_NODE_IMAGE (default kindest/node:v1.32.2, containerd 2.0), CLUSTER (edgecache-e2e),
#      ARTIFACTS (default /tmp/edgecache-kind-artifacts), TEST_THREADS (default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=${CLUSTER:-edgecache-e2e}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.32.2}
ARTIFACTS=${ARTIFACTS:-/tmp/edgecache-kind-artifacts}
TEST_THREADS=${TEST_THREADS:-2}
HOST_DIR=/tmp/edgecache-kind # fixed in e2e/kind.yaml
NAMESPACE=edgecache-system
RELEASE=edgecache
TAG=dev
export KUBECONFIG="$HOST_DIR/kubeconfig"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}

log() { printf '\n[e2e] %s\n' "$*"; }
need() { command -v "$1" >/dev/null || { echo "e2e/run.sh needs $1 ($2)" >&2; exit 2; }; }
need docker "https://docs.docker.com/engine/install/"
need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
need cargo "https://rustup.rs"
if command -v helm >/dev/null; then HELM=$(command -v helm); else HELM=$("$ROOT/charts/install-helm.sh"); fi

diagnostics() {
    log "collecting diagnostics into $ARTIFACTS"
    mkdir -p "$ARTIFACTS"
    kubectl get nodes -o wide --show-labels >"$ARTIFACTS/nodes.txt" 2>&1 || true
    kubectl get all,edgecaches,edgecachepurges,configmaps,serviceaccounts,events -A -o wide >"$ARTIFACTS/all.txt" 2>&1 || true
    kubectl get edgecaches -A -o yaml >"$ARTIFACTS/edgecaches.yaml" 2>&1 || true
    kubectl get edgecachepurges -A -o yaml >"$ARTIFACTS/edgecachepurges.yaml" 2>&1 || true
    kubectl describe pods -A >"$ARTIFACTS/pods-describe.txt" 2>&1 || true
    kubectl -n "$NAMESPACE" logs deploy/"$RELEASE" --tail=-1 >"$ARTIFACTS/operator.log" 2>&1 || true
    for ns in $(kubectl get ns -l edgecache.dev/e2e=true -o name 2>/dev/null | cut -d/ -f2); do
        for p in $(kubectl -n "$ns" get pods -o name 2>/dev/null); do
            kubectl -n "$ns" logs "$p" --all-containers --tail=200 \
                >"$ARTIFACTS/$ns-${p#pod/}.log" 2>&1 || true
        done
    done
    kind export logs "$ARTIFACTS/kind" --name "$CLUSTER" >/dev/null 2>&1 || true
}

status=1
finish() {
    if [ "$status" != 0 ]; then diagnostics; fi
    if [ -z "${KEEP_CLUSTER:-}" ]; then
        log "deleting the cluster $CLUSTER"
        kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    else
        log "KEEP_CLUSTER=1: cluster $CLUSTER kept (KUBECONFIG=$KUBECONFIG)"
    fi
    [ "$status" = 0 ] && log "e2e: passed" || log "e2e: FAILED (diagnostics in $ARTIFACTS)"
}
trap finish EXIT

# --- 1. cluster --------------------------------------------------------------------------------
mkdir -p "$HOST_DIR"/{nvme-adq,nvme-seccomp-default,seccomp}
cp "$ROOT/e2e/fixtures/seccomp/deny-io-uring.json" "$HOST_DIR/seccomp/"
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "kind create cluster $CLUSTER ($KIND_NODE_IMAGE)"
    kind create cluster --name "$CLUSTER" --config "$ROOT/e2e/kind.yaml" \
        --image "$KIND_NODE_IMAGE" --wait 180s --kubeconfig "$KUBECONFIG"
else
    kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
fi
kubectl config use-context "kind-$CLUSTER" >/dev/null

seccomp_node=$(kubectl get nodes -l edgecache.dev/e2e-role=nvme-seccomp-default -o name | cut -d/ -f2)
[ -n "$seccomp_node" ] || { echo "no node labelled nvme-seccomp-default" >&2; exit 1; }
if ! docker exec "$seccomp_node" sh -c \
        'grep -q "^seccompDefault: true" /var/lib/kubelet/config.yaml || tr "\0" " " </proc/$(pidof kubelet)/cmdline | grep -q -- "--seccomp-default=true"'; then
    log "the kubeadm patch did not reach the kubelet of $seccomp_node: patching its config"
    docker exec "$seccomp_node" sh -c \
        'sed -i "/^seccompDefault:/d" /var/lib/kubelet/config.yaml && echo "seccompDefault: true" >>/var/lib/kubelet/config.yaml && systemctl restart kubelet'
    kubectl wait --for=condition=Ready "node/$seccomp_node" --timeout=120s
fi

# --- 2. images ---------------------------------------------------------------------------------
if [ -n "${USE_DOCKERFILES:-}" ]; then
    log "docker build with the shipped Dockerfiles"
    DOCKER_BUILDKIT=1 docker build -f "$ROOT/images/dataplane.Dockerfile" -t "edgecache-dataplane:$TAG" "$ROOT"
    DOCKER_BUILDKIT=1 docker build -f "$ROOT/images/operator.Dockerfile" -t "edgecache-operator:$TAG" "$ROOT"
    # The test origin has no shipped Dockerfile: the local path builds it.
    "$ROOT/images/build-local.sh" --tag "$TAG"
else
    log "images/build-local.sh"
    "$ROOT/images/build-local.sh" --tag "$TAG"
fi
for i in edgecache-dataplane edgecache-operator edgecache-origin; do
    kind load docker-image "$i:$TAG" --name "$CLUSTER"
done

# --- 3. chart ----------------------------------------------------------------------------------
log "helm install $RELEASE (namespace $NAMESPACE)"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$HELM" upgrade --install "$RELEASE" "$ROOT/charts/edgecache" --namespace "$NAMESPACE" \
    --values "$ROOT/charts/edgecache/ci/kind-values.yaml" --wait --timeout 5m
kubectl get crd edgecaches.edgecache.dev edgecachepurges.edgecache.dev >/dev/null
log "helm test $RELEASE"
"$HELM" test "$RELEASE" --namespace "$NAMESPACE" --timeout 5m --logs

# --- 4. e2e tests ------------------------------------------------------------------------------
log "cargo test -p edgecache-e2e --test kind"
out="$HOST_DIR/e2e-test.log"
set +e
(cd "$ROOT" && EDGECACHE_E2E_DATAPLANE_IMAGE="edgecache-dataplane:$TAG" \
    EDGECACHE_E2E_ORIGIN_IMAGE="edgecache-origin:$TAG" \
    cargo test -p edgecache-e2e --test kind -- --nocapture --test-threads "$TEST_THREADS") 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then exit "$rc"; fi
# Here the cluster exists: a SKIPPED line means the tests did not run, which is a failure.
if grep -q '^SKIPPED: no kind cluster' "$out"; then
    echo "e2e: the kind tests skipped although the cluster is up:" >&2
    grep '^SKIPPED' "$out" >&2
    exit 1
fi
status=0
