#!/bin/sh
# An OCI runtime for dockerd that is runc plus one thing: capabilities Debian's docker 20.10
# cannot name (it predates CAP_BPF and CAP_PERFMON and rejects `--cap-add BPF`), passed as the
# env var EDGECACHE_OCI_ADD_CAPS=CAP_BPF,... are added to the container's bounding, effective and
# permitted sets, and the variable is removed from the container's environment. runc itself
# knows CAP_BPF. e2e/container-tier.sh registers this as the docker runtime `edgecache-runc`.
bundle=
prev=
for a in "$@"; do
    case "$prev" in --bundle | -b) bundle=$a ;; esac
    case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
    prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
    python3 - "$bundle/config.json" <<'PY' || exit 1
import json, sys
path = sys.argv[1]
spec = json.load(open(path))
proc = spec.get("process") or {}
env = proc.get("env") or []
add = [e.split("=", 1)[1] for e in env if e.startswith("EDGECACHE_OCI_ADD_CAPS=")]
if add:
    caps = [c for c in add[0].split(",") if c]
    proc["env"] = [e for e in env if not e.startswith("EDGECACHE_OCI_ADD_CAPS=")]
    sets = proc.setdefault("capabilities", {})
    for k in ("bounding", "effective", "permitted"):
        sets[k] = sorted(set(sets.get(k) or []) | set(caps))
    json.dump(spec, open(path, "w"))
PY
fi
exec runc "$@"
