# What the benchmark scripts share (sourced by run.sh, tls.sh and compress.sh): the repository as the working directory, the build directory, the Python that runs
# the harness, `--help` handed to it, the Debian packages the run needs, and the release builds.

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

# Debian's python3 gets python3-matplotlib and python3-brotli from apt (a pyenv python3 earlier
# in PATH would not see them).
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3

# bench_help HARNESS ARGS...: `-h` or `--help` among ARGS shows the harness's own help.
bench_help() {
  local harness=$1 a
  shift
  for a in "$@"; do
    if [[ "$a" == "-h" || "$a" == "--help" ]]; then exec "$PY" "$harness" --help; fi
  done
}

# bench_need CHECK:PACKAGES ...: installs with apt-get the packages of each CHECK that fails.
# CHECK is a command name, or `py:MODULE` for a Python module; PACKAGES are separated by `+`.
bench_need() {
  local need=() item check pkgs
  for item in "$@"; do
    check=${item%%:*} pkgs=${item#*:}
    if [[ "$check" == py ]]; then
      check=${pkgs%%=*} pkgs=${pkgs#*=}
      "$PY" -c "import $check" 2>/dev/null && continue
    else
      command -v "$check" >/dev/null && continue
    fi
    need+=(${pkgs//+/ })
  done
  ((${#need[@]})) || return 0
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts the packaged services where it can; the benchmark runs its own.
  local s
  for s in nginx varnish trafficserver; do (service "$s" stop || true) >/dev/null 2>&1; done
}

# bench_build [CARGO BUILD ARGS...]: the origin and load generator, then (unless
# SKIP_EDGECACHE_BUILD is set) the data plane and any further release build given; if those do
# not build, EdgeCache is left out of the run with a warning.
bench_build() {
  echo "building edgecache-origin + edgecache-loadgen (release)"
  cargo build --release -q -p edgecache-origin
  [[ -z "${SKIP_EDGECACHE_BUILD:-}" ]] || return 0
  echo "building edgecache-dataplane (release)"
  local log="$CARGO_TARGET_DIR/ecbench-dataplane-build.log"
  if ! { cargo build --release -q -p edgecache-dataplane --bin edgecache-dataplane &&
      { (($# == 0)) || cargo build --release -q "$@"; }; } 2>"$log"; then
    echo "WARNING: edgecache-dataplane did not build (see $log); EdgeCache will be skipped" >&2
  fi
}
