#!/bin/sh
# The node's OCI runtime (containerd's runc BinaryName, rendered by scripts/cluster.sh): runc,
# after removing from a container's capability sets those this machine's own bounding set lacks
# (CAP_SYS_RESOURCE here), so that a pod asking for one runs instead of failing with "runc create
# failed: unable to start container process: unable to apply caps: operation not permitted".
# Every removal is written to @NODE_DIR@/runc-wrapper.log: a test on this machine must say what
# it did not get. Nothing else changes.
bundle=
prev=
for a in "$@"; do
    case "$prev" in --bundle | -b) bundle=$a ;; esac
    case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
    prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
    python3 - "$bundle/config.json" >>"@NODE_DIR@/runc-wrapper.log" 2>&1 <<'PY' || exit 1
import json, sys, time
# Capability numbers as the kernel names them (linux/capability.h), up to CAP_CHECKPOINT_RESTORE.
NAMES = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
         "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN",
         "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE",
         "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
         "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
         "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
         "PERFMON", "BPF", "CHECKPOINT_RESTORE"]
bnd = 0
for line in open("/proc/self/status"):
    if line.startswith("CapBnd:"):
        bnd = int(line.split()[1], 16)
have = {"CAP_" + n for i, n in enumerate(NAMES) if bnd >> i & 1}
path = sys.argv[1]
spec = json.load(open(path))
sets = (spec.get("process") or {}).get("capabilities") or {}
removed = set()
for k, caps in sets.items():
    keep = [c for c in caps or [] if c in have or c not in {"CAP_" + n for n in NAMES}]
    removed |= set(caps or []) - set(keep)
    sets[k] = keep
if removed:
    json.dump(spec, open(path, "w"))
    print(f"{time.strftime('%FT%TZ', time.gmtime())} {path}: removed {','.join(sorted(removed))} "
          "(not in this machine's capability bounding set)")
PY
fi
exec runc "$@"
