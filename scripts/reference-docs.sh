#!/usr/bin/env bash
# Regenerates every page of docs/reference/ from the binaries that own the data (the command
# lines, the data-plane config type, its metrics registry, the CRDs). The tests
# `reference_docs` of edgecache-dataplane and edgecache-operator fail while a page is stale.
. "$(dirname "$0")/common.sh"
cd "$ROOT"
cargo run -q -p edgecache-dataplane -- reference --write docs/reference
cargo run -q -p edgecache-operator -- reference --write docs/reference
log "docs/reference/ regenerated"
