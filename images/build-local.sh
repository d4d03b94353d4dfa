#!/usr/bin/env bash
# Builds edgecache-dataplane:dev, edgecache-operator:dev and edgecache-origin:dev without pulling
# any image (this machine and air-gapped ones): cargo builds the release binaries, the bases are
# made locally and `docker import`ed, and images/*.local.Dockerfile (the same runtime stages as
# the shipped images/*.Dockerfile) copy the binaries in.
#   - data plane (and the test origin): a Debian 12 minbase root from debootstrap, cached in
#     $EDGECACHE_TOOLS/rootfs (what debian:bookworm-slim is);
#   - operator: a distroless-style root (the binary's ldd libraries, CA certificates, /etc/passwd
#     with nonroot 65532, /tmp), what gcr.io/distroless/cc-debian12:nonroot is.
# Usage: images/build-local.sh [--no-cargo] [--tag TAG]
# Env: CARGO_TARGET_DIR (default /var/tmp/edgecache-target), EDGECACHE_TOOLS (default
#      /var/tmp/edgecache-tools), DOCKER (default docker).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${EDGECACHE_TOOLS:-/var/tmp/edgecache-tools}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}
# The Debian CLI matches the Debian daemon (another docker CLI on PATH may be newer and noisier).
if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
TAG=dev
CARGO=1
while [ $# -gt 0 ]; do
    case "$1" in
        --no-cargo) CARGO=0 ;;
        --tag) TAG=$2; shift ;;
        *) echo "usage: $0 [--no-cargo] [--tag TAG]" >&2; exit 2 ;;
    esac
    shift
done
BIN="$CARGO_TARGET_DIR/release"
DEBIAN_BASE=edgecache-base/bookworm-minbase:local
CC_BASE=edgecache-base/cc-nonroot:local
log() { printf '[build-local] %s\n' "$*" >&2; }

# The classic builder: it uses the imported bases as they are and never contacts a registry.
export DOCKER_BUILDKIT=0

if [ "$CARGO" = 1 ]; then
    log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    (cd "$ROOT" && cargo build --release --locked -q \
        -p edgecache-dataplane -p edgecache-operator -p edgecache-origin)
fi
for b in edgecache-dataplane edgecache-operator edgecache-origin; do
    [ -x "$BIN/$b" ] || { echo "build-local: $BIN/$b missing (run without --no-cargo)" >&2; exit 1; }
done

# --- Debian 12 minbase (debootstrap, cached) ---------------------------------------------------
if ! "$DOCKER" image inspect "$DEBIAN_BASE" >/dev/null 2>&1; then
    if [ ! -x "$TOOLS/rootfs/bin/sh" ]; then
        command -v debootstrap >/dev/null || {
            log "apt-get install debootstrap"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
        }
        log "debootstrap --variant=minbase bookworm $TOOLS/rootfs (about 30 s, once)"
        mkdir -p "$TOOLS"
        rm -rf "$TOOLS/rootfs.tmp"
        debootstrap --variant=minbase bookworm "$TOOLS/rootfs.tmp" >"$TOOLS/debootstrap.log" 2>&1 \
            || { tail -20 "$TOOLS/debootstrap.log" >&2; exit 1; }
        mv "$TOOLS/rootfs.tmp" "$TOOLS/rootfs"
    fi
    log "docker import $DEBIAN_BASE"
    # What the slim image leaves out: apt lists and caches, docs and man pages.
    tar -C "$TOOLS/rootfs" \
        --exclude=./var/lib/apt/lists/* --exclude=./var/cache/apt/* \
        --exclude=./usr/share/doc/* --exclude=./usr/share/man/* \
        --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* \
        -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$DEBIAN_BASE" >/dev/null
fi

# --- distroless-style cc root for the operator (rebuilt when the binary's libraries change) -----
cc_root="$TOOLS/cc-rootfs"
libs=$(ldd "$BIN/edgecache-operator" | awk '/=> \//{print $3} /^\s*\/.*ld-linux/{print $1}' | sort -u)
stamp=$(printf '%s\n' $libs | sha256sum | cut -c1-16)
if ! "$DOCKER" image inspect "$CC_BASE" --format '{{index .Config.Labels "edgecache.dev/libs"}}' 2>/dev/null \
        | grep -qx "$stamp"; then
    log "assembling $cc_root (libraries: $(echo $libs | tr '\n' ' '))"
    rm -rf "$cc_root"
    mkdir -p "$cc_root"/{etc,tmp,home/nonroot,usr/local/bin,etc/ssl/certs,lib64}
    chmod 1777 "$cc_root/tmp"
    chown 65532:65532 "$cc_root/home/nonroot"
    for l in $libs; do
        mkdir -p "$cc_root$(dirname "$l")"
        cp -L "$l" "$cc_root$l"
    done
    # Debian's merged /usr: /lib64/ld-linux-x86-64.so.2 is the loader path in the ELF header.
    if [ -e /lib64/ld-linux-x86-64.so.2 ] && [ ! -e "$cc_root/lib64/ld-linux-x86-64.so.2" ]; then
        cp -L /lib64/ld-linux-x86-64.so.2 "$cc_root/lib64/"
    fi
    cp -L /etc/ssl/certs/ca-certificates.crt "$cc_root/etc/ssl/certs/"
    cat >"$cc_root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
    cat >"$cc_root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
    echo 'hosts: files dns' >"$cc_root/etc/nsswitch.conf"
    log "docker import $CC_BASE"
    tar -C "$cc_root" -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
        --change "LABEL edgecache.dev/libs=$stamp" - "$CC_BASE" >/dev/null
fi

# --- the images ------------------------------------------------------------------------------
ctx=$(mktemp -d "${TMPDIR:-/tmp}/edgecache-images.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
build() { # NAME DOCKERFILE BASE BINARY
    local name=$1 dockerfile=$2 base=$3 binary=$4
    rm -rf "${ctx:?}/${name:?}" && mkdir -p "$ctx/$name"
    # Stripped, as the shipped Dockerfiles' `install -s` does.
    install -s -m 0755 "$BIN/$binary" "$ctx/$name/$binary"
    cp "$dockerfile" "$ctx/$name/Dockerfile"
    log "docker build $name:$TAG (FROM $base)"
    if ! "$DOCKER" build -q --build-arg "BASE=$base" -t "$name:$TAG" "$ctx/$name" \
            >"$ctx/$name.log" 2>&1; then
        cat "$ctx/$name.log" >&2
        return 1
    fi
}
build edgecache-dataplane "$ROOT/images/dataplane.local.Dockerfile" "$DEBIAN_BASE" edgecache-dataplane
build edgecache-operator "$ROOT/images/operator.local.Dockerfile" "$CC_BASE" edgecache-operator
# The loopback/kind test origin (bench/origin); not shipped to users.
mkdir -p "$ctx/origin-df"
cat >"$ctx/origin-df/Dockerfile" <<'EOF'
ARG BASE
FROM ${BASE}
COPY edgecache-origin /usr/local/bin/edgecache-origin
USER 65532:65532
EXPOSE 8000/tcp
ENTRYPOINT ["/usr/local/bin/edgecache-origin"]
CMD ["--listen", "0.0.0.0:8000"]
EOF
build edgecache-origin "$ctx/origin-df/Dockerfile" "$DEBIAN_BASE" edgecache-origin

for i in edgecache-dataplane edgecache-operator edgecache-origin; do
    "$DOCKER" image inspect "$i:$TAG" \
        --format "$i:$TAG {{.Size}} bytes user={{.Config.User}} entrypoint={{json .Config.Entrypoint}} cmd={{json .Config.Cmd}}" >&2
done
