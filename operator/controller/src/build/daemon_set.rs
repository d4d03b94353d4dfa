//! The DaemonSet: one data-plane pod per selected node, its cache on the node's NVMe through a
//! hostPath, its config from the ConfigMap (whose hash on the pod template rolls the pods).

use std::collections::BTreeMap;

use edgecache_api::SteeringMode;
use edgecache_api::v1alpha1::{EdgeCacheSpec, SecurityMode};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, HostPathVolumeSource, Lifecycle, LifecycleHandler,
    LocalObjectReference, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, SleepAction, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    ADMIN_TOKEN_DIR, ADMIN_TOKEN_KEY, CONFIG_DIR, CONFIG_HASH_ANNOTATION, CONFIG_KEY, CONTAINER,
    admin_secret_name, child_meta, config_map_name, labels, peers_config_map_name, placement,
    quantity, selector_labels,
};
use crate::validate::{
    CONTAINER_CACHE_DIR, PEERS_DIR, ValidatedEdgeCache, origin_ca_secret_dir, origin_ca_secrets,
    tls_secret_dir,
};

/// The environment variable that names the node to the data plane (its name in the peer list).
pub const NODE_NAME_ENV: &str = "EDGECACHE_NODE_NAME";

/// Whether the pods read a peer list.
fn sharded(ec: &ValidatedEdgeCache) -> bool {
    ec.dataplane.sharding.peers_file.is_some()
}

/// A Secret the pods mount whole, read-only: its volume's name, the Secret's name and the
/// directory it is mounted at.
struct SecretMount {
    volume: String,
    secret: String,
    dir: String,
}

/// The Secrets the pods mount besides the admin token: the TLS certificates of `spec.tls`
/// (volumes `tls-0`, `tls-1`, ... in order), then each origin CA Secret of `spec.sites` once
/// (`origin-ca-0`, ...). Volumes are named by index: a Secret's name may be longer than a
/// volume's or hold dots.
fn secret_mounts(ec: &ValidatedEdgeCache) -> Vec<SecretMount> {
    let tls = ec.spec.tls.iter().flat_map(|t| &t.certificates);
    let tls = tls.enumerate().map(|(i, c)| SecretMount {
        volume: format!("tls-{i}"),
        secret: c.secret_name.clone(),
        dir: tls_secret_dir(&c.secret_name),
    });
    let ca = origin_ca_secrets(&ec.spec).into_iter().enumerate();
    let ca = ca.map(|(i, name)| SecretMount {
        volume: format!("origin-ca-{i}"),
        secret: name.to_string(),
        dir: origin_ca_secret_dir(name),
    });
    tls.chain(ca).collect()
}

/// Seconds the pod keeps serving after it is removed from the Service's endpoints and before
/// SIGTERM, so clients stop being sent to it first.
const PRESTOP_DRAIN_SECONDS: i64 = 5;
/// Seconds added to the data plane's own shutdown grace before the kubelet kills it.
const KILL_MARGIN_SECONDS: i64 = 10;

pub(super) fn daemon_set(ec: &ValidatedEdgeCache, config_hash: &str) -> DaemonSet {
    let spec = &ec.spec;
    let grace_secs = i64::try_from(ec.dataplane.shutdown_grace.get().as_secs()).unwrap_or(30);
    let mut node_selector = BTreeMap::from([("kubernetes.io/os".to_string(), "linux".to_string())]);
    node_selector.extend(spec.placement.node_selector.clone());

    let pod = PodSpec {
        service_account_name: Some(ec.name.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_network: spec.network.host_network.then_some(true),
        dns_policy: Some(
            if spec.network.host_network {
                "ClusterFirstWithHostNet"
            } else {
                "ClusterFirst"
            }
            .into(),
        ),
        node_selector: Some(node_selector),
        affinity: placement::affinity(&spec.placement, spec.steering.mode),
        tolerations: (!spec.placement.tolerations.is_empty())
            .then(|| spec.placement.tolerations.clone()),
        priority_class_name: spec.placement.priority_class_name.clone(),
        image_pull_secrets: (!ec.image_pull_secrets.is_empty()).then(|| {
            ec.image_pull_secrets
                .iter()
                .map(|name| LocalObjectReference { name: name.clone() })
                .collect()
        }),
        termination_grace_period_seconds: Some(
            PRESTOP_DRAIN_SECONDS + grace_secs + KILL_MARGIN_SECONDS,
        ),
        containers: vec![container(ec)],
        volumes: Some(volumes(ec)),
        ..PodSpec::default()
    };

    DaemonSet {
        metadata: child_meta(ec, ec.name.clone()),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector_labels(&ec.name)),
                match_expressions: None,
            },
            // maxSurge 0: a node's old pod stops before its new pod starts, so the two never
            // hold the node's cache directory and port at the same time.
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_unavailable: Some(spec.update_strategy.max_unavailable.clone()),
                    max_surge: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(5),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(ec)),
                    annotations: Some(BTreeMap::from([
                        (CONFIG_HASH_ANNOTATION.to_string(), config_hash.to_string()),
                        (
                            "kubectl.kubernetes.io/default-container".to_string(),
                            CONTAINER.to_string(),
                        ),
                    ])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DaemonSetSpec::default()
        },
        status: None,
    }
}

fn volumes(ec: &ValidatedEdgeCache) -> Vec<Volume> {
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name(&ec.name),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "cache".into(),
            host_path: Some(HostPathVolumeSource {
                path: ec.host_path.clone(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Volume::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: "admin-token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(admin_secret_name(&ec.name)),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    // One volume per TLS and origin CA Secret. Only the names are in the pod template: a
    // renewed certificate or CA bundle changes no pod, and the kubelet updates the files.
    for m in secret_mounts(ec) {
        volumes.push(Volume {
            name: m.volume,
            secret: Some(SecretVolumeSource {
                secret_name: Some(m.secret),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    if sharded(ec) {
        volumes.push(Volume {
            name: "peers".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: peers_config_map_name(&ec.name),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    volumes
}

fn container(ec: &ValidatedEdgeCache) -> Container {
    let spec = &ec.spec;
    let mut limits = BTreeMap::from([(
        "memory".to_string(),
        Quantity(quantity(spec.resources.memory)),
    )]);
    if let Some(cpu) = &spec.resources.cpu {
        limits.insert("cpu".into(), Quantity(cpu.clone()));
    }
    let http_get = |path: &str| HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::String("admin".into()),
        scheme: Some("HTTP".into()),
        ..HTTPGetAction::default()
    };
    let field_env = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    };
    Container {
        name: CONTAINER.into(),
        image: Some(ec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        command: Some(vec!["edgecache-dataplane".into()]),
        // The admin listener binds the pod IP, not 0.0.0.0 (the flag overrides the config
        // file's `admin`; Kubernetes expands $(POD_IP) from the env below), and mutating admin
        // calls need the token from the Secret (re-read by the data plane when it changes).
        args: Some(vec![
            "serve".into(),
            "--config".into(),
            format!("{CONFIG_DIR}/{CONFIG_KEY}"),
            "--admin".into(),
            format!("$(POD_IP):{}", spec.network.admin_port),
            "--admin-token-file".into(),
            format!("{ADMIN_TOKEN_DIR}/{ADMIN_TOKEN_KEY}"),
        ]),
        ports: Some(
            vec![
                ContainerPort {
                    name: Some("http".into()),
                    container_port: i32::from(spec.network.port),
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                },
                ContainerPort {
                    name: Some("admin".into()),
                    container_port: i32::from(spec.network.admin_port),
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                },
            ]
            .into_iter()
            .chain(spec.tls.as_ref().map(|tls| ContainerPort {
                name: Some("https".into()),
                container_port: i32::from(tls.port),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            }))
            .collect(),
        ),
        env: Some(vec![
            field_env("NODE_NAME", "spec.nodeName"),
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
            // The node's name in the peer list (the shared config leaves it out).
            field_env(NODE_NAME_ENV, "spec.nodeName"),
        ]),
        // Requests equal limits: with whole CPUs the pod is Guaranteed, so the static CPU
        // manager gives it exclusive cores for its pinned workers; the memory limit is the
        // cgroup limit the data plane sizes its RAM tier from.
        resources: Some(ResourceRequirements {
            requests: Some(limits.clone()),
            limits: Some(limits),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(volume_mounts(ec)),
        readiness_probe: Some(Probe {
            http_get: Some(http_get("/readyz")),
            period_seconds: Some(5),
            failure_threshold: Some(2),
            ..Probe::default()
        }),
        liveness_probe: Some(Probe {
            http_get: Some(http_get("/healthz")),
            period_seconds: Some(10),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        // Opening the store rebuilds the index from the NVMe; allow it up to 10 minutes before
        // the liveness probe starts counting.
        startup_probe: Some(Probe {
            http_get: Some(http_get("/healthz")),
            period_seconds: Some(5),
            failure_threshold: Some(120),
            ..Probe::default()
        }),
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRESTOP_DRAIN_SECONDS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        security_context: Some(security_context(ec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    }
}

fn volume_mounts(ec: &ValidatedEdgeCache) -> Vec<VolumeMount> {
    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "cache".into(),
            mount_path: CONTAINER_CACHE_DIR.into(),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "admin-token".into(),
            mount_path: ADMIN_TOKEN_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ];
    // Whole directories, not `subPath`: the kubelet swaps a Secret volume's files atomically
    // when the Secret changes (a renewal), but never updates a `subPath` mount.
    for m in secret_mounts(ec) {
        mounts.push(VolumeMount {
            name: m.volume,
            mount_path: m.dir,
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if sharded(ec) {
        mounts.push(VolumeMount {
            name: "peers".into(),
            mount_path: PEERS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    mounts
}

/// The capabilities the data plane uses in `capabilities` mode: BPF to load the steering program
/// (only for the BPF steering modes), NET_ADMIN for queue and busy-poll setup, IPC_LOCK and
/// SYS_RESOURCE for kernels that charge BPF maps and io_uring rings to the memlock limit, and
/// NET_BIND_SERVICE only when a port it listens on (`network.port`, `network.adminPort`,
/// `tls.port`) is below 1024 (dropping ALL takes the right to bind those from root too).
pub fn capabilities(spec: &EdgeCacheSpec) -> Vec<String> {
    let mut caps = Vec::new();
    if matches!(
        spec.steering.mode,
        SteeringMode::Queue | SteeringMode::Cpu | SteeringMode::Hash
    ) {
        caps.push("BPF".to_string());
    }
    caps.extend(["NET_ADMIN", "IPC_LOCK", "SYS_RESOURCE"].map(String::from));
    let ports = [spec.network.port, spec.network.admin_port]
        .into_iter()
        .chain(spec.tls.as_ref().map(|t| t.port));
    if ports.into_iter().any(|p| p < 1024) {
        caps.push("NET_BIND_SERVICE".to_string());
    }
    caps
}

fn security_context(ec: &ValidatedEdgeCache) -> SecurityContext {
    let spec = &ec.spec;
    match spec.security.mode {
        // Privileged containers always run seccomp Unconfined with every capability.
        SecurityMode::Privileged => SecurityContext {
            privileged: Some(true),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        },
        SecurityMode::Capabilities => SecurityContext {
            privileged: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            // Root inside the container, so the added capabilities are effective and the
            // hostPath (owned by root on the node) is writable.
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            capabilities: Some(Capabilities {
                add: Some(capabilities(spec)),
                drop: Some(vec!["ALL".into()]),
            }),
            // containerd's RuntimeDefault profile blocks io_uring; Unconfined (or a Localhost
            // profile that allows it) keeps the io_uring engine usable.
            seccomp_profile: Some(match &spec.security.seccomp_localhost_profile {
                Some(p) => SeccompProfile {
                    type_: "Localhost".into(),
                    localhost_profile: Some(p.clone()),
                },
                None => SeccompProfile {
                    type_: "Unconfined".into(),
                    localhost_profile: None,
                },
            }),
            ..SecurityContext::default()
        },
    }
}
