#!/usr/bin/env bash
# The module graph of the data plane's crates and its circles, and the graph of the crates
# (scripts/module-graph/src/lib.rs says how it is read). Arguments go to the tool:
#   scripts/module-graph.sh [--edges] [DIR ...]    (default: dataplane/)
# The test scripts/module-graph/tests/circles.rs fails when a circle comes back.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run -q -p edgecache-module-graph -- "$@"
