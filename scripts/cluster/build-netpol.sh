#!/usr/bin/env bash
# Builds the NetworkPolicy agent of `scripts/cluster.sh up --netpol`: scripts/cluster/netpol/
# main.go, which runs the controller of sigs.k8s.io/kube-network-policies (v0.8.0, from the Go
# module proxy, unmodified) with a kubeconfig. A throwaway module under $K8S_DIR, GOCACHE and
# GOMODCACHE beside the Kubernetes build's (build-k8s.sh): built once per machine, again only
# when main.go or the version changes.
# Usage: scripts/cluster/build-netpol.sh   (prints nothing on stdout; the binary is
# $K8S_DIR/bin/edgecache-netpol)
set -euo pipefail

VERSION=${NETPOL_VERSION:-v0.8.0}
K8S_DIR=${K8S_DIR:-/var/tmp/edgecache-k8s}
GO=${GO:-/usr/local/go/bin/go}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$K8S_DIR/bin"
OUT="$BIN/edgecache-netpol"

stamp="$VERSION $(sha256sum "$HERE/netpol/main.go" | cut -c1-16)"
if [ -x "$OUT" ] && [ "$(cat "$OUT.version" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
export GOCACHE="$K8S_DIR/gocache" GOMODCACHE="$K8S_DIR/gomod" GOPATH="$K8S_DIR/gopath"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
src="$K8S_DIR/netpol-src"
rm -rf "$src"
mkdir -p "$src" "$BIN"
cp "$HERE/netpol/main.go" "$src/main.go"
printf '\033[1m==> building the NetworkPolicy agent (sigs.k8s.io/kube-network-policies %s)\033[0m\n' "$VERSION" >&2
(
    cd "$src"
    "$GO" mod init edgecache.local/netpol >/dev/null 2>&1
    "$GO" get "sigs.k8s.io/kube-network-policies@$VERSION" >&2
    "$GO" mod tidy >&2
    "$GO" build -o "$OUT" .
)
echo "$stamp" >"$OUT.version"
