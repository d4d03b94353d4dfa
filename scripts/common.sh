# Shared by scripts/*.sh: installs what EdgeCache needs on Debian 12 and sets the build paths.
# Sourced, not run.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Builds live outside the clone so every clone (and CI) reuses them.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}
# Tools fetched once (helm) are cached here, outside the clone.
export EDGECACHE_TOOLS=${EDGECACHE_TOOLS:-/var/tmp/edgecache-tools}

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=
# apt_install PKG...: install the Debian packages that are missing.
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The Rust toolchain pinned in rust-toolchain.toml.
ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] || {
            apt_install curl ca-certificates
            log "installing rustup"
            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --default-toolchain none
        }
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
}

# What building and running the data plane needs: a C compiler for the eBPF program and libbpf
# headers, plus the tools the demo and tests use.
ensure_build_deps() {
    apt_install build-essential pkg-config clang libbpf-dev curl ca-certificates iproute2 ethtool \
        libcap2-bin util-linux python3 procps nghttp2-client openssl
    ensure_rust
}

# Prometheus and promtool (Debian's package) for the dashboard test
# (operator/controller/tests/dashboard_prometheus.rs), which runs /usr/bin/prometheus itself with
# its own config on a loopback port: the package's service must not start, nor stay enabled.
ensure_prometheus() {
    dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "install ok installed" && return 0
    local policy=/usr/sbin/policy-rc.d added=
    if [ ! -e "$policy" ]; then
        # invoke-rc.d asks this before starting a service: 101, not now.
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 0755 "$policy"
        added=1
    fi
    apt_install prometheus
    if [ -n "$added" ]; then as_root rm -f "$policy"; fi
    if [ -d /run/systemd/system ]; then
        as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
}
