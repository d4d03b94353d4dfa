//! `build` from YAML fixtures, field by field.

use edgecache_api::dataplane;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::test_support::{TWO_SITES, minimal_edgecache, sites_edgecache};
use crate::validate::{Policy, validate};

fn desired(spec_yaml: &str) -> Desired<Prepared> {
    build(&validate(&minimal_edgecache(spec_yaml), &Policy::default()).unwrap())
}

fn pod(d: &Desired<Prepared>) -> &PodSpec {
    d.daemon_set.spec.template.spec.as_ref().unwrap()
}

fn container(d: &Desired<Prepared>) -> &Container {
    &pod(d).containers[0]
}

fn config(d: &Desired<Prepared>) -> edgecache_api::DataplaneConfig {
    let data = d.config_map.data.as_ref().unwrap();
    crate::validate::parse_as_pod(&data[CONFIG_KEY], "node-a").unwrap()
}

fn terms(d: &Desired<Prepared>) -> Vec<Vec<(String, String, Vec<String>)>> {
    pod(d)
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| {
            s.node_selector_terms
                .iter()
                .map(|t| {
                    t.match_expressions
                        .iter()
                        .flatten()
                        .map(|e| {
                            (
                                e.key.clone(),
                                e.operator.clone(),
                                e.values.clone().unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_true(key: &str) -> (String, String, Vec<String>) {
    (key.into(), "In".into(), vec!["true".into()])
}

#[test]
fn names_labels_and_owner_references() {
    let d = desired("");
    assert_eq!(d.daemon_set.metadata.name.as_deref(), Some("web"));
    assert_eq!(d.config_map.metadata.name.as_deref(), Some("web-config"));
    assert_eq!(d.service.metadata.name.as_deref(), Some("web"));
    assert_eq!(d.service_account.metadata.name.as_deref(), Some("web"));
    for meta in [
        &d.daemon_set.metadata,
        &d.config_map.metadata,
        &d.service.metadata,
        &d.service_account.metadata,
    ] {
        assert_eq!(meta.namespace.as_deref(), Some("edge"));
        let owners = meta.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "EdgeCache");
        assert_eq!(owners[0].api_version, "edgecache.dev/v1alpha1");
        assert_eq!(owners[0].uid, "5c1e0b8e-0000-4000-8000-000000000001");
        assert_eq!(owners[0].controller, Some(true));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], MANAGER);
        assert_eq!(labels["app.kubernetes.io/instance"], "web");
    }
    let selector = d.daemon_set.spec.selector.match_labels.as_ref().unwrap();
    let template_labels = d
        .daemon_set
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    for (k, v) in selector {
        assert_eq!(
            &template_labels[k], v,
            "the selector must match the template"
        );
    }
    assert_eq!(
        d.service.spec.as_ref().unwrap().selector.as_ref(),
        Some(selector)
    );
}

#[test]
fn privileged_mode_is_the_default() {
    let d = desired("");
    let sc = container(&d).security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(sc.capabilities, None);
    assert_eq!(sc.seccomp_profile, None);
    assert_eq!(sc.read_only_root_filesystem, Some(true));
}

/// Defect 5 of issue 35: capabilities mode dropped ALL and never added NET_BIND_SERVICE, so
/// `network.port: 80` or `tls.port: 443` failed with EACCES. It is added when a port the pod
/// listens on is below 1024, and only then.
#[test]
fn capabilities_mode_may_bind_a_port_below_1024_only_when_one_is_configured() {
    let add = |yaml: &str| {
        container(&desired(&format!(
            "security:\n  mode: capabilities\n{yaml}"
        )))
        .security_context
        .clone()
        .unwrap()
        .capabilities
        .unwrap()
        .add
        .unwrap()
    };
    let binds = |yaml: &str| add(yaml).contains(&"NET_BIND_SERVICE".to_string());
    assert!(!binds(""), "the default ports are 8080, 9090 (and 8443)");
    assert!(binds("network:\n  port: 80\n"));
    assert!(binds("network:\n  adminPort: 909\n"));
    assert!(binds(
        "tls:\n  port: 443\n  certificates:\n  - secretName: web-tls\n"
    ));
    assert!(!binds(
        "tls:\n  port: 8443\n  certificates:\n  - secretName: web-tls\n"
    ));
    assert!(binds("network:\n  port: 1023\n"));
    assert!(!binds("network:\n  port: 1024\n"));
}

#[test]
fn capabilities_mode_adds_only_what_is_needed_and_drops_all() {
    let d = desired("security:\n  mode: capabilities\nsteering:\n  mode: hash\n");
    let sc = container(&d).security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(
        caps.add.as_deref().unwrap(),
        ["BPF", "NET_ADMIN", "IPC_LOCK", "SYS_RESOURCE"]
    );
    assert_eq!(caps.drop.as_deref().unwrap(), ["ALL"]);
    let seccomp = sc.seccomp_profile.as_ref().unwrap();
    assert_eq!(seccomp.type_, "Unconfined");
    assert_eq!(seccomp.localhost_profile, None);

    // No BPF steering, no CAP_BPF.
    let d = desired("security:\n  mode: capabilities\nsteering:\n  mode: incoming-cpu\n");
    let caps = container(&d)
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .clone()
        .unwrap();
    assert!(!caps.add.unwrap().contains(&"BPF".to_string()));

    // A Localhost profile by name.
    let d = desired(
        "security:\n  mode: capabilities\n  seccompLocalhostProfile: edgecache/io-uring.json\n",
    );
    let seccomp = container(&d)
        .security_context
        .clone()
        .unwrap()
        .seccomp_profile
        .unwrap();
    assert_eq!(seccomp.type_, "Localhost");
    assert_eq!(
        seccomp.localhost_profile.as_deref(),
        Some("edgecache/io-uring.json")
    );
}

#[test]
fn placement_defaults_target_nvme_nodes() {
    let d = desired("");
    assert_eq!(
        terms(&d),
        [
            vec![is_true(
                "feature.node.kubernetes.io/storage-nonrotationaldisk"
            )],
            vec![is_true("edgecache.dev/nvme")],
        ]
    );
    let sel = pod(&d).node_selector.as_ref().unwrap();
    assert_eq!(sel.len(), 1);
    assert_eq!(sel["kubernetes.io/os"], "linux");
    assert_eq!(pod(&d).tolerations, None);
}

#[test]
fn queue_steering_also_requires_adq_nodes() {
    let d = desired("steering:\n  mode: queue\nnetwork:\n  hostNetwork: true\n");
    assert_eq!(
        terms(&d),
        [
            vec![
                is_true("feature.node.kubernetes.io/storage-nonrotationaldisk"),
                is_true("edgecache.dev/adq")
            ],
            vec![is_true("edgecache.dev/nvme"), is_true("edgecache.dev/adq")],
        ]
    );
}

#[test]
fn user_placement_merges_with_the_defaults() {
    let d = desired(
        "placement:
  nodeSelector:
    topology.kubernetes.io/zone: eu-1a
  tolerations:
  - key: edgecache.dev/dedicated
    operator: Exists
    effect: NoSchedule
  priorityClassName: system-node-critical
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: node-role.kubernetes.io/edge
            operator: Exists
        - matchExpressions:
          - key: pool
            operator: In
            values: [cache]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference:
          matchExpressions:
          - key: nic
            operator: In
            values: [e810]
",
    );
    let p = pod(&d);
    let sel = p.node_selector.as_ref().unwrap();
    assert_eq!(sel["kubernetes.io/os"], "linux");
    assert_eq!(sel["topology.kubernetes.io/zone"], "eu-1a");
    assert_eq!(
        p.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("edgecache.dev/dedicated")
    );
    assert_eq!(
        p.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    // (edge OR pool=cache) AND (nonrotational OR nvme): four terms.
    let edge = (
        "node-role.kubernetes.io/edge".to_string(),
        "Exists".to_string(),
        vec![],
    );
    let pool = (
        "pool".to_string(),
        "In".to_string(),
        vec!["cache".to_string()],
    );
    let nfd = is_true("feature.node.kubernetes.io/storage-nonrotationaldisk");
    let nvme = is_true("edgecache.dev/nvme");
    assert_eq!(
        terms(&d),
        [
            vec![edge.clone(), nfd.clone()],
            vec![edge, nvme.clone()],
            vec![pool.clone(), nfd],
            vec![pool, nvme],
        ]
    );
    let preferred = p
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(preferred[0].weight, 10);
}

#[test]
fn nvme_default_can_be_turned_off() {
    let d = desired("placement:\n  nvmeNodesOnly: false\n");
    assert!(terms(&d).is_empty());
    assert_eq!(pod(&d).affinity, None);
}

#[test]
fn memory_limit_reaches_the_pod_and_the_dataplane_config() {
    let d = desired("resources:\n  memory: 8GiB\n  cpu: \"4\"\n");
    let res = container(&d).resources.as_ref().unwrap();
    let limits = res.limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "8Gi");
    assert_eq!(limits["cpu"].0, "4");
    assert_eq!(res.requests.as_ref(), Some(limits), "Guaranteed QoS");
    assert_eq!(config(&d).memory.limit, Some(ByteSize::gib(8)));

    // Decimal sizes stay exact.
    let d = desired("resources:\n  memory: 3G\n");
    let limits = container(&d).resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["memory"].0, "3000000000");
    assert!(!limits.contains_key("cpu"));
    assert_eq!(config(&d).memory.limit, Some(ByteSize(3_000_000_000)));
}

#[test]
fn config_hash_is_the_sha256_of_the_config_and_rolls_the_pods() {
    let d = desired("");
    let yaml = &d.config_map.data.as_ref().unwrap()[CONFIG_KEY];
    let want = config_map::sha256_hex(yaml.as_bytes());
    assert_eq!(d.config_hash, want);
    assert_eq!(want.len(), 64);
    let annotations = |d: &Desired<Prepared>| {
        d.daemon_set
            .spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap()
    };
    assert_eq!(annotations(&d)[CONFIG_HASH_ANNOTATION], want);
    assert_eq!(
        d.config_map.metadata.annotations.as_ref().unwrap()[CONFIG_HASH_ANNOTATION],
        want
    );
    // A config change changes the hash; a change outside the config does not.
    let resized = desired("storage:\n  size: 20GiB\n");
    assert_ne!(resized.config_hash, d.config_hash);
    assert_ne!(annotations(&resized)[CONFIG_HASH_ANNOTATION], want);
    let new_image = desired("image: registry.local/edgecache-dataplane:0.2.0\n");
    assert_eq!(new_image.config_hash, d.config_hash);
    // Building twice gives the same objects.
    assert_eq!(desired(""), d);
}

#[test]
fn dataplane_container_runs_serve_with_the_mounted_config() {
    let d = desired("storage:\n  hostPath: /mnt/nvme0/ec\n");
    let c = container(&d);
    assert_eq!(c.name, CONTAINER);
    assert_eq!(c.command.as_deref().unwrap(), ["edgecache-dataplane"]);
    assert_eq!(
        c.args.as_deref().unwrap(),
        [
            "serve",
            "--config",
            "/etc/edgecache/config.yaml",
            "--admin",
            "$(POD_IP):9090",
            "--admin-token-file",
            "/etc/edgecache-admin/token"
        ]
    );
    let mounts = c.volume_mounts.as_ref().unwrap();
    let config_mount = mounts.iter().find(|m| m.name == "config").unwrap();
    assert_eq!(config_mount.mount_path, CONFIG_DIR);
    assert_eq!(config_mount.read_only, Some(true));
    let cache_mount = mounts.iter().find(|m| m.name == "cache").unwrap();
    assert_eq!(cache_mount.mount_path, "/var/cache/edgecache");
    assert_eq!(config(&d).storage.dir, cache_mount.mount_path);
    let volumes = pod(&d).volumes.as_ref().unwrap();
    let cache = volumes.iter().find(|v| v.name == "cache").unwrap();
    let hp = cache.host_path.as_ref().unwrap();
    assert_eq!(hp.path, "/mnt/nvme0/ec");
    assert_eq!(hp.type_.as_deref(), Some("DirectoryOrCreate"));
    let cm = volumes.iter().find(|v| v.name == "config").unwrap();
    assert_eq!(cm.config_map.as_ref().unwrap().name, "web-config");
    // Probes on the admin port.
    let readiness = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(readiness.path.as_deref(), Some("/readyz"));
    assert_eq!(readiness.port, IntOrString::String("admin".into()));
    let liveness = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(liveness.path.as_deref(), Some("/healthz"));
    let ports = c.ports.as_ref().unwrap();
    assert_eq!(ports[0].name.as_deref(), Some("http"));
    assert_eq!(ports[0].container_port, 8080);
    assert_eq!(ports[1].name.as_deref(), Some("admin"));
    assert_eq!(ports[1].container_port, 9090);
    assert_eq!(pod(&d).service_account_name.as_deref(), Some("web"));
    assert_eq!(pod(&d).termination_grace_period_seconds, Some(45));
}

#[test]
fn host_network() {
    let d = desired("");
    assert_eq!(pod(&d).host_network, None);
    assert_eq!(pod(&d).dns_policy.as_deref(), Some("ClusterFirst"));
    let d = desired("network:\n  hostNetwork: true\n  port: 80\n");
    assert_eq!(pod(&d).host_network, Some(true));
    assert_eq!(
        pod(&d).dns_policy.as_deref(),
        Some("ClusterFirstWithHostNet")
    );
    assert_eq!(container(&d).ports.as_ref().unwrap()[0].container_port, 80);
    assert_eq!(config(&d).listen.to_string(), "0.0.0.0:80");
}

#[test]
fn update_strategy_never_surges() {
    let d = desired("");
    let s = d.daemon_set.spec.update_strategy.as_ref().unwrap();
    assert_eq!(s.type_.as_deref(), Some("RollingUpdate"));
    let ru = s.rolling_update.as_ref().unwrap();
    assert_eq!(ru.max_surge, Some(IntOrString::Int(0)));
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(1)));
    let d = desired("updateStrategy:\n  maxUnavailable: 25%\n");
    let ru = d
        .daemon_set
        .spec
        .update_strategy
        .clone()
        .unwrap()
        .rolling_update
        .unwrap();
    assert_eq!(ru.max_unavailable, Some(IntOrString::String("25%".into())));
    assert_eq!(ru.max_surge, Some(IntOrString::Int(0)));
}

#[test]
fn no_image_means_the_operators_own_release() {
    let d = desired("");
    assert_eq!(
        container(&d).image.as_deref(),
        Some(crate::validate::default_image().as_str())
    );
}

#[test]
fn image_and_pull_policy() {
    let d = desired("image: registry.local/ec:1\nimagePullPolicy: Always\n");
    assert_eq!(container(&d).image.as_deref(), Some("registry.local/ec:1"));
    assert_eq!(container(&d).image_pull_policy.as_deref(), Some("Always"));
}

#[test]
fn internal_traffic_policy_local_keeps_clients_on_their_nodes_cache() {
    let d = desired("network:\n  internalTrafficPolicy: Local\n");
    let spec = d.service.spec.as_ref().unwrap();
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Local"));
    let d = desired("");
    let spec = d.service.spec.as_ref().unwrap();
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
}

#[test]
fn service_type_and_port() {
    let d = desired("network:\n  serviceType: LoadBalancer\n  port: 8081\n");
    let spec = d.service.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    let ports = spec.ports.as_ref().unwrap();
    assert_eq!(ports.len(), 1, "the admin port stays off the Service");
    assert_eq!(ports[0].port, 8081);
    assert_eq!(
        ports[0].target_port,
        Some(IntOrString::String("http".into()))
    );
    assert_eq!(
        d.service_account.automount_service_account_token,
        Some(false)
    );
}

#[test]
fn quantities() {
    assert_eq!(quantity(ByteSize::gib(2)), "2Gi");
    assert_eq!(quantity(ByteSize::mib(1536)), "1536Mi");
    assert_eq!(quantity(ByteSize(1 << 40)), "1Ti");
    assert_eq!(quantity(ByteSize(1000)), "1000");
}

#[test]
fn admin_listener_on_the_pod_ip_with_a_token_from_the_secret() {
    let d = desired("network:\n  adminPort: 9901\n");
    let c = container(&d);
    let args = c.args.as_deref().unwrap();
    let after = |flag: &str| {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1].as_str()
    };
    // Kubernetes expands $(POD_IP) from the container's env; the flag overrides the file.
    assert_eq!(after("--admin"), "$(POD_IP):9901");
    // Issue 35 defect 6: expanded with an IPv4 or an IPv6 pod IP (bare, as Kubernetes puts
    // it), it is an address the data plane's --admin takes.
    for (pod_ip, want) in [
        ("10.244.0.7", "10.244.0.7:9901"),
        ("fd00:10:244::7", "[fd00:10:244::7]:9901"),
    ] {
        let expanded = after("--admin").replace("$(POD_IP)", pod_ip);
        assert_eq!(
            dataplane::parse_socket_addr(&expanded).map(|a| a.to_string()),
            Ok(want.to_string())
        );
    }
    assert_eq!(after("--admin-token-file"), "/etc/edgecache-admin/token");
    let env = c.env.as_ref().unwrap();
    let pod_ip = env.iter().find(|e| e.name == "POD_IP").unwrap();
    let field = pod_ip
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(field.field_path, "status.podIP");

    let mount = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "admin-token")
        .unwrap();
    assert_eq!(mount.mount_path, "/etc/edgecache-admin");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod(&d)
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "admin-token")
        .unwrap();
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("web-admin-token"));
    assert_eq!(secret.default_mode, Some(0o400));
    // The Secret itself: name, type, owner; its token is made once at apply, never in build.
    let s = &d.admin_secret;
    assert_eq!(s.metadata.name.as_deref(), Some("web-admin-token"));
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        s.metadata.owner_references.as_ref().unwrap()[0].kind,
        "EdgeCache"
    );
    assert!(s.data.is_none() && s.string_data.is_none());
    // The probes stay on the admin port (the kubelet probes the pod IP): see
    // dataplane_container_runs_serve_with_the_mounted_config.
}

fn peer(name: &str, addr: &str) -> crate::peers::Peer {
    crate::peers::Peer {
        name: name.into(),
        addr: addr.parse().unwrap(),
    }
}

#[test]
fn sharding_is_consistent_by_default_with_a_mounted_peer_list() {
    let d = desired("");
    let cfg = config(&d);
    assert_eq!(cfg.sharding.mode, dataplane::ShardingMode::Consistent);
    assert_eq!(
        cfg.sharding.peers_file.as_deref(),
        Some("/etc/edgecache-peers/peers")
    );
    let (raw, _) =
        dataplane::parse_shape(&d.config_map.data.as_ref().unwrap()[CONFIG_KEY]).unwrap();
    assert_eq!(raw.sharding.node_name, None, "each pod names itself");
    let defaults = dataplane::ShardingConfig::default();
    assert_eq!(
        cfg.sharding.popularity_threshold,
        defaults.popularity_threshold
    );
    assert_eq!(cfg.sharding.peer_timeout, defaults.peer_timeout);

    // The node's name from the downward API.
    let env = container(&d).env.as_ref().unwrap();
    let node = env
        .iter()
        .find(|e| e.name == "EDGECACHE_NODE_NAME")
        .unwrap();
    let field = node
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .unwrap();
    assert_eq!(field.field_path, "spec.nodeName");

    // The peers ConfigMap, mounted as a whole directory (a subPath mount is never updated).
    let peers = d.peers_config_map.as_ref().unwrap();
    assert_eq!(peers.metadata.name.as_deref(), Some("web-peers"));
    assert_eq!(
        peers.metadata.owner_references.as_ref().unwrap()[0].kind,
        "EdgeCache"
    );
    let volumes = pod(&d).volumes.as_ref().unwrap();
    let v = volumes.iter().find(|v| v.name == "peers").unwrap();
    assert_eq!(v.config_map.as_ref().unwrap().name, "web-peers");
    let mounts = container(&d).volume_mounts.as_ref().unwrap();
    let m = mounts.iter().find(|m| m.name == "peers").unwrap();
    assert_eq!(m.mount_path, "/etc/edgecache-peers");
    assert_eq!(m.read_only, Some(true));
    assert_eq!(m.sub_path, None);
    // Empty until pods are ready, but the file exists (the data plane needs it to start).
    let text = &peers.data.as_ref().unwrap()["peers"];
    assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
}

#[test]
fn peers_fill_the_peers_config_map_and_leave_the_config_hash_alone() {
    let empty = desired("");
    let three = desired("").with_peers(&[
        peer("node-a", "10.0.0.1:8080"),
        peer("node-b", "10.0.0.2:8080"),
        peer("node-c", "10.0.0.3:8080"),
    ]);
    let text = &three
        .peers_config_map
        .as_ref()
        .unwrap()
        .data
        .as_ref()
        .unwrap()["peers"];
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "node-a 10.0.0.1:8080",
            "node-b 10.0.0.2:8080",
            "node-c 10.0.0.3:8080"
        ]
    );
    assert_eq!(three.config_hash, empty.config_hash);
    assert_eq!(three.config_map, empty.config_map);
    assert_eq!(three.daemon_set, empty.daemon_set);
    // render and apply order: the peers ConfigMap before the DaemonSet that mounts it.
    let kinds: Vec<String> = three
        .objects()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let pos = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(
        pos("ConfigMap/web-peers") < pos("DaemonSet/web"),
        "{kinds:?}"
    );
}

#[test]
fn sharding_knobs_reach_the_config() {
    let d = desired(
        "sharding:\n  mode: consistent\n  popularityThreshold: 0\n  popularityWindow: 30s\n  peerTimeout: 2s\n",
    );
    let s = config(&d).sharding;
    assert_eq!(s.mode, dataplane::ShardingMode::Consistent);
    assert_eq!(s.popularity_threshold, 0);
    assert_eq!(s.popularity_window, edgecache_api::Duration::secs(30));
    assert_eq!(s.peer_timeout, edgecache_api::Duration::secs(2));
}

#[test]
fn slice_size_reaches_the_config() {
    // Absent: the data plane's default, 4MiB.
    assert_eq!(
        config(&desired("")).storage.slice_size,
        edgecache_api::ByteSize::mib(4)
    );
    assert_eq!(
        config(&desired("storage:\n  sliceSize: 16MiB\n"))
            .storage
            .slice_size,
        edgecache_api::ByteSize::mib(16)
    );
    // "0": slicing off.
    assert_eq!(
        config(&desired("storage:\n  sliceSize: \"0\"\n"))
            .storage
            .slice_size,
        edgecache_api::ByteSize::b(0)
    );
}

#[test]
fn sharding_off_has_no_peer_list() {
    let d = desired("sharding:\n  mode: off\n").with_peers(&[peer("node-a", "10.0.0.1:8080")]);
    let cfg = config(&d);
    assert_eq!(cfg.sharding.mode, dataplane::ShardingMode::Off);
    assert_eq!(cfg.sharding.peers_file, None);
    assert!(d.peers_config_map.is_none());
    assert!(
        pod(&d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .all(|v| v.name != "peers")
    );
    assert!(
        container(&d)
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.name != "peers")
    );
    assert_ne!(d.config_hash, desired("").config_hash);
}

const TLS: &str =
    "tls:\n  certificates:\n  - secretName: web-tls\n  - secretName: api.example.com\n";

#[test]
fn tls_mounts_each_secret_whole_and_renders_its_files_in_order() {
    let d = desired(TLS);
    let vols = pod(&d).volumes.as_ref().unwrap();
    let mounts = container(&d).volume_mounts.as_ref().unwrap();
    for (i, secret) in ["web-tls", "api.example.com"].into_iter().enumerate() {
        let name = format!("tls-{i}");
        let v = vols.iter().find(|v| v.name == name).unwrap();
        let src = v.secret.as_ref().unwrap();
        assert_eq!(src.secret_name.as_deref(), Some(secret));
        assert_eq!(src.items, None, "the whole Secret, every key");
        assert_eq!(
            src.optional, None,
            "a missing Secret keeps the pod from starting"
        );
        let m = mounts.iter().find(|m| m.name == name).unwrap();
        assert_eq!(m.mount_path, format!("/etc/edgecache-tls/{secret}"));
        assert_eq!(m.read_only, Some(true));
        // A subPath mount would never see the kubelet's update of a renewed certificate.
        assert_eq!(m.sub_path, None);
        assert_eq!(m.sub_path_expr, None);
    }
    let tls = config(&d).tls;
    assert_eq!(
        tls.listen.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:8443")
    );
    let files: Vec<(&str, &str)> = tls
        .certificates
        .iter()
        .map(|c| (c.cert.as_str(), c.key.as_str()))
        .collect();
    assert_eq!(
        files,
        [
            (
                "/etc/edgecache-tls/web-tls/tls.crt",
                "/etc/edgecache-tls/web-tls/tls.key"
            ),
            (
                "/etc/edgecache-tls/api.example.com/tls.crt",
                "/etc/edgecache-tls/api.example.com/tls.key"
            ),
        ]
    );
    // The contract's defaults for what the spec leaves out.
    let defaults = dataplane::TlsConfig::default();
    assert_eq!(tls.handshake_timeout, defaults.handshake_timeout);
    assert_eq!(tls.min_version, dataplane::TlsVersion::V1_2);
    assert!(!tls.redirect_http);
    assert_eq!(
        tls.max_handshakes_per_worker,
        defaults.max_handshakes_per_worker
    );

    let https: Vec<_> = container(&d)
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .filter(|p| p.name.as_deref() == Some("https"))
        .map(|p| (p.container_port, p.protocol.clone()))
        .collect();
    assert_eq!(https, [(8443, Some("TCP".to_string()))]);
    let svc = d.service.spec.as_ref().unwrap().ports.as_ref().unwrap();
    let by_name: Vec<_> = svc
        .iter()
        .map(|p| (p.name.as_deref().unwrap(), p.port, p.target_port.clone()))
        .collect();
    assert_eq!(
        by_name,
        [
            ("http", 8080, Some(IntOrString::String("http".into()))),
            ("https", 8443, Some(IntOrString::String("https".into()))),
        ]
    );
}

#[test]
fn tls_knobs_reach_the_config() {
    let d = desired(
        "network:\n  port: 80\ntls:\n  port: 443\n  minVersion: \"1.3\"\n  redirectHttp: true\n  handshakeTimeout: 3s\n  certificates:\n  - secretName: web-tls\n",
    );
    let tls = config(&d).tls;
    assert_eq!(
        tls.listen.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:443")
    );
    assert_eq!(tls.min_version, dataplane::TlsVersion::V1_3);
    assert!(tls.redirect_http);
    assert_eq!(tls.handshake_timeout.to_string(), "3s");
    let svc = d.service.spec.as_ref().unwrap().ports.as_ref().unwrap();
    assert_eq!(svc.iter().map(|p| p.port).collect::<Vec<_>>(), [80, 443]);
}

#[test]
fn without_tls_there_is_no_listener_port_or_secret_volume() {
    let d = desired("");
    let cfg = config(&d);
    assert_eq!(cfg.tls, dataplane::TlsConfig::default());
    assert_eq!(cfg.http2, dataplane::Http2Config::default());
    assert_eq!(cfg.access_log, dataplane::AccessLogConfig::default());
    let ports = container(&d).ports.as_ref().unwrap();
    assert!(ports.iter().all(|p| p.name.as_deref() != Some("https")));
    assert_eq!(
        d.service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    assert!(
        pod(&d)
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .all(|v| !v.name.starts_with("tls-"))
    );
}

#[test]
fn the_pod_template_names_the_secrets_and_nothing_of_their_contents() {
    // build takes no Secret: what it renders (and hashes) is the spec alone, so a renewed
    // certificate (new Secret data, same name) renders the same pod template.
    let a = desired(TLS);
    assert_eq!(a, desired(TLS));
    assert_ne!(
        a.config_hash,
        desired("").config_hash,
        "a listener is a new config"
    );
    let annotations = a
        .daemon_set
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        [
            CONFIG_HASH_ANNOTATION,
            "kubectl.kubernetes.io/default-container"
        ]
    );
    // Another Secret is another file path: a new config, and a rollout.
    let other = desired("tls:\n  certificates:\n  - secretName: web-tls-2\n");
    assert_ne!(other.config_hash, a.config_hash);
}

#[test]
fn http2_and_the_access_log_reach_the_config() {
    let d = desired(
        "http2:\n  enabled: false\n  maxConcurrentStreams: 16\n  connectionWindow: 1MiB\n  \
         keepAliveInterval: 5s\naccessLog:\n  format: \"off\"\n  sample: 0.25\n",
    );
    let cfg = config(&d);
    assert!(!cfg.http2.enabled);
    assert_eq!(cfg.http2.max_concurrent_streams, 16);
    assert_eq!(cfg.http2.connection_window.0, 1 << 20);
    assert_eq!(cfg.http2.keep_alive_interval.get().as_secs(), 5);
    // What the spec does not set keeps the contract's defaults (0: from the memory plan).
    let h = dataplane::Http2Config::default();
    assert_eq!(cfg.http2.stream_window, h.stream_window);
    assert_eq!(cfg.http2.max_header_list_size, h.max_header_list_size);
    assert_eq!(cfg.http2.keep_alive_timeout, h.keep_alive_timeout);
    assert_eq!(cfg.http2.max_pending_resets, h.max_pending_resets);
    assert_eq!(cfg.access_log.format, dataplane::AccessLogFormat::Off);
    assert_eq!(cfg.access_log.sample, 0.25);
    let d = desired("accessLog:\n  format: combined\n");
    assert_eq!(
        config(&d).access_log.format,
        dataplane::AccessLogFormat::Combined
    );
    assert_eq!(config(&d).access_log.sample, 1.0);
}

#[test]
fn tracing_reaches_the_config() {
    assert_eq!(
        config(&desired("")).tracing,
        dataplane::TracingConfig::default()
    );
    let d = desired("tracing:\n  endpoint: http://otel.observability:4318\n  sample: 0.05\n");
    let cfg = config(&d);
    assert_eq!(
        cfg.tracing.endpoint.as_deref(),
        Some("http://otel.observability:4318")
    );
    assert_eq!(cfg.tracing.sample, 0.05);
    let d = desired("tracing:\n  endpoint: http://otel:4318\n");
    assert_eq!(config(&d).tracing.sample, 1.0);
}

fn desired_sites(spec_yaml: &str) -> Desired<Prepared> {
    build(&validate(&sites_edgecache(spec_yaml), &Policy::default()).unwrap())
}

#[test]
fn sites_reach_the_config_map_field_by_field() {
    let cfg = config(&desired_sites(TWO_SITES));
    assert_eq!(cfg.origin.url, "", "no default site: other Hosts get 421");
    assert_eq!(cfg.sites.len(), 2);
    let (www, img) = (&cfg.sites[0], &cfg.sites[1]);
    assert_eq!(www.hosts, ["www.shop.example", "shop.example"]);
    assert_eq!(www.origins, ["http://web.shop.svc.cluster.local:8080"]);
    assert_eq!(www.balance, dataplane::Balance::LeastConnections);
    assert_eq!(www.health_check.path.as_deref(), Some("/healthz"));
    assert_eq!(www.health_check.interval.to_string(), "10s");
    // What the spec leaves out keeps the contract's defaults.
    let hc = dataplane::HealthCheckConfig::default();
    assert_eq!(www.health_check.timeout, hc.timeout);
    assert_eq!(www.health_check.unhealthy_after, hc.unhealthy_after);
    assert_eq!(www.health_check.healthy_after, hc.healthy_after);
    assert_eq!(www.retries, dataplane::SiteConfig::default().retries);
    assert_eq!(www.origin_tls, dataplane::OriginTlsConfig::default());
    assert!(!www.origin_http2 && !www.default);
    assert_eq!(www.host_header, dataplane::HostHeader::Preserve);
    assert_eq!(
        www.cache.default_ttl.map(|d| d.to_string()).as_deref(),
        Some("5m")
    );
    assert_eq!(www.cache.cookie_policy, None);
    assert_eq!(www.cache.drop_query, ["utm_*"]);
    assert!(www.cache.sort_query);
    assert_eq!(img.hosts, ["*.img.shop.example"]);
    assert_eq!(img.retries, 2);
    assert!(img.origin_http2);
    assert_eq!(img.host_header, dataplane::HostHeader::Origin);
    assert_eq!(
        img.origin_tls.ca_file.as_deref(),
        Some("/etc/edgecache-origin-ca/img-ca/bundle.pem")
    );
    assert_eq!(img.origin_tls.server_name.as_deref(), Some("img.internal"));
    // Beside origin.url, the sites are the same and origin.url answers the other Hosts.
    let cfg = config(&desired(TWO_SITES));
    assert_eq!(cfg.origin.url, "http://origin.edge.svc:8080");
    assert_eq!(cfg.sites.len(), 2);
}

#[test]
fn each_origin_ca_secret_is_mounted_once_whole_and_read_only() {
    // A third site names img-ca again, with its default key: one volume, two files.
    let d = desired_sites(&format!(
        "{TWO_SITES}- hosts: [cdn.shop.example]\n  origins: [https://cdn.shop.svc]\n  originTls: {{caSecret: {{name: img-ca}}}}\n- hosts: [api.shop.example]\n  origins: [https://api.shop.svc]\n  originTls: {{caSecret: {{name: api-ca}}}}\n"
    ));
    let secrets: Vec<(&str, &str, Option<i32>)> = (pod(&d).volumes.iter().flatten())
        .filter_map(|v| {
            let s = v.secret.as_ref()?;
            Some((v.name.as_str(), s.secret_name.as_deref()?, s.default_mode))
        })
        .collect();
    assert_eq!(
        secrets,
        [
            ("admin-token", "web-admin-token", Some(0o400)),
            ("origin-ca-0", "img-ca", Some(0o400)),
            ("origin-ca-1", "api-ca", Some(0o400)),
        ]
    );
    let mounts: Vec<(&str, &str, Option<bool>, bool)> = (container(&d).volume_mounts.iter())
        .flatten()
        .filter(|m| m.name.starts_with("origin-ca-"))
        .map(|m| {
            (
                m.name.as_str(),
                m.mount_path.as_str(),
                m.read_only,
                m.sub_path.is_none(),
            )
        })
        .collect();
    assert_eq!(
        mounts,
        [
            (
                "origin-ca-0",
                "/etc/edgecache-origin-ca/img-ca",
                Some(true),
                true
            ),
            (
                "origin-ca-1",
                "/etc/edgecache-origin-ca/api-ca",
                Some(true),
                true
            ),
        ]
    );
    let files: Vec<Option<String>> = config(&d)
        .sites
        .iter()
        .map(|s| s.origin_tls.ca_file.clone())
        .collect();
    assert_eq!(
        files,
        [
            None,
            Some("/etc/edgecache-origin-ca/img-ca/bundle.pem".into()),
            Some("/etc/edgecache-origin-ca/img-ca/ca.crt".into()),
            Some("/etc/edgecache-origin-ca/api-ca/ca.crt".into()),
        ]
    );
    // With TLS too, its volumes come first and keep their names.
    let d = desired_sites(&format!(
        "{TWO_SITES}tls:\n  certificates:\n  - secretName: web-tls\n"
    ));
    let names: Vec<&str> = (pod(&d).volumes.iter().flatten())
        .filter(|v| v.secret.is_some())
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(names, ["admin-token", "tls-0", "origin-ca-0"]);
}

#[test]
fn an_edgecache_without_sites_renders_no_sites_and_no_ca_volume() {
    let d = desired("");
    assert!(config(&d).sites.is_empty());
    let yaml = &d.config_map.data.as_ref().unwrap()[CONFIG_KEY];
    assert!(yaml.contains("sites: []"), "{yaml}");
    assert!((pod(&d).volumes.iter().flatten()).all(|v| !v.name.starts_with("origin-ca-")));
}

/// Defect 8 of issue 35: the install could set neither the data-plane image an EdgeCache runs
/// when it names none, nor the pull Secrets of a private registry. Both come from the
/// operator's install-time policy (the chart's `dataplane.image` and
/// `dataplane.imagePullSecrets`); an EdgeCache's own `spec.image` still wins.
#[test]
fn the_install_sets_the_default_image_and_the_pull_secrets() {
    let policy = Policy {
        dataplane_image: Some("registry.example/edge/dataplane:1.2".into()),
        image_pull_secrets: vec!["regcred".into()],
        ..Policy::default()
    };
    let d = build(&validate(&minimal_edgecache(""), &policy).unwrap());
    assert_eq!(
        container(&d).image.as_deref(),
        Some("registry.example/edge/dataplane:1.2")
    );
    let secrets: Vec<&str> = pod(&d)
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(secrets, ["regcred"]);
    let d = build(&validate(&minimal_edgecache("image: mine:3\n"), &policy).unwrap());
    assert_eq!(container(&d).image.as_deref(), Some("mine:3"));
    // Without them: the operator's own default, and no pull Secrets.
    let d = desired("");
    assert_eq!(container(&d).image, Some(crate::validate::default_image()));
    assert_eq!(pod(&d).image_pull_secrets, None);
}

/// Issue 35 defect 9: with the operator's pods known (the chart's --operator-namespace and
/// --operator-pod-label), each EdgeCache gets an ingress NetworkPolicy: the serving ports from
/// anywhere (clients, and the pods' peer fills), the admin port from the operator's pods and
/// the EdgeCache's own; nothing without them.
#[test]
fn the_network_policy_lets_the_operator_reach_the_admin_port_and_clients_the_serving_ports() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let ec = minimal_edgecache(
        "network:\n  port: 8081\n  adminPort: 9901\ntls:\n  certificates: [{secretName: web-tls}]\n",
    );
    assert!(
        build(&validate(&ec, &Policy::default()).unwrap())
            .network_policy
            .is_none()
    );
    let policy = Policy {
        admin_clients: Some(crate::validate::AdminClients {
            namespace: "edgecache-system".into(),
            pod_labels: [(
                "app.kubernetes.io/name".to_string(),
                "edgecache-operator".to_string(),
            )]
            .into(),
            cidrs: vec!["10.213.0.0/24".into()],
        }),
        ..Policy::default()
    };
    let d = build(&validate(&ec, &policy).unwrap());
    let np: &NetworkPolicy = d.network_policy.as_ref().unwrap();
    let v = serde_json::to_value(np).unwrap();
    assert_eq!(v["metadata"]["name"], "web");
    assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "EdgeCache");
    assert_eq!(
        v["spec"],
        serde_json::json!({
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "edgecache",
                                            "app.kubernetes.io/instance": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"port": 8081, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}]},
                {"from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "edgecache-system"}},
                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "edgecache-operator"}}},
                    {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "edgecache",
                                                     "app.kubernetes.io/instance": "web"}}},
                    {"ipBlock": {"cidr": "10.213.0.0/24"}}],
                 "ports": [{"port": 9901, "protocol": "TCP"}]},
            ],
        })
    );
    // It selects exactly the DaemonSet's pods.
    assert_eq!(
        v["spec"]["podSelector"]["matchLabels"],
        serde_json::to_value(d.daemon_set.spec.selector.match_labels.as_ref().unwrap()).unwrap()
    );
    assert!(
        d.objects()
            .unwrap()
            .iter()
            .any(|o| o["kind"] == "NetworkPolicy")
    );
}

/// Issue 35 defect 6: the serving listeners follow the family of the EdgeCache's Service (what
/// the API server gave it): `[::]` when IPv6 comes first, `0.0.0.0` otherwise and before the
/// Service exists; a new family is a new config (the pods roll).
#[test]
fn the_serving_listeners_follow_the_services_ip_family() {
    let ec = minimal_edgecache("tls:\n  certificates: [{secretName: web-tls}]\n");
    let v = validate(&ec, &Policy::default()).unwrap();
    let families = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let v4 = build(&v.clone().serving_on(&[]));
    assert_eq!(config(&v4).listen.to_string(), "0.0.0.0:8080");
    let dual_v4 = build(&v.clone().serving_on(&families(&["IPv4", "IPv6"])));
    assert_eq!(dual_v4, v4, "IPv4 first: as before");
    let v6 = build(&v.serving_on(&families(&["IPv6"])));
    let c = config(&v6);
    assert_eq!(c.listen.to_string(), "[::]:8080");
    assert_eq!(
        c.tls.listen.map(|a| a.to_string()).as_deref(),
        Some("[::]:8443")
    );
    assert_ne!(v6.config_hash, v4.config_hash);
}

#[test]
fn admin_cidrs_are_checked() {
    use crate::validate::check_cidr;
    for ok in ["10.213.0.0/24", "0.0.0.0/0", "fd00::/64", "192.168.1.7/32"] {
        assert_eq!(check_cidr(ok), Ok(()), "{ok}");
    }
    for bad in ["10.213.0.0", "10.213.0.0/33", "fd00::/129", "nodes/24", ""] {
        assert!(check_cidr(bad).is_err(), "{bad}");
    }
}

#[test]
fn compression_reaches_the_config_map_top_level_and_per_site() {
    assert!(config(&desired("")).compression.is_unset());
    let d = desired("compression:\n  levels: {gzip: 4, br: 7}\n  minSize: 2KiB\n");
    let c = config(&d).compression;
    assert_eq!(
        (c.levels.gzip, c.levels.br, c.levels.zstd),
        (Some(4), Some(7), None)
    );
    assert_eq!(c.min_size.map(|s| s.bytes()), Some(2048));
    let spec = format!(
        "{TWO_SITES}  compression: {{enabled: false}}\ncompression: {{types: [text/css]}}\n"
    );
    let cfg = config(&desired_sites(&spec));
    assert_eq!(
        cfg.compression.types.as_deref(),
        Some(&["text/css".to_string()][..])
    );
    assert!(cfg.sites[0].compression.is_unset());
    assert_eq!(cfg.sites[1].compression.enabled, Some(false));
}
