#!/usr/bin/env bash
# Remove the test executables that later builds replaced from the shared build directory
# ($CARGO_TARGET_DIR/debug/deps): cargo names each by a hash of what it was built from and never
# deletes the old ones, so a machine that runs the tests after every change keeps every
# version (47 GB of them were found after a few dozen sessions, and a full disk failed a CI
# run). Keeps the two newest of each name: this run's, and another checkout's sharing the
# directory. Prints what it freed.
set -euo pipefail
deps="${CARGO_TARGET_DIR:-/var/tmp/edgecache-target}/debug/deps"
[ -d "$deps" ] || exit 0
find "$deps" -maxdepth 1 -type f -perm -u+x -regextype posix-extended \
    -regex '.*/[^/.]+-[0-9a-f]{16}' -printf '%T@ %s %f\n' |
    sort -rn |
    awk -v dir="$deps" '{
        name = $3; sub(/-[0-9a-f]+$/, "", name)
        if (++seen[name] > 2) { print dir "/" $3; freed += $2; n++ }
    } END { printf "prune-target: %d old test executables, %.1f GiB\n", n, freed / 2^30 > "/dev/stderr" }' |
    xargs -r rm -f
