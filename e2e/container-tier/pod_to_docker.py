#!/usr/bin/env python3
"""Turn the DaemonSet that `edgecache-operator render` prints into a `docker run` of its pod's
container, the way a kubelet would run it on one node:

  image, command (entrypoint) and args, with $(VAR) references to the container's env expanded
  as the kubelet does; env (fieldRefs resolved as on a node named NODE, status.podIP as
  127.0.0.1: the host network on loopback); the ConfigMap's files written to WORKDIR/config and
  mounted read-only at the mount path; a Secret volume (the admin token Secret, which the
  operator creates with a random token and peer key) as WORKDIR/secret-NAME/token and
  peer-key, each fresh and random, mounted read-only;
  the hostPath mounted at its mount path; emptyDirs as WORKDIR/empty-NAME; the memory limit
  (--memory, the cgroup limit the data plane sizes its RAM tier from); capabilities (--cap-drop /
  --cap-add); seccomp (Unconfined -> seccomp=unconfined, Localhost/RuntimeDefault -> the profile
  given with --seccomp-profile); runAsUser; readOnlyRootFilesystem; host network.

The one change for this machine: the data plane's listen and admin addresses in the config
file are bound to 127.0.0.1 instead of 0.0.0.0 (loopback only), same ports.

Usage: pod_to_docker.py RENDERED.yaml WORKDIR NAME [--seccomp-profile FILE]
Prints one docker-run argument per line (image, then the container args, last) and writes
WORKDIR/pod.json with what it extracted (for the assertions).
"""
import json
import os
import re
import secrets
import sys

import yaml

# Capabilities newer than Debian's docker 20.10 (it rejects them in --cap-add); runc knows them.
DOCKER_UNKNOWN_CAPS = {"PERFMON", "BPF", "CHECKPOINT_RESTORE"}
CAP_BITS = {"NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "IPC_LOCK": 14, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
            "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40}


def host_bounding_set():
    for line in open("/proc/self/status"):
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    return (1 << 64) - 1


UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(q):
    m = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(q))
    if not m:
        sys.exit(f"pod_to_docker: unsupported memory quantity {q!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def expand(arg, env):
    """The kubelet's $(VAR) expansion of command and args: a defined VAR is replaced, $$ is a
    literal $, anything else is left as written."""
    def one(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, arg)


def main():
    args = sys.argv[1:]
    seccomp_file = None
    if "--seccomp-profile" in args:
        i = args.index("--seccomp-profile")
        seccomp_file = args[i + 1]
        del args[i:i + 2]
    rendered, workdir, name = args
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    ns = ds["metadata"]["namespace"]
    out = []

    out += ["--name", name, "--hostname", name]
    # The host network with loopback ports (this machine's rule), whatever the pod asks.
    out += ["--network", "host"]
    sc = c.get("securityContext", {})
    if sc.get("privileged"):
        sys.exit("pod_to_docker: privileged pods cannot run here (docker run --privileged fails)")
    if "runAsUser" in sc:
        out += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
    if sc.get("readOnlyRootFilesystem"):
        out += ["--read-only"]
    if sc.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    caps = sc.get("capabilities", {})
    for cap in caps.get("drop", []):
        out += ["--cap-drop", cap]
    bounding = host_bounding_set()
    via_runtime, unavailable = [], []
    for cap in caps.get("add", []):
        bit = CAP_BITS.get(cap)
        if bit is not None and not bounding >> bit & 1:
            # Not in this machine's bounding set (why `docker run --privileged` fails here): no
            # container on this host can have it.
            unavailable.append(cap)
        elif cap in DOCKER_UNKNOWN_CAPS:
            via_runtime.append("CAP_" + cap)
        else:
            out += ["--cap-add", cap]
    if via_runtime:
        # Debian's docker 20.10 rejects these names; the edgecache-runc runtime (runc plus
        # oci-runtime.sh) adds them to the container's capability sets.
        out += ["--runtime", "edgecache-runc", "--env",
                "EDGECACHE_OCI_ADD_CAPS=" + ",".join(via_runtime)]
    seccomp = (sc.get("seccompProfile") or pod.get("securityContext", {}).get("seccompProfile")
               or {"type": "RuntimeDefault"})
    if seccomp_file:
        out += ["--security-opt", f"seccomp={seccomp_file}"]
    elif seccomp["type"] == "Unconfined":
        out += ["--security-opt", "seccomp=unconfined"]
    elif seccomp["type"] == "Localhost":
        sys.exit("pod_to_docker: a Localhost profile needs --seccomp-profile FILE")
    # RuntimeDefault: docker's default profile.

    limits = c.get("resources", {}).get("limits", {})
    memory = quantity_bytes(limits["memory"]) if "memory" in limits else None
    if memory:
        out += ["--memory", str(memory), "--memory-swap", str(memory)]
    if "cpu" in limits:
        cpu = str(limits["cpu"])
        out += ["--cpus", str(int(cpu[:-1]) / 1000) if cpu.endswith("m") else cpu]

    # status.podIP: on the host network (this machine's rule) the pod's IP is loopback.
    env_values = {"spec.nodeName": os.uname().nodename, "metadata.name": name,
                  "metadata.namespace": ns, "status.podIP": "127.0.0.1"}
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = env_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
        out += ["--env", f"{e['name']}={env[e['name']]}"]

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    host_path = None
    config_text = None
    admin_token_file = None
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        ro = ",readonly" if m.get("readOnly") else ""
        if "configMap" in v:
            cm = cms[v["configMap"]["name"]]
            d = os.path.join(workdir, "config-" + m["name"])
            os.makedirs(d, exist_ok=True)
            for key, text in cm["data"].items():
                if key == "config.yaml":
                    # Loopback only on this machine: 0.0.0.0 -> 127.0.0.1, same ports.
                    text = re.sub(r"(?m)^(\s*(listen|admin):\s*)0\.0\.0\.0:", r"\g<1>127.0.0.1:", text)
                    config_text = text
                with open(os.path.join(d, key), "w") as f:
                    f.write(text)
            out += ["--mount", f"type=bind,source={d},target={m['mountPath']}{ro}"]
        elif "hostPath" in v:
            host_path = v["hostPath"]["path"]
            if v["hostPath"].get("type") == "DirectoryOrCreate":
                os.makedirs(host_path, exist_ok=True)
            out += ["--mount", f"type=bind,source={host_path},target={m['mountPath']}{ro}"]
        elif "secret" in v:
            # The operator creates this Secret (key `token`, 32 random bytes hex-encoded) before
            # the pods; here the kubelet's projection is a directory with a fresh token.
            d = os.path.join(workdir, "secret-" + m["name"])
            os.makedirs(d, exist_ok=True)
            admin_token_file = os.path.join(d, "token")
            with open(admin_token_file, "w") as f:
                f.write(secrets.token_hex(32))
            os.chmod(admin_token_file, 0o400)
            # ... and the key the pods prove their hops with (`peer-key`).
            peer_key_file = os.path.join(d, "peer-key")
            with open(peer_key_file, "w") as f:
                f.write(secrets.token_hex(32))
            os.chmod(peer_key_file, 0o400)
            out += ["--mount", f"type=bind,source={d},target={m['mountPath']}{ro}"]
        elif "emptyDir" in v:
            out += ["--tmpfs", m["mountPath"]] if v["emptyDir"].get("medium") == "Memory" else [
                "--mount", f"type=bind,source={os.path.join(workdir, 'empty-' + m['name'])},"
                           f"target={m['mountPath']}{ro}"]
            os.makedirs(os.path.join(workdir, "empty-" + m["name"]), exist_ok=True)
        else:
            sys.exit(f"pod_to_docker: unsupported volume {v}")

    command = c.get("command") or []
    if command:
        out += ["--entrypoint", command[0]]
    out += [c["image"]]
    out += command[1:] + [expand(a, env) for a in c.get("args", [])]

    info = {"image": c["image"], "command": command, "args": c.get("args", []),
            "memory_limit": memory, "host_path": host_path, "capabilities": caps,
            "caps_via_runtime": via_runtime, "caps_unavailable": unavailable,
            "seccomp": seccomp, "config": config_text, "admin_token_file": admin_token_file,
            "ports": {p["name"]: p["containerPort"] for p in c.get("ports", [])}}
    with open(os.path.join(workdir, "pod.json"), "w") as f:
        json.dump(info, f, indent=2)
    print("\n".join(out))


if __name__ == "__main__":
    main()
