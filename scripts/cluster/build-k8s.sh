#!/usr/bin/env bash
# Builds upstream Kubernetes v1.37.2 (and etcd) from the Go module proxy, once per machine.
# A throwaway Go module under $K8S_DIR (default /var/tmp/edgecache-k8s) requires
# k8s.io/kubernetes and replaces each staging module its go.mod lists (k8s.io/api, ...) with the
# same path at v0.37.2: outside the kubernetes repository those modules are `v0.0.0` + a local
# `replace` that only applies inside it. GOCACHE, GOMODCACHE and the binaries live there too, so
# a second clone or CI run on the machine builds nothing.
# Usage: scripts/cluster/build-k8s.sh   (prints nothing on stdout; the binaries are in $K8S_DIR/bin)
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
K8S_DIR=${K8S_DIR:-/var/tmp/edgecache-k8s}
GO=${GO:-/usr/local/go/bin/go}
BIN="$K8S_DIR/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd coredns)
# Cluster DNS (the Service names pods and the scenarios use); its own module, built with `go
# install`, so its requirements never meet the Kubernetes build's replaces.
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

missing=()
for b in "${BINARIES[@]}"; do
    [ -x "$BIN/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ] && [ "$(cat "$BIN/.version" 2>/dev/null)" = "$K8S_VERSION $COREDNS_VERSION" ]; then
    exit 0
fi

export GOCACHE="$K8S_DIR/gocache" GOMODCACHE="$K8S_DIR/gomod" GOPATH="$K8S_DIR/gopath"
# Never download another Go toolchain; the installed one is what we build with.
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=${CGO_ENABLED:-1}
src="$K8S_DIR/src"
mkdir -p "$src/cmd/etcd" "$BIN"

staging_minor=${K8S_VERSION#v1.}   # 37.2 -> staging modules are v0.37.2
if [ ! -f "$src/go.sum" ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" "$src/go.mod" 2>/dev/null; then
    log "go mod download k8s.io/kubernetes@$K8S_VERSION"
    (cd "$src" && "$GO" mod download k8s.io/kubernetes@"$K8S_VERSION")
    upstream="$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
    [ -f "$upstream" ] || { echo "build-k8s: $upstream missing" >&2; exit 1; }
    # Every `k8s.io/X => ./staging/src/k8s.io/X` of upstream's go.mod becomes `k8s.io/X v0.37.2`.
    replaces=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$upstream" | sort -u)
    [ -n "$replaces" ] || { echo "build-k8s: no staging replaces found in $upstream" >&2; exit 1; }
    {
        echo "module edgecache.local/k8s-build"
        echo
        echo "go $("$GO" env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        for m in $replaces; do echo "	$m => $m v0.$staging_minor"; done
        echo ")"
    } >"$src/go.mod"
    log "$(echo "$replaces" | wc -l) staging modules replaced at v0.$staging_minor"
    # etcd: upstream ships no Go-installable main for the server; etcdmain.Main is the binary's.
    cat >"$src/cmd/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    cat >"$src/tools.go" <<'GO'
//go:build tools

// Package tools pins the upstream commands this module builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    log "go mod tidy (downloads the dependencies once)"
    (cd "$src" && "$GO" mod tidy)
fi

# Without these the binaries report v0.0.0-master+$Format:%H$, which kubectl cannot parse and
# helm's kubeVersion check rejects.
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
-X k8s.io/component-base/version.gitTreeState=clean"

start=$(date +%s)
log "building ${BINARIES[*]} (nice; cold: about 10 min on 2 cores)"
cd "$src"
pkgs=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    pkgs+=("k8s.io/kubernetes/cmd/$b")
done
nice -n 10 "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/" "${pkgs[@]}" ./cmd/etcd
log "kubernetes $K8S_VERSION built in $(( $(date +%s) - start )) s into $BIN"
if [ ! -x "$BIN/coredns" ] || ! "$BIN/coredns" -version 2>/dev/null | grep -q "${COREDNS_VERSION#v}"; then
    start=$(date +%s)
    # Static (no cgo): the binary is also packed into the DNS pod's image as its only file.
    (cd "$K8S_DIR" && CGO_ENABLED=0 GOBIN="$BIN" nice -n 10 "$GO" install -trimpath -ldflags "-s -w" \
        "github.com/coredns/coredns@$COREDNS_VERSION")
    log "coredns $COREDNS_VERSION built in $(( $(date +%s) - start )) s"
fi
echo "$K8S_VERSION $COREDNS_VERSION" >"$BIN/.version"
