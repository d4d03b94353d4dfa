#!/usr/bin/env bash
# image-tar.sh OUT.tar TAG ROOTDIR ENTRYPOINT [USER]: packs ROOTDIR as a one-layer image in the
# docker-archive format (manifest.json + config + layer.tar), which `ctr images import` reads.
# No registry and no Docker needed: this is how the node gets its pause image.
set -euo pipefail
out=$1 tag=$2 rootdir=$3 entry=$4 user=${5:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Deterministic layer: same input, same digest (so re-imports are no-ops).
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootdir" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir "$work/$diff_id"
mv "$work/layer.tar" "$work/$diff_id/layer.tar"
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"Entrypoint":["$entry"],"User":"$user","Env":["PATH=/bin"]},
 "rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},
 "history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/cluster/image-tar.sh"}]}
JSON
config_id=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/$config_id.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' \
    "$config_id" "$tag" "$diff_id" >"$work/manifest.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 -C "$work" -cf "$out" manifest.json "$config_id.json" "$diff_id"
