#!/usr/bin/env bash
# A real Kubernetes (upstream v1.37.2, built here from its Go modules) on this one machine, with
# no VM, no kind and no registry: what `kind create cluster` is for a kind user (issue 35).
#
#   scripts/cluster.sh up [--nodes N] [--adq] [--layout e2e] [--netpol]
#                                  build what is missing, start the cluster, wait for Ready nodes
#                                  labelled as the chart's defaults select (NFD's non-rotational
#                                  disk label and edgecache.dev/nvme; --adq adds edgecache.dev/adq);
#                                  the LAST line of stdout is the kubeconfig's path. Twice is
#                                  harmless. --layout e2e: the three nodes e2e/kind.yaml describes
#                                  (node 1 plain and the control plane, node 2 NVMe+ADQ, node 3
#                                  NVMe with seccompDefault and the deny-io-uring profile).
#                                  --netpol: NetworkPolicies enforced on every node (the agent
#                                  of scripts/cluster/netpol/main.go, kube-network-policies).
#   scripts/cluster.sh load-images [--build]   import edgecache-{dataplane,operator,origin}:dev
#                                  (images/build-local.sh, via Docker) into every node's
#                                  containerd, as docker.io/library/NAME:dev.
#   scripts/cluster.sh exec [--node I] CMD...  run CMD on node I (default 1): in its network and
#                                  mount namespaces (what `docker exec` into a kind node is).
#   scripts/cluster.sh kubectl ARGS...         the kubectl built with the cluster, on its kubeconfig.
#   scripts/cluster.sh down [--purge]          stop everything `up` started (by pid), unmount,
#                                  remove the namespaces, links and cgroups; --purge also drops
#                                  the nodes' image stores (kept otherwise, so `up` is quick).
#   scripts/cluster.sh restart-api [--down-for S]  SIGKILL etcd and kube-apiserver (a control plane
#                                  that crashes), S seconds (default 20) with no API, then start
#                                  them again on the same data and wait for /readyz.
#   scripts/cluster.sh status
#
# Layout (see scripts/cluster/*.{toml,yaml,conflist} for the configuration files):
#   - a bridge ec-br0 in the root namespace carrying 10.213.0.1/24: the node subnet is then local
#     to this machine BEFORE anything talks to a node address (otherwise those packets would
#     leave through the default route). Node I is the network namespace ec-nodeI at 10.213.0.(10+I),
#     joined to the bridge by a veth pair, with no default route and no NAT: nothing in the
#     cluster can reach beyond this machine (a missing image fails at once instead of a pull).
#   - node 1 also runs etcd, kube-apiserver (https://10.213.0.11:6443), kube-controller-manager
#     and kube-scheduler, all in its network namespace (`nsenter --net`, not `ip netns exec`,
#     which remounts /sys and hides the cgroup mounts).
#   - every node: a mount namespace of its own (a holder process from `unshare -m`), where /mnt
#     (the cache's hostPath), /run/containerd, /var/lib/cni and /var/log/containers are the
#     node's own directories; containerd (own root/state/socket), the kubelet (cgroupRoot
#     /edgecache-nodeI, pod CIDR 10.214.I.0/24 on a bridge CNI) and kube-proxy (iptables) run there.
# State: $EDGECACHE_CLUSTER_DIR (default /var/tmp/edgecache-cluster). Binaries: $K8S_DIR (default
# /var/tmp/edgecache-k8s, built once per machine by scripts/cluster/build-k8s.sh).
# Root only. Never remounts or reorganises the machine's cgroup hierarchies: it only makes (and
# removes) one directory per node in each.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

HERE="$ROOT/scripts/cluster"
K8S_DIR=${K8S_DIR:-/var/tmp/edgecache-k8s}
KBIN="$K8S_DIR/bin"
STATE=${EDGECACHE_CLUSTER_DIR:-/var/tmp/edgecache-cluster}
PKI="$STATE/pki"
RUN="$STATE/run"       # pid files: one per process this script started
LOGS="$STATE/logs"
KUBECONFIG_FILE="$STATE/kubeconfig"
BRIDGE=ec-br0
NODE_NET=10.213.0      # the nodes' /24; checked against `ip route` before use
BRIDGE_IP=$NODE_NET.1
CLUSTER_CIDR=10.214.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
PAUSE_IMAGE=localhost/edgecache-pause:v1
TOOLBOX_IMAGE=localhost/edgecache-toolbox:v1
IMAGES=(edgecache-dataplane edgecache-operator edgecache-origin)
IMAGE_TAG=${IMAGE_TAG:-dev}

node_name() { echo "edgecache-node-$1"; }
node_ip() { echo "$NODE_NET.$((10 + $1))"; }
node_ns() { echo "ec-node$1"; }
node_dir() { echo "$STATE/node$1"; }
pod_subnet() { echo "10.214.$1.0/24"; }
cgroup_name() { echo "edgecache-node$1"; }
API_IP=$(node_ip 1)
API_URL="https://$API_IP:6443"
# Cluster DNS: CoreDNS on node 1's address (pods reach it through their bridge's gateway; every
# node's resolv.conf names it, so host-network pods and `cluster.sh exec` resolve Services too).
DNS_IP=$API_IP

die() { echo "cluster.sh: $*" >&2; exit 1; }
kctl() { "$KBIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# --- processes: started detached, tracked by pid file -------------------------------------------
# spawn NAME CMD...: run CMD in its own session (it outlives this script and the caller's
# terminal), output to $LOGS/NAME.log, pid to $RUN/NAME.pid. `setsid` does not fork here (this
# script has no job control, so the child is no group leader) and nsenter/unshare exec, so $! is
# the daemon's own pid.
spawn() {
    local name=$1
    shift
    setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN/$name.pid"
}
pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }
# running PID: the process exists and is no zombie (a daemon this very script started and that
# died stays a zombie child until the script exits).
running() {
    kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
alive() {
    local pid
    pid=$(pid_of "$1")
    [ -n "$pid" ] && running "$pid"
}
# stop NAME: SIGTERM, then SIGKILL after 10 s; forgets the pid file.
stop() {
    local name=$1 pid
    pid=$(pid_of "$name")
    if [ -n "$pid" ] && running "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        local n=0
        while running "$pid" && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        if running "$pid"; then
            log "$name ($pid) ignored SIGTERM for 10 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        elif [ "$n" -ge 20 ]; then
            log "$name ($pid) took $((n / 10)) s to stop"
        fi
    fi
    rm -f "$RUN/$name.pid"
}
# wait_for SECONDS WHAT CMD...: poll CMD every 0.5 s.
wait_for() {
    local secs=$1 what=$2
    shift 2
    for _ in $(seq 1 $((secs * 2))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "timed out after ${secs}s waiting for $what (logs: $LOGS)"
}
# Kill every process whose namespace link NSTYPE equals that of pid REF (except REF itself,
# killed last by the caller): the node's containerd shims, containers of host-network pods, ...
kill_ns_members() {
    local nstype=$1 ref=$2 want p
    want=$(readlink "/proc/$ref/ns/$nstype" 2>/dev/null) || return 0
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = "$ref" ] && continue
        [ "$(readlink "/proc/$p/ns/$nstype" 2>/dev/null)" = "$want" ] && kill -KILL "$p" 2>/dev/null || true
    done
}

# --- build: Kubernetes, the pause image ----------------------------------------------------------
ensure_runtime_packages() {
    apt_install containerd runc containernetworking-plugins iptables conntrack openssl iproute2 \
        util-linux gcc libc6-dev
}

ensure_k8s() {
    "$HERE/build-k8s.sh"
}

# The pod sandbox image: scripts/cluster/pause.c, static, in a one-layer image tar (rebuilt when
# the source changes). Cached beside the Kubernetes binaries.
pause_tar() {
    local src="$HERE/pause.c" out="$K8S_DIR/pause" sum
    sum=$(cat "$src" "$HERE/image-tar.sh" | sha256sum | cut -c1-16)
    if [ "$(cat "$out/sum" 2>/dev/null)" != "$sum" ] || [ ! -f "$out/pause.tar" ]; then
        log "building the pause image ($PAUSE_IMAGE) from scripts/cluster/pause.c"
        rm -rf "$out" && mkdir -p "$out/root"
        gcc -static -O2 -Wall -Werror -o "$out/root/pause" "$src"
        strip "$out/root/pause"
        "$HERE/image-tar.sh" "$out/pause.tar" "$PAUSE_IMAGE" "$out/root" /pause 65535:65535
        echo "$sum" >"$out/sum"
    fi
    echo "$out/pause.tar"
}
# A small image with a shell and network tools for checks (`kubectl run --image
# localhost/edgecache-toolbox:v1`): Debian's static busybox.
toolbox_tar() {
    local out="$K8S_DIR/toolbox" a
    apt_install busybox-static
    if [ ! -f "$out/toolbox.tar" ] || [ /bin/busybox -nt "$out/toolbox.tar" ] || [ "$HERE/image-tar.sh" -nt "$out/toolbox.tar" ]; then
        rm -rf "$out" && mkdir -p "$out/root/bin" "$out/root/tmp" "$out/root/etc"
        cp /bin/busybox "$out/root/bin/busybox"
        # Relative links (busybox --install would link to its path on this machine).
        for a in $(/bin/busybox --list); do
            [ "$a" = busybox ] || ln -sf busybox "$out/root/bin/$a"
        done
        chmod 1777 "$out/root/tmp"
        "$HERE/image-tar.sh" "$out/toolbox.tar" "$TOOLBOX_IMAGE" "$out/root" /bin/sh
    fi
    echo "$out/toolbox.tar"
}

# --- certificates and kubeconfigs ---------------------------------------------------------------
# cert NAME CN [O] [SAN]: a client (or, with SAN, server) certificate signed by the cluster CA.
cert() {
    local name=$1 cn=$2 org=${3:-} san=${4:-} subj ext
    [ -f "$PKI/$name.crt" ] && return 0
    subj="/CN=$cn"
    [ -n "$org" ] && subj="/O=$org$subj"
    ext="$PKI/$name.ext"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$san" ]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=$san"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 365 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$ext"
}
# kubeconfig FILE CERTNAME: a kubeconfig for the API server with that client certificate.
kubeconfig() {
    local file=$1 name=$2
    [ -f "$file" ] && return 0
    local k=("$KBIN/kubectl" --kubeconfig "$file.tmp")
    rm -f "$file.tmp"
    "${k[@]}" config set-cluster edgecache --server "$API_URL" --certificate-authority "$PKI/ca.crt" \
        --embed-certs >/dev/null
    "${k[@]}" config set-credentials "$name" --client-certificate "$PKI/$name.crt" \
        --client-key "$PKI/$name.key" --embed-certs >/dev/null
    "${k[@]}" config set-context edgecache --cluster edgecache --user "$name" >/dev/null
    "${k[@]}" config use-context edgecache >/dev/null
    mv "$file.tmp" "$file"
}
make_pki() {
    local nodes=$1 i
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    if [ ! -f "$PKI/ca.crt" ]; then
        log "making the cluster CA and certificates ($PKI)"
        openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$PKI/ca.key" -subj "/CN=edgecache-cluster-ca" -days 3650 \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
            -out "$PKI/ca.crt" 2>/dev/null
        # Service-account tokens are signed with this key pair.
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    fi
    # The API server's certificate names the node address (what kubectl dials) and the first
    # service IP (what pods dial through the `kubernetes` Service).
    cert apiserver kube-apiserver "" \
        "IP:$API_IP,IP:$SERVICE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
    cert admin edgecache-admin system:masters
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    cert controller-manager system:kube-controller-manager
    cert scheduler system:kube-scheduler
    cert kube-proxy system:kube-proxy
    cert coredns edgecache:coredns
    cert netpol edgecache:netpol
    kubeconfig "$KUBECONFIG_FILE" admin
    kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
    kubeconfig "$STATE/scheduler.kubeconfig" scheduler
    kubeconfig "$STATE/coredns.kubeconfig" coredns
    kubeconfig "$STATE/netpol.kubeconfig" netpol
    for i in $(seq 1 "$nodes"); do
        # The Node authorizer and NodeRestriction know a kubelet by this name and group.
        cert "kubelet-$i" "system:node:$(node_name "$i")" system:nodes
        kubeconfig "$(node_dir "$i")/kubelet.kubeconfig" "kubelet-$i"
        kubeconfig "$(node_dir "$i")/kube-proxy.kubeconfig" kube-proxy
    done
}

# render TEMPLATE OUT NODE: fill @VARS@ of a scripts/cluster template for node NODE.
render() {
    local tpl=$1 out=$2 i=$3
    sed -e "s#@NODE_DIR@#$(node_dir "$i")#g" -e "s#@NODE_IP@#$(node_ip "$i")#g" \
        -e "s#@NODE_NAME@#$(node_name "$i")#g" -e "s#@POD_SUBNET@#$(pod_subnet "$i")#g" \
        -e "s#@CLUSTER_CIDR@#$CLUSTER_CIDR#g" -e "s#@PKI@#$PKI#g" \
        -e "s#@CGROUP_NAME@#$(cgroup_name "$i")#g" -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" \
        -e "s#@DNS_IP@#$DNS_IP#g" -e "s#@STATE@#$STATE#g" \
        -e "s#@SECCOMP_DEFAULT@#$(seccomp_default "$i")#g" \
        "$tpl" >"$out"
}

# --- network ------------------------------------------------------------------------------------
net_up() {
    local nodes=$1 i j ns
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        # A clash with a route of the machine would send node traffic somewhere else.
        if ip route show | grep -q "^$NODE_NET\."; then
            die "$NODE_NET.0/24 is already routed on this machine: $(ip route show | grep "^$NODE_NET\.")"
        fi
        ip link add "$BRIDGE" type bridge
    fi
    # The subnet's address on the root side FIRST: from here on the node subnet is local.
    ip addr replace "$BRIDGE_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    if [ "$nodes" -gt 1 ] && ! iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; then
        # Node-to-node frames cross the bridge; with br_netfilter loaded (Docker loads it) they
        # traverse the machine's FORWARD chain, whose policy Docker sets to DROP. Accept exactly
        # bridge-to-bridge (both ends are our nodes); `down` removes the rule.
        iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
    fi
    for i in $(seq 1 "$nodes"); do
        ns=$(node_ns "$i")
        [ -e "/var/run/netns/$ns" ] || ip netns add "$ns"
        if ! ip link show "$ns-h" >/dev/null 2>&1; then
            ip link add "$ns-h" type veth peer name eth0 netns "$ns"
            ip link set "$ns-h" master "$BRIDGE" up
        fi
        ip -n "$ns" link set lo up
        ip -n "$ns" addr replace "$(node_ip "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        # Service IPs: a route into a sink, so that host-network processes can connect() to a
        # ClusterIP (the route lookup comes before kube-proxy's DNAT) while anything not DNATed
        # is dropped inside the node. The sink is a veth whose peer stays down (this kernel has
        # no dummy links): what is sent on it is dropped.
        if ! ip -n "$ns" link show ec-svc >/dev/null 2>&1; then
            ip -n "$ns" link add ec-svc type veth peer name ec-svc-sink
            ip -n "$ns" link set ec-svc up
            ip -n "$ns" route add "$SERVICE_CIDR" dev ec-svc
        fi
        # Pods reach Services on other pods through the node: forwarding inside the node only
        # (the node has no default route, so nothing is forwarded beyond the node subnet).
        nsenter --net="/var/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1
        for j in $(seq 1 "$nodes"); do
            [ "$j" = "$i" ] && continue
            ip -n "$ns" route replace "$(pod_subnet "$j")" via "$(node_ip "$j")"
        done
    done
}

# --- cgroups: one directory per node in each v1 hierarchy ---------------------------------------
cgroup_dirs() { # the node's cgroup directory in every hierarchy that exists
    local d
    for d in /sys/fs/cgroup/*/; do
        [ -f "$d/cgroup.procs" ] && echo "${d%/}/$(cgroup_name "$1")"
    done
}
cgroups_up() {
    local d
    for d in $(cgroup_dirs "$1"); do
        mkdir -p "$d"
        if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
            # A new v1 cpuset is empty (no process can join it) until given cpus and mems.
            cat /sys/fs/cgroup/cpuset/cpuset.cpus >"$d/cpuset.cpus"
            cat /sys/fs/cgroup/cpuset/cpuset.mems >"$d/cpuset.mems"
        fi
    done
}
cgroups_down() {
    local d p
    # Every process still in the node's cgroups (the pods' containers): SIGKILL, by pid.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        local left=0
        for d in $(cgroup_dirs "$1"); do
            [ -d "$d" ] || continue
            for p in $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null); do
                kill -KILL "$p" 2>/dev/null || true
                left=1
            done
        done
        [ "$left" = 0 ] && break
        sleep 0.3
    done
    for d in $(cgroup_dirs "$1"); do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ -d "$d" ] && log "could not remove cgroup $d"
    done
    return 0
}

# --- the node's mount namespace -----------------------------------------------------------------
# Directories of the machine that a node's components write to without a setting to move them;
# inside the node's mount namespace each is a bind mount of the node's own directory. The mount
# points must exist on the machine: those made here are listed in $STATE/made-dirs and removed by
# `down` when empty.
NODE_BINDS=(/mnt /run/containerd /var/lib/cni /var/log/containers)
holder_up() {
    local i=$1 dir ns t binds=""
    dir=$(node_dir "$i")
    ns=$(node_ns "$i")
    for t in "${NODE_BINDS[@]}"; do
        mkdir -p "$dir/fs$t"
        if [ ! -d "$t" ]; then
            mkdir -p "$t"
            echo "$t" >>"$STATE/made-dirs"
        fi
        binds+="mount --bind '$dir/fs$t' '$t' && "
    done
    # The node's resolver is the cluster DNS (what the kubelet also gives host-network pods).
    printf 'search cluster.local\nnameserver %s\noptions ndots:5\n' "$DNS_IP" >"$dir/resolv.conf"
    binds+="mount --bind '$dir/resolv.conf' /etc/resolv.conf && "
    rm -f "$dir/holder.ready"
    # A private mount namespace (nothing mounted in it reaches the machine's) inside the node's
    # network namespace, held by a sleeping shell; the node's daemons join it with nsenter -t.
    spawn "node$i-holder" nsenter --net="/var/run/netns/$ns" unshare -m --propagation private -- \
        /bin/sh -c "${binds}touch '$dir/holder.ready' && exec sleep infinity"
    wait_for 10 "node $i's mount namespace" test -f "$dir/holder.ready"
}
# in_node I CMD...: CMD in node I's network and mount namespaces, working directory its dir
# (nsenter -m starts in / without --wd). nsenter execs CMD: spawn gets the daemon's own pid.
in_node() {
    local i=$1
    shift
    nsenter -t "$(pid_of "node$i-holder")" -m -n --wd="$(node_dir "$i")" -- "$@"
}
# The same as a command line for spawn (which cannot run a shell function).
node_cmd() { echo nsenter -t "$(pid_of "node$1-holder")" -m -n --wd="$(node_dir "$1")" --; }

# --- control plane (in node 1's network namespace) ----------------------------------------------
control_plane_up() {
    local net="--net=/var/run/netns/$(node_ns 1)"
    mkdir -p "$STATE/etcd"
    chmod 700 "$STATE/etcd"
    if ! alive etcd; then
        log "starting etcd"
        # --unsafe-no-fsync: a throwaway test cluster on a shared disk; fsync stalls would only
        # make leader elections flap.
        spawn etcd nsenter "$net" "$KBIN/etcd" --name default --data-dir "$STATE/etcd" \
            --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
            --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
            --initial-cluster default=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
    fi
    if ! alive kube-apiserver; then
        log "starting kube-apiserver ($API_URL)"
        spawn kube-apiserver nsenter "$net" "$KBIN/kube-apiserver" \
            --etcd-servers http://127.0.0.1:2379 \
            --advertise-address "$API_IP" --bind-address 0.0.0.0 --secure-port 6443 \
            --service-cluster-ip-range "$SERVICE_CIDR" \
            --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
            --client-ca-file "$PKI/ca.crt" \
            --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
            --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
            --kubelet-preferred-address-types InternalIP \
            --service-account-issuer https://kubernetes.default.svc.cluster.local \
            --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
            --authorization-mode Node,RBAC \
            --enable-admission-plugins NamespaceLifecycle,ServiceAccount,OwnerReferencesPermissionEnforcement,PodSecurity,ResourceQuota,NodeRestriction \
            --allow-privileged=true --profiling=false --v=1
    fi
    wait_for 120 "kube-apiserver /readyz" kctl get --raw /readyz
    if ! alive kube-controller-manager; then
        log "starting kube-controller-manager and kube-scheduler"
        # No node IPAM: each node's pod CIDR is in its CNI configuration.
        spawn kube-controller-manager nsenter "$net" "$KBIN/kube-controller-manager" \
            --kubeconfig "$STATE/controller-manager.kubeconfig" \
            --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
            --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
            --controllers '*,-nodeipam' --use-service-account-credentials \
            --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
            --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
            --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$CLUSTER_CIDR" \
            --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
    fi
    if ! alive coredns; then
        log "starting coredns (cluster DNS on $DNS_IP)"
        kctl apply -f "$HERE/coredns-rbac.yaml" >/dev/null
        render "$HERE/Corefile" "$STATE/Corefile" 1
        spawn coredns nsenter "$net" "$KBIN/coredns" -conf "$STATE/Corefile"
    fi
    if ! alive kube-scheduler; then
        spawn kube-scheduler nsenter "$net" "$KBIN/kube-scheduler" \
            --kubeconfig "$STATE/scheduler.kubeconfig" \
            --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
            --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
            --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
    fi
}

# --- a node -------------------------------------------------------------------------------------
node_up() {
    local i=$1 dir sock
    dir=$(node_dir "$i")
    sock="$dir/containerd/containerd.sock"
    mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/kubelet" "$dir/pod-logs"
    render "$HERE/containerd.toml" "$dir/containerd.toml" "$i"
    render "$HERE/kubelet.yaml" "$dir/kubelet.yaml" "$i"
    render "$HERE/kube-proxy.yaml" "$dir/kube-proxy.yaml" "$i"
    render "$HERE/cni.conflist" "$dir/cni/net.d/10-edgecache.conflist" "$i"
    render "$HERE/runc-wrapper.sh" "$dir/runc-wrapper" "$i"
    if [ "$(seccomp_default "$i")" = true ]; then
        mkdir -p "$dir/kubelet/seccomp/edgecache"
        cp "$ROOT/e2e/fixtures/seccomp/deny-io-uring.json" "$dir/kubelet/seccomp/edgecache/"
    fi
    chmod +x "$dir/runc-wrapper"
    cgroups_up "$i"
    alive "node$i-holder" || holder_up "$i"
    if ! alive "node$i-containerd"; then
        log "starting node $i: containerd"
        spawn "node$i-containerd" $(node_cmd "$i") containerd --config "$dir/containerd.toml"
    fi
    wait_for 30 "node $i's containerd" ctr --address "$sock" version
    # The node's own images (no registry): the pause image and a busybox toolbox.
    local have
    have=$(ctr --address "$sock" -n k8s.io images ls -q)
    echo "$have" | grep -qx "$PAUSE_IMAGE" \
        || ctr --address "$sock" -n k8s.io images import "$(pause_tar)" >/dev/null
    echo "$have" | grep -qx "$TOOLBOX_IMAGE" \
        || ctr --address "$sock" -n k8s.io images import "$(toolbox_tar)" >/dev/null
    if ! alive "node$i-kubelet"; then
        log "starting node $i: kubelet ($(node_name "$i"), $(node_ip "$i"))"
        spawn "node$i-kubelet" $(node_cmd "$i") "$KBIN/kubelet" --config "$dir/kubelet.yaml" \
            --kubeconfig "$dir/kubelet.kubeconfig" --root-dir "$dir/kubelet" \
            --node-ip "$(node_ip "$i")" --hostname-override "$(node_name "$i")" --v=1
    fi
    if ! alive "node$i-kube-proxy"; then
        spawn "node$i-kube-proxy" $(node_cmd "$i") "$KBIN/kube-proxy" --config "$dir/kube-proxy.yaml" --v=1
    fi
}
node_ready() {
    [ "$(kctl get node "$(node_name "$1")" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
# The labels the chart's defaults select (operator/controller/src/build/placement.rs): Node
# Feature Discovery's non-rotational-disk label, or edgecache.dev/nvme; ADQ for `queue` steering.
# Set with the admin's credentials: NodeRestriction forbids a kubelet to set them on itself.
label_node() {
    local i=$1 adq=$2 labels nvme=(feature.node.kubernetes.io/storage-nonrotationaldisk=true edgecache.dev/nvme=true)
    case "$(layout)/$i" in
        e2e/1) labels=(edgecache.dev/e2e-role=plain) ;;
        e2e/2) labels=(edgecache.dev/e2e-role=nvme-adq "${nvme[@]}" edgecache.dev/adq=true) ;;
        e2e/3) labels=(edgecache.dev/e2e-role=nvme-seccomp-default "${nvme[@]}") ;;
        *) labels=("${nvme[@]}")
           [ "$adq" = 1 ] && labels+=(edgecache.dev/adq=true) ;;
    esac
    kctl label node "$(node_name "$i")" "${labels[@]}" --overwrite >/dev/null
}
layout() { cat "$STATE/layout" 2>/dev/null || echo default; }
# The e2e layout's node 3 runs every container that names no profile under RuntimeDefault (what
# containerd 2.0 denies io_uring in) and has the Localhost profile edgecache/deny-io-uring.json.
seccomp_default() { [ "$(layout)/$1" = e2e/3 ] && echo true || echo false; }

nodes_up_now() { # how many nodes the last `up` started
    cat "$STATE/nodes" 2>/dev/null || echo 0
}
netpol_on() { [ "$(cat "$STATE/netpol" 2>/dev/null)" = 1 ]; }
node_daemons() { # the processes of a node
    echo holder containerd kubelet kube-proxy
    netpol_on && echo netpol
    return 0
}
all_alive() {
    local n=$1 i p
    for p in etcd kube-apiserver kube-controller-manager kube-scheduler coredns; do alive "$p" || return 1; done
    for i in $(seq 1 "$n"); do
        for p in $(node_daemons); do alive "node$i-$p" || return 1; done
    done
}

# --- NetworkPolicy (--netpol) ---------------------------------------------------------------------
# The agent's queue. Its own nftables rules need CONFIG_NFT_QUEUE, which this kernel lacks
# (scripts/cluster/netpol/main.go); these iptables rules (nft_compat's NFQUEUE target) send it
# what its rules would: every new connection to or from a pod, as it leaves the node's routing
# (before SNAT), except DNS and what the node's root processes send (the kubelet's probes, the API
# server's pod proxy on node 1), both of which its rules exempt too. --queue-bypass: while no
# agent listens, packets pass.
NETPOL_QUEUE=100
netpol_rules() {
    local i=$1
    local ipt=(in_node "$i" iptables -w -t mangle)
    "${ipt[@]}" -N EC-NETPOL 2>/dev/null || "${ipt[@]}" -F EC-NETPOL
    "${ipt[@]}" -A EC-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    "${ipt[@]}" -A EC-NETPOL -m owner --uid-owner 0 -j RETURN
    "${ipt[@]}" -A EC-NETPOL -p udp --dport 53 -j RETURN
    "${ipt[@]}" -A EC-NETPOL -s "$CLUSTER_CIDR" -j NFQUEUE --queue-num "$NETPOL_QUEUE" --queue-bypass
    "${ipt[@]}" -A EC-NETPOL -d "$CLUSTER_CIDR" -j NFQUEUE --queue-num "$NETPOL_QUEUE" --queue-bypass
    "${ipt[@]}" -C POSTROUTING -j EC-NETPOL 2>/dev/null || "${ipt[@]}" -A POSTROUTING -j EC-NETPOL
}
netpol_up() {
    local nodes=$1 i
    "$HERE/build-netpol.sh"
    kctl apply -f "$HERE/netpol-rbac.yaml" >/dev/null
    for i in $(seq 1 "$nodes"); do
        netpol_rules "$i"
        if ! alive "node$i-netpol"; then
            log "starting node $i: the NetworkPolicy agent"
            spawn "node$i-netpol" $(node_cmd "$i") "$KBIN/edgecache-netpol" \
                --kubeconfig "$STATE/netpol.kubeconfig" --node-name "$(node_name "$i")" \
                --nfqueue-id "$NETPOL_QUEUE" --v=1
        fi
    done
}

cmd_up() {
    local nodes=1 adq=0 i start lay=default netpol=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) nodes=$2; shift ;;
            --adq) adq=1 ;;
            --layout) lay=$2; shift ;;
            --netpol) netpol=1 ;;
            *) die "usage: cluster.sh up [--nodes N] [--adq] [--layout e2e] [--netpol]" ;;
        esac
        shift
    done
    case "$lay" in
        default) ;;
        e2e) nodes=3 ;;
        *) die "--layout: default or e2e" ;;
    esac
    [[ "$nodes" =~ ^[1-9]$ ]] || die "--nodes: 1 to 9"
    [ "$(id -u)" = 0 ] || die "needs root (namespaces, cgroups, containerd)"
    local running
    running=$(nodes_up_now)
    if [ "$running" != 0 ]; then
        if [ "$running" = "$nodes" ] && [ "$(layout)" = "$lay" ] && all_alive "$nodes" \
            && [ "$(cat "$STATE/netpol" 2>/dev/null || echo 0)" = "$netpol" ]; then
            log "the cluster is already up ($nodes node(s))"
            for i in $(seq 1 "$nodes"); do label_node "$i" "$adq"; done
            echo "$KUBECONFIG_FILE"
            return 0
        fi
        log "a cluster of $running node(s) is (partly) up: taking it down first"
        cmd_down
    fi
    ensure_runtime_packages
    ensure_k8s
    mkdir -p "$RUN" "$LOGS"
    start=$(date +%s)
    echo "$nodes" >"$STATE/nodes"
    echo "$lay" >"$STATE/layout"
    echo "$netpol" >"$STATE/netpol"
    make_pki "$nodes"
    net_up "$nodes"
    control_plane_up
    for i in $(seq 1 "$nodes"); do node_up "$i"; done
    log "waiting for $nodes node(s) Ready"
    for i in $(seq 1 "$nodes"); do
        wait_for 180 "node $(node_name "$i") Ready" node_ready "$i"
        label_node "$i" "$adq"
    done
    netpol_on && netpol_up "$nodes"
    log "cluster up in $(( $(date +%s) - start )) s: KUBECONFIG=$KUBECONFIG_FILE"
    echo "$KUBECONFIG_FILE"
}

cmd_down() {
    local purge=0 n i dir hp
    [ "${1:-}" = --purge ] && purge=1
    n=$(nodes_up_now)
    # Also nodes whose pid files exist beyond the recorded count (an interrupted `up`).
    for f in "$RUN"/node*-holder.pid; do
        [ -e "$f" ] || continue
        i=${f#"$RUN"/node}; i=${i%-holder.pid}
        [ "$i" -gt "$n" ] && n=$i
    done
    for i in $(seq "$n" -1 1); do
        dir=$(node_dir "$i")
        log "stopping node $i"
        stop "node$i-netpol"
        stop "node$i-kube-proxy"
        stop "node$i-kubelet"
        # Every container of the node (pods' processes are in its cgroups), then containerd.
        cgroups_down "$i"
        stop "node$i-containerd"
        hp=$(pid_of "node$i-holder")
        if [ -n "$hp" ] && running "$hp"; then
            # What is left in the node's mount namespace (containerd's shims): by pid.
            kill_ns_members mnt "$hp"
            # The kubelet's mounts (secrets, projected tokens) live in the node's private mount
            # namespace: unmount them there, then the namespace goes with its last process.
            nsenter -t "$hp" -m -- sh -c \
                "grep -o ' $dir/[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l" \
                2>/dev/null || true
        fi
        stop "node$i-holder"
        if [ -e "/var/run/netns/$(node_ns "$i")" ]; then
            # Anything still in the node's network namespace (host-network containers) goes too.
            for p in $(ip netns pids "$(node_ns "$i")" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        fi
        cgroups_down "$i"
    done
    stop coredns
    stop kube-scheduler
    stop kube-controller-manager
    stop kube-apiserver
    stop etcd
    # Mounts of ours in the machine's own mount namespace (none expected: belt and braces).
    grep -o " $STATE/[^ ]*" /proc/self/mounts 2>/dev/null | sort -r | xargs -r -n1 umount -l || true
    for i in $(seq "$n" -1 1); do
        ip netns del "$(node_ns "$i")" 2>/dev/null || true
        ip link del "$(node_ns "$i")-h" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; do :; done
    if [ -f "$STATE/made-dirs" ]; then
        sort -ru "$STATE/made-dirs" | xargs -r rmdir 2>/dev/null || true
        rm -f "$STATE/made-dirs"
    fi
    # The cluster's state goes; each node's image store (containerd root) stays unless --purge,
    # so the next `up` does not import the images again.
    rm -rf "$STATE/etcd" "$STATE/pki" "$STATE"/*.kubeconfig "$KUBECONFIG_FILE" "$RUN" "$STATE/nodes" \
        "$STATE/layout" "$STATE/netpol"
    for dir in "$STATE"/node*; do
        [ -d "$dir" ] || continue
        if [ "$purge" = 1 ]; then rm -rf "$dir"; else
            find "$dir" -mindepth 1 -maxdepth 1 ! -name containerd -exec rm -rf {} +
            find "$dir/containerd" -mindepth 1 -maxdepth 1 ! -name root -exec rm -rf {} + 2>/dev/null || true
        fi
    done
    [ "$purge" = 1 ] && rm -rf "$STATE"
    log "cluster down"
}

# --- images -------------------------------------------------------------------------------------
# A Docker engine, started as e2e/container-tier.sh does (Debian's docker.io; its CLI matches it).
DOCKER=/usr/bin/docker
ensure_docker() {
    command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    if ! "$DOCKER" info >/dev/null 2>&1; then
        log "starting dockerd (log: /var/log/dockerd.log)"
        (setsid dockerd >/var/log/dockerd.log 2>&1 &)
        for _ in $(seq 1 60); do
            "$DOCKER" info >/dev/null 2>&1 && break
            sleep 0.5
        done
        "$DOCKER" info >/dev/null 2>&1 || die "dockerd did not start (see /var/log/dockerd.log)"
    fi
}
cmd_load_images() {
    local build=0 n i refs=() img
    [ "${1:-}" = --build ] && build=1
    n=$(nodes_up_now)
    [ "$n" != 0 ] || die "no cluster is up (scripts/cluster.sh up)"
    ensure_docker
    for img in "${IMAGES[@]}"; do
        "$DOCKER" image inspect "$img:$IMAGE_TAG" >/dev/null 2>&1 || build=1
        refs+=("$img:$IMAGE_TAG")
    done
    if [ "$build" = 1 ]; then
        log "images/build-local.sh --tag $IMAGE_TAG"
        "$ROOT/images/build-local.sh" --tag "$IMAGE_TAG"
    fi
    for i in $(seq 1 "$n"); do
        log "importing ${refs[*]} into node $i (as docker.io/library/NAME:$IMAGE_TAG)"
        "$DOCKER" save "${refs[@]}" \
            | ctr --address "$(node_dir "$i")/containerd/containerd.sock" -n k8s.io images import - >/dev/null
    done
}

cmd_exec() {
    local i=1
    if [ "${1:-}" = --node ]; then i=$2; shift 2; fi
    [ $# -gt 0 ] || die "usage: cluster.sh exec [--node I] CMD..."
    alive "node$i-holder" || die "node $i is not up"
    in_node "$i" "$@"
}

cmd_restart_api() {
    local down=20
    if [ "${1:-}" = --down-for ]; then down=$2; shift 2; fi
    [ "$(nodes_up_now)" != 0 ] || die "the cluster is not up"
    local p pid
    for p in kube-apiserver etcd; do
        pid=$(pid_of "$p")
        [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
        rm -f "$RUN/$p.pid"
    done
    log "etcd and kube-apiserver killed (SIGKILL); starting them again in ${down} s"
    sleep "$down"
    control_plane_up
    log "kube-apiserver ready again"
}

cmd_status() {
    local n i p
    n=$(nodes_up_now)
    [ "$n" != 0 ] || { echo "down"; return 0; }
    for p in etcd kube-apiserver kube-controller-manager kube-scheduler coredns; do
        printf '%-28s %s\n' "$p" "$(alive "$p" && echo "running ($(pid_of "$p"))" || echo STOPPED)"
    done
    for i in $(seq 1 "$n"); do
        for p in $(node_daemons); do
            printf '%-28s %s\n' "node$i-$p" "$(alive "node$i-$p" && echo "running ($(pid_of "node$i-$p"))" || echo STOPPED)"
        done
    done
    kctl get nodes -o wide 2>&1 || true
    echo "KUBECONFIG=$KUBECONFIG_FILE"
}

main() {
    case "${1:-}" in
        up) shift; cmd_up "$@" ;;
        down) shift; cmd_down "$@" ;;
        exec) shift; cmd_exec "$@" ;;
        load-images) shift; cmd_load_images "$@" ;;
        kubectl) shift; kctl "$@" ;;
        status) cmd_status ;;
        restart-api) shift; cmd_restart_api "$@" ;;
        build) ensure_runtime_packages; ensure_k8s; pause_tar >/dev/null; toolbox_tar >/dev/null ;;
        *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
}
# One line: bash has read the whole script before running it, so editing it meanwhile (a
# long `load-images`) cannot change what runs.
main "$@"; exit $?
