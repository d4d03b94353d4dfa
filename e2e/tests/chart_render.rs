//! The Helm chart, offline: `helm lint`, `helm template` over every `charts/edgecache/ci/*.yaml`,
//! every rendered document parsed into its k8s-openapi type (and serialised back unchanged, so
//! a misspelt field cannot hide), RBAC exactly what the operator calls, a hardened pod, the CRD
//! identical to `crds/`, and bad values rejected by `values.schema.json` with a clear message.
//! Without helm the helm-based tests print `SKIPPED: helm not installed (...)`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use edgecache_api::v1alpha1::EdgeCache;
use edgecache_e2e::chart::{self, chart_dir, ci_values, documents, template};
use edgecache_e2e::repo_root;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The CRDs under `crds/`, each copied to the chart's `files/` (EdgeCache, EdgeCachePurge).
const CRD_FILES: [&str; 2] = [
    "edgecache.dev_edgecaches.yaml",
    "edgecache.dev_edgecachepurges.yaml",
];
const NS: &str = "edge-system";

fn helm_or_skip() -> Option<PathBuf> {
    match chart::helm() {
        Ok(h) => Some(h),
        Err(reason) => {
            println!("SKIPPED: helm not installed ({reason})");
            None
        }
    }
}

/// Parse `doc` as `T` and check that serialising it back gives the same JSON: a field the type
/// does not know (a typo in a template) would be dropped and show up here.
fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "{} {} does not parse as {}: {e}",
            doc["kind"],
            doc["metadata"]["name"],
            std::any::type_name::<T>()
        )
    });
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        &back,
        doc,
        "{} {} does not round-trip through {} (unknown or misspelt field?)",
        doc["kind"],
        doc["metadata"]["name"],
        std::any::type_name::<T>()
    );
    t
}

/// Every rendered object of one values file, typed.
#[derive(Default)]
struct Rendered {
    crds: Vec<CustomResourceDefinition>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    services: Vec<Service>,
    deployments: Vec<Deployment>,
    pods: Vec<Pod>,
    edgecaches: Vec<EdgeCache>,
    config_maps: Vec<ConfigMap>,
    others: Vec<Value>,
}

fn render(helm: &Path, values: &[PathBuf], sets: &[&str]) -> Rendered {
    let out = template(helm, NS, values, sets);
    assert!(
        out.success,
        "helm template with {values:?} {sets:?} failed:\n{}",
        out.stderr
    );
    let mut r = Rendered::default();
    for doc in documents(&out.stdout).unwrap() {
        match (
            doc["apiVersion"].as_str().unwrap_or(""),
            doc["kind"].as_str().unwrap_or(""),
        ) {
            // Compared whole with the repo's CRD instead of round-tripped: Helm's toYaml writes
            // the schema's float bounds (1024.0) as integers.
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                r.crds.push(serde_json::from_value(doc).unwrap())
            }
            ("v1", "ServiceAccount") => r.service_accounts.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => r.cluster_roles.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                r.cluster_role_bindings.push(typed(&doc))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => r.roles.push(typed(&doc)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => r.role_bindings.push(typed(&doc)),
            ("v1", "Service") => r.services.push(typed(&doc)),
            ("apps/v1", "Deployment") => r.deployments.push(typed(&doc)),
            ("v1", "Pod") => r.pods.push(typed(&doc)),
            ("edgecache.dev/v1alpha1", "EdgeCache") => r.edgecaches.push(
                serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("the sample EdgeCache does not parse: {e}")),
            ),
            ("v1", "ConfigMap") => r.config_maps.push(typed(&doc)),
            ("monitoring.coreos.com/v1", "ServiceMonitor" | "PodMonitor" | "PrometheusRule")
            | ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule") => r.others.push(doc),
            (api, kind) => panic!("unexpected object {api} {kind} in the chart"),
        }
    }
    r
}

fn is_test_hook(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get("helm.sh/hook"))
        .is_some_and(|h| h == "test")
}

fn values(name: &str) -> PathBuf {
    chart_dir().join("ci").join(name)
}

/// (apiGroup, resource, verb) triples of a rule list, with no wildcard anywhere.
fn triples(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut set = BTreeSet::new();
    for r in rules {
        let groups = r.api_groups.clone().unwrap_or_default();
        let resources = r.resources.clone().unwrap_or_default();
        assert!(
            r.non_resource_urls.is_none(),
            "no nonResourceURLs expected: {r:?}"
        );
        for x in groups.iter().chain(&resources).chain(&r.verbs) {
            assert!(!x.contains('*'), "wildcard in an RBAC rule: {r:?}");
        }
        for g in &groups {
            for res in &resources {
                for v in &r.verbs {
                    set.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    set
}

/// Exactly what edgecache-operator calls (operator/controller/src: controller.rs watches
/// EdgeCaches and owns DaemonSets/ConfigMaps/Services and watches the data-plane pods; apply.rs
/// gets and server-side applies the children and deletes the peers ConfigMap of an EdgeCache
/// no longer sharded; status.rs/reconcile.rs patch the status; context.rs records events).
fn operator_rbac() -> BTreeSet<(String, String, String)> {
    let mut want = BTreeSet::new();
    let mut add = |g: &str, r: &str, verbs: &[&str]| {
        for v in verbs {
            want.insert((g.to_string(), r.to_string(), v.to_string()));
        }
    };
    add("edgecache.dev", "edgecaches", &["get", "list", "watch"]);
    add("edgecache.dev", "edgecaches/status", &["get", "patch"]);
    add("edgecache.dev", "edgecaches/finalizers", &["update"]);
    let owned = ["get", "list", "watch", "create", "patch"];
    add("apps", "daemonsets", &owned);
    add("", "configmaps", &owned);
    add("", "services", &owned);
    // The peers ConfigMap goes when sharding is turned off.
    add("", "configmaps", &["delete"]);
    add("", "serviceaccounts", &["get", "create", "patch"]);
    // Each EdgeCache's NetworkPolicy (dataplane.networkPolicy, on by default).
    add(
        "networking.k8s.io",
        "networkpolicies",
        &["get", "create", "patch"],
    );
    // The admin token Secret: read, created once when missing, never changed, and watched by
    // the operator's label (metadata only). The TLS and CA Secrets an EdgeCache names: read by
    // name, not watched.
    add("", "secrets", &["get", "list", "watch", "create"]);
    add("events.k8s.io", "events", &["create", "patch"]);
    // controller.rs/reconcile.rs: the DaemonSets' FailedCreate Events (core/v1), watched and
    // listed by field selector.
    add("", "events", &["list", "watch"]);
    // purge.rs: EdgeCachePurges watched, their status written, deleted past the retention;
    // the data-plane pods listed and watched (their IPs and readiness).
    add(
        "edgecache.dev",
        "edgecachepurges",
        &["get", "list", "watch", "delete"],
    );
    add("edgecache.dev", "edgecachepurges/status", &["get", "patch"]);
    add("", "pods", &["list", "watch"]);
    want
}

/// runAsNonRoot, RuntimeDefault seccomp, no privilege escalation, ALL capabilities dropped and
/// none added, read-only root filesystem.
fn assert_hardened(what: &str, pod: &PodSpec) {
    let psc = pod.security_context.clone().unwrap_or_default();
    assert_eq!(psc.run_as_non_root, Some(true), "{what}: pod runAsNonRoot");
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "{what}: pod seccomp"
    );
    assert!(
        psc.run_as_user.is_some_and(|u| u != 0),
        "{what}: pod runAsUser"
    );
    assert_ne!(pod.host_network, Some(true), "{what}: hostNetwork");
    assert_ne!(pod.host_pid, Some(true), "{what}: hostPID");
    for v in pod.volumes.iter().flatten() {
        assert!(v.host_path.is_none(), "{what}: hostPath volume {}", v.name);
    }
    let containers: Vec<&Container> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .collect();
    for c in containers {
        let sc = c
            .security_context
            .clone()
            .unwrap_or_else(|| panic!("{what}/{}: no securityContext", c.name));
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{what}/{}",
            c.name
        );
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "{what}/{}",
            c.name
        );
        assert_ne!(sc.privileged, Some(true), "{what}/{}", c.name);
        let caps = sc.capabilities.clone().unwrap_or_default();
        assert_eq!(
            caps.drop,
            Some(vec!["ALL".to_string()]),
            "{what}/{}",
            c.name
        );
        assert!(
            caps.add.unwrap_or_default().is_empty(),
            "{what}/{}: capabilities added",
            c.name
        );
        if let Some(s) = &sc.seccomp_profile {
            assert_eq!(s.type_, "RuntimeDefault", "{what}/{}", c.name);
        }
        let image = c.image.clone().unwrap_or_default();
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "{what}/{}: image {image} must carry a pinned tag",
            c.name
        );
    }
}

/// The chart's copies of the CRDs are in `files/`, which `templates/crds.yaml` renders (not
/// `crds/`: Helm installs those once and never upgrades them).
#[test]
fn chart_crd_is_identical_to_the_repo_crd() {
    for file in CRD_FILES {
        let repo = std::fs::read(repo_root().join("crds").join(file)).unwrap();
        let chart = std::fs::read(chart_dir().join("files").join(file)).unwrap_or_else(|e| {
            panic!("charts/edgecache/files/{file}: {e}; copy crds/{file} there")
        });
        assert!(
            repo == chart,
            "charts/edgecache/files/{file} differs from crds/{file}: \
             cp crds/{file} charts/edgecache/files/"
        );
    }
    assert!(
        !chart_dir().join("crds").exists(),
        "charts/edgecache/crds/ is installed once and never upgraded by Helm: the CRD is a template"
    );
}

/// The repo's CRD as the chart renders it: the chart's labels, and the keep policy.
fn without_chart_metadata(crd: &CustomResourceDefinition) -> CustomResourceDefinition {
    let mut c = crd.clone();
    c.metadata.labels = None;
    c.metadata.annotations = None;
    c
}

fn repo_crds() -> Vec<CustomResourceDefinition> {
    CRD_FILES
        .iter()
        .map(|f| {
            yaml_serde::from_str(
                &std::fs::read_to_string(repo_root().join("crds").join(f)).unwrap(),
            )
            .unwrap()
        })
        .collect()
}

#[test]
fn the_crd_is_installed_and_upgraded_as_a_template_and_kept_on_uninstall() {
    let Some(helm) = helm_or_skip() else { return };
    // Rendered without --include-crds: it is an ordinary template, so `helm upgrade` applies it.
    let out = chart::run(
        &helm,
        &[
            "template",
            "ec",
            &chart_dir().to_string_lossy(),
            "--namespace",
            NS,
        ],
    );
    assert!(out.success, "{}", out.stderr);
    let crds: Vec<Value> = documents(&out.stdout)
        .unwrap()
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 2, "the CRDs are templates, on by default");
    let crds: Vec<CustomResourceDefinition> = crds
        .into_iter()
        .map(|c| serde_json::from_value(c).unwrap())
        .collect();
    assert_eq!(
        crds.iter().map(without_chart_metadata).collect::<Vec<_>>(),
        repo_crds()
    );
    for crd in &crds {
        let meta = &crd.metadata;
        assert_eq!(
            meta.annotations.as_ref().unwrap()["helm.sh/resource-policy"],
            "keep",
            "crds.keep (default true): helm uninstall leaves the CRD and every EdgeCache"
        );
        assert_eq!(
            meta.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "Helm"
        );
    }

    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["crds.keep=false"],
    );
    assert_eq!(r.crds.len(), 2);
    assert!(
        r.crds.iter().all(|c| c.metadata.annotations.is_none()),
        "no keep policy"
    );
    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["crds.enabled=false"],
    );
    assert!(
        r.crds.is_empty(),
        "crds.enabled=false: the CRD is managed elsewhere"
    );
}

#[test]
fn values_schema_is_strict() {
    let text = std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    fn walk(path: &str, v: &Value) {
        if let Some(props) = v.get("properties").and_then(Value::as_object) {
            assert_eq!(
                v.get("additionalProperties"),
                Some(&Value::Bool(false)),
                "{path}: an object with properties must set additionalProperties: false"
            );
            for (k, p) in props {
                walk(&format!("{path}.{k}"), p);
            }
        }
        if let Some(items) = v.get("items") {
            walk(&format!("{path}[]"), items);
        }
    }
    walk("values", &schema);
    // Every top-level key of values.yaml is described by the schema, and commented.
    let values_text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    let values: yaml_serde::Mapping = yaml_serde::from_str(&values_text).unwrap();
    let lines: Vec<&str> = values_text.lines().collect();
    for k in values.keys() {
        let k = k.as_str().unwrap();
        assert!(
            schema["properties"].get(k).is_some(),
            "values.{k} not in the schema"
        );
        let at = lines
            .iter()
            .position(|l| l.starts_with(&format!("{k}:")))
            .unwrap();
        assert!(
            at > 0 && lines[at - 1].trim_start().starts_with('#'),
            "values.yaml: {k} has no comment above it"
        );
    }
}

/// Issue 35 defect 12: `helm upgrade --reuse-values` takes the last release's computed values
/// as they were, so a key a newer chart adds (and its strict schema requires) is missing and
/// the upgrade fails. `--reset-then-reuse-values` starts from the new chart's values.yaml and
/// puts the release's own values over it: that works when every key the schema requires has
/// a default in values.yaml, and when the docs say so (docs/install-kubernetes.md) and the helm
/// in use knows the flag.
#[test]
fn upgrades_reset_then_reuse_values_and_every_required_key_has_a_default() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    let values: Value =
        yaml_serde::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    fn walk(path: &str, schema: &Value, values: &Value) {
        for key in schema["required"].as_array().into_iter().flatten() {
            let key = key.as_str().unwrap();
            assert!(
                values.get(key).is_some(),
                "{path}.{key} is required by values.schema.json but has no default in \
                 values.yaml: `helm upgrade --reset-then-reuse-values` would fail"
            );
        }
        for (k, sub) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(v) = values.get(k).filter(|v| v.is_object()) {
                walk(&format!("{path}.{k}"), sub, v);
            }
        }
    }
    walk("values", &schema, &values);

    // The upgrade the docs show (the install page; the README links to it).
    let page = "docs/install-kubernetes.md";
    let guide = std::fs::read_to_string(repo_root().join(page)).unwrap();
    let upgrades: Vec<&str> = guide
        .lines()
        .filter(|l| l.contains("helm upgrade"))
        .collect();
    assert!(!upgrades.is_empty(), "{page} shows an upgrade");
    for l in &upgrades {
        let words: Vec<&str> = l.split_whitespace().collect();
        assert!(
            !words.contains(&"--reuse-values"),
            "{page}: `{l}`: --reuse-values keeps the old chart's values and breaks the first \
             upgrade that adds a required value"
        );
    }
    assert!(
        upgrades
            .iter()
            .any(|l| l.contains("--reset-then-reuse-values")),
        "{page}: {upgrades:?}"
    );
    let Some(helm) = helm_or_skip() else {
        return;
    };
    let help = std::process::Command::new(&helm)
        .args(["upgrade", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("--reset-then-reuse-values"),
        "{} does not know --reset-then-reuse-values (Helm 3.14 or later does)",
        helm.display()
    );
}

#[test]
fn helm_lint_passes_for_every_ci_values_file() {
    let Some(helm) = helm_or_skip() else { return };
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let files = ci_values();
    assert!(
        files.len() >= 3,
        "charts/edgecache/ci needs several values files"
    );
    let out = chart::run(&helm, &["lint", "--strict", &chart]);
    assert!(out.success, "helm lint:\n{}{}", out.stdout, out.stderr);
    for f in files {
        let f = f.to_string_lossy();
        let out = chart::run(&helm, &["lint", "--strict", &chart, "--values", &f]);
        assert!(
            out.success,
            "helm lint -f {f}:\n{}{}",
            out.stdout, out.stderr
        );
    }
}

#[test]
fn every_ci_values_file_renders_into_valid_typed_objects() {
    let Some(helm) = helm_or_skip() else { return };
    let repo_crds = repo_crds();
    for file in ci_values() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let r = render(&helm, std::slice::from_ref(&file), &[]);

        let crds: Vec<_> = r.crds.iter().map(without_chart_metadata).collect();
        assert_eq!(crds, repo_crds, "{name}: the chart's CRDs");
        assert_eq!(r.deployments.len(), 1, "{name}: one operator Deployment");
        let d = &r.deployments[0];
        let spec = d.spec.clone();
        assert_eq!(
            spec.replicas,
            Some(1),
            "{name}: one replica (no leader election)"
        );
        let pod = spec.template.spec.clone().unwrap();
        assert_hardened(&format!("{name}: operator"), &pod);
        let c = &pod.containers[0];
        assert_eq!(c.args.as_ref().unwrap()[0], "run", "{name}: operator args");
        for probe in [&c.liveness_probe, &c.readiness_probe, &c.startup_probe] {
            assert!(probe.is_some(), "{name}: operator probes");
        }
        assert_eq!(
            c.readiness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/readyz")
        );
        let limits = c.resources.as_ref().and_then(|r| r.limits.clone()).unwrap();
        assert!(limits.contains_key("memory"), "{name}: a memory limit");

        // The ServiceAccount the pod runs as exists (when the chart creates it) and is bound.
        let sa = pod.service_account_name.clone().unwrap();
        assert!(
            r.service_accounts
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(&sa)),
            "{name}: ServiceAccount {sa}"
        );

        // RBAC: exactly what the operator calls, bound to its ServiceAccount; the test hook's
        // roles are read-only.
        let op_roles: Vec<(String, Vec<PolicyRule>, Option<String>)> = r
            .cluster_roles
            .iter()
            .filter(|x| !is_test_hook(&x.metadata))
            .map(|x| {
                (
                    "ClusterRole".into(),
                    x.rules.clone().unwrap_or_default(),
                    None,
                )
            })
            .chain(
                r.roles
                    .iter()
                    .filter(|x| !is_test_hook(&x.metadata))
                    .map(|x| {
                        (
                            "Role".into(),
                            x.rules.clone().unwrap_or_default(),
                            x.metadata.namespace.clone(),
                        )
                    }),
            )
            .collect();
        assert_eq!(op_roles.len(), 1, "{name}: one operator (Cluster)Role");
        let (kind, rules, role_ns) = &op_roles[0];
        assert_eq!(triples(rules), operator_rbac(), "{name}: operator RBAC");
        let watch_ns = c
            .args
            .as_ref()
            .unwrap()
            .iter()
            .find_map(|a| a.strip_prefix("--namespace=").map(str::to_string));
        match &watch_ns {
            Some(ns) => {
                assert_eq!(
                    kind, "Role",
                    "{name}: one watched namespace needs only a Role"
                );
                assert_eq!(role_ns.as_deref(), Some(ns.as_str()));
                let b = r
                    .role_bindings
                    .iter()
                    .find(|b| !is_test_hook(&b.metadata))
                    .unwrap();
                assert_eq!(b.metadata.namespace.as_deref(), Some(ns.as_str()));
                assert_eq!(b.subjects.as_ref().unwrap()[0].name, sa);
                assert_eq!(
                    b.subjects.as_ref().unwrap()[0].namespace.as_deref(),
                    Some(NS)
                );
            }
            None => {
                assert_eq!(kind, "ClusterRole", "{name}");
                let b = r
                    .cluster_role_bindings
                    .iter()
                    .find(|b| !is_test_hook(&b.metadata))
                    .unwrap();
                assert_eq!(b.subjects.as_ref().unwrap()[0].name, sa);
                assert_eq!(
                    b.subjects.as_ref().unwrap()[0].namespace.as_deref(),
                    Some(NS)
                );
            }
        }
        for role in r.cluster_roles.iter().filter(|x| is_test_hook(&x.metadata)) {
            for (_, _, verb) in triples(role.rules.as_deref().unwrap_or_default()) {
                assert!(
                    ["get", "list", "watch"].contains(&verb.as_str()),
                    "{name}: test RBAC"
                );
            }
        }
        for role in r.roles.iter().filter(|x| is_test_hook(&x.metadata)) {
            for (_, _, verb) in triples(role.rules.as_deref().unwrap_or_default()) {
                assert!(
                    ["get", "list", "watch"].contains(&verb.as_str()),
                    "{name}: test RBAC"
                );
            }
        }

        // The metrics Service selects the operator pod and targets its admin port.
        let pod_labels = spec.template.metadata.clone().unwrap().labels.unwrap();
        for s in &r.services {
            let sel = s.spec.clone().unwrap().selector.unwrap();
            assert!(
                sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
                "{name}: Service selector {sel:?} does not select the operator pod"
            );
            let port = &s.spec.clone().unwrap().ports.unwrap()[0];
            let target = port.target_port.clone().unwrap();
            let admin = c
                .ports
                .as_ref()
                .unwrap()
                .iter()
                .find(|p| p.name.as_deref() == Some("admin"));
            assert!(admin.is_some(), "{name}: admin port");
            assert_eq!(
                target,
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("admin".into())
            );
        }

        // The `helm test` pod: hardened, waits for the CRD and the operator.
        for p in &r.pods {
            assert!(
                is_test_hook(&p.metadata),
                "{name}: a bare Pod that is not a test hook"
            );
            let ps = p.spec.clone().unwrap();
            assert_hardened(&format!("{name}: test pod"), &ps);
            let args: Vec<String> = ps
                .init_containers
                .iter()
                .flatten()
                .chain(ps.containers.iter())
                .flat_map(|c| c.args.clone().unwrap_or_default())
                .collect();
            assert!(
                args.iter()
                    .any(|a| a == "customresourcedefinition/edgecaches.edgecache.dev")
            );
            assert!(args.iter().any(|a| a.starts_with("deployment/")));
        }

        for ec in &r.edgecaches {
            assert_eq!(
                ec.metadata.namespace.as_deref(),
                Some(NS),
                "{name}: sample namespace"
            );
        }
    }
}

#[test]
fn defaults_render_the_documented_objects_only() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("default-values.yaml")], &[]);
    assert!(
        r.others.is_empty(),
        "ServiceMonitor, PodMonitor, PrometheusRule and NodeFeatureRule are off by default"
    );
    assert!(
        r.config_maps.is_empty(),
        "the Grafana dashboard is off by default"
    );
    assert!(r.edgecaches.is_empty(), "the sample is off by default");
    assert_eq!(r.services.len(), 1, "the metrics Service is on by default");
    assert_eq!(r.pods.len(), 1, "the helm test pod is on by default");
    let c = &r.deployments[0]
        .spec
        .clone()
        .template
        .spec
        .unwrap()
        .containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("ghcr.io/edgecache/edgecache-operator:0.1.0")
    );
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
}

/// The operator container's args.
fn operator_args(r: &Rendered) -> Vec<String> {
    r.deployments[0]
        .spec
        .clone()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default()
}

/// Defect 8 of issue 35: the data-plane image an EdgeCache runs when it names none, and the
/// pull Secrets of a private registry, are chart values the operator gets as flags.
#[test]
fn the_dataplane_image_and_pull_secrets_reach_the_operator() {
    let Some(helm) = helm_or_skip() else { return };
    let flags = |sets: &[&str]| -> Vec<String> {
        let r = render(&helm, &[values("default-values.yaml")], sets);
        operator_args(&r)
            .into_iter()
            .filter(|a| a.starts_with("--dataplane-image") || a.starts_with("--image-pull-secret"))
            .collect()
    };
    assert!(flags(&[]).is_empty(), "unset: the operator's own default");
    assert_eq!(
        flags(&[
            "dataplane.image=registry.example/edge/dataplane:1.2",
            "dataplane.imagePullSecrets={regcred,other}"
        ]),
        [
            "--dataplane-image=registry.example/edge/dataplane:1.2",
            "--image-pull-secret=regcred",
            "--image-pull-secret=other"
        ]
    );
}

/// Issue 35 defect 9: by default the operator is told its namespace and pod labels, so each
/// EdgeCache's pods get a NetworkPolicy that lets it reach their admin port; off, neither the
/// flags nor the RBAC for NetworkPolicies.
#[test]
fn the_operators_namespace_and_labels_reach_it_for_the_network_policy() {
    let Some(helm) = helm_or_skip() else {
        return;
    };
    let r = render(&helm, &[], &[]);
    let args = operator_args(&r);
    assert!(
        args.contains(&format!("--operator-namespace={NS}")),
        "{args:?}"
    );
    // The labels that select the operator's pods (its Deployment's selector).
    let selector = r.deployments[0]
        .spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default();
    for (k, v) in &selector {
        assert!(
            args.contains(&format!("--operator-pod-label={k}={v}")),
            "{args:?}"
        );
    }
    assert!(
        args.iter()
            .filter(|a| a.starts_with("--operator-pod-label="))
            .count()
            >= 2
    );
    let r = render(
        &helm,
        &[],
        &["dataplane.networkPolicyAdminCIDRs={10.213.0.0/24,fd00::/64}"],
    );
    let args = operator_args(&r);
    for cidr in ["10.213.0.0/24", "fd00::/64"] {
        assert!(
            args.contains(&format!("--admin-from-cidr={cidr}")),
            "{args:?}"
        );
    }
    let r = render(&helm, &[], &["dataplane.networkPolicy=false"]);
    assert!(
        !operator_args(&r)
            .iter()
            .any(|a| a.starts_with("--operator-"))
    );
    let rules = triples(&r.cluster_roles[0].rules.clone().unwrap_or_default());
    assert!(!rules.iter().any(|(_, res, _)| res == "networkpolicies"));
}

/// Issue 35 defect 6: the operator's admin endpoint (its probes, /metrics) listens on the IPv6
/// wildcard (dual-stack; the operator falls back to 0.0.0.0 without IPv6), not on IPv4 only.
#[test]
fn the_operators_admin_endpoint_listens_on_both_families() {
    let Some(helm) = helm_or_skip() else {
        return;
    };
    let args = operator_args(&render(&helm, &[], &["operator.adminPort=8181"]));
    assert!(
        args.contains(&"--admin-addr=[::]:8181".to_string()),
        "{args:?}"
    );
}

#[test]
fn allowed_host_paths_reach_the_operator() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("default-values.yaml")], &[]);
    let flags: Vec<String> = operator_args(&r)
        .into_iter()
        .filter(|a| a.starts_with("--allowed-host-path="))
        .collect();
    assert_eq!(
        flags,
        [
            "--allowed-host-path=/var/cache/edgecache",
            "--allowed-host-path=/mnt"
        ]
    );
    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["dataplane.allowedHostPaths={/data/edgecache}"],
    );
    let flags: Vec<String> = operator_args(&r)
        .into_iter()
        .filter(|a| a.starts_with("--allowed-host-path"))
        .collect();
    assert_eq!(flags, ["--allowed-host-path=/data/edgecache"]);
}

#[test]
fn full_values_render_the_optional_objects() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("full-values.yaml")], &[]);
    let kinds: BTreeSet<&str> = r
        .others
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["NodeFeatureRule", "PodMonitor", "ServiceMonitor"])
    );
    let nfr = r
        .others
        .iter()
        .find(|d| d["kind"] == "NodeFeatureRule")
        .unwrap();
    let labels: BTreeSet<String> = nfr["spec"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["labels"].as_object().unwrap().keys().cloned())
        .collect();
    assert_eq!(
        labels,
        BTreeSet::from([
            edgecache_api::v1alpha1::NVME_LABEL.to_string(),
            edgecache_api::v1alpha1::ADQ_LABEL.to_string()
        ])
    );
    let sm = r
        .others
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .unwrap();
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(r.edgecaches.len(), 1);
    let ec = &r.edgecaches[0];
    assert_eq!(ec.spec.steering.mode, edgecache_api::SteeringMode::Queue);
    let pod = r.deployments[0].spec.clone().template.spec.unwrap();
    assert!(pod.tolerations.is_some() && pod.affinity.is_some() && pod.node_selector.is_some());
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
}

/// Defect 1 of issue 35: `ci/full-values.yaml` set `steering.mode: queue` without
/// `network.hostNetwork: true`, which the CRD's own CEL rule refuses. Every EdgeCache any CI
/// values file renders satisfies the CRD's CEL rules (kube's `cel` feature, offline).
#[test]
fn every_ci_values_files_edgecache_satisfies_the_crd_cel_rules() {
    let Some(helm) = helm_or_skip() else { return };
    for file in ci_values() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let r = render(&helm, std::slice::from_ref(&file), &[]);
        for ec in &r.edgecaches {
            if let Err(e) = kube::core::cel::validate_cel(ec) {
                panic!(
                    "{name}: the API server would refuse EdgeCache {:?}: {e:?}",
                    ec.metadata.name
                );
            }
        }
    }
}

/// Defect 1 of issue 35: with `sample.enabled`, the sample EdgeCache was a plain object of the
/// release whose templates also create the CRDs, and `helm install` failed on a fresh cluster
/// with "no matches for kind EdgeCache" (Helm maps every object before it creates any). It is a
/// `post-install` hook: created once the release's objects, the CRDs among them, exist.
#[test]
fn the_sample_edgecache_is_created_after_the_crds() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("full-values.yaml")], &[]);
    assert_eq!(r.edgecaches.len(), 1);
    let annotations = r.edgecaches[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert_eq!(
        annotations.get("helm.sh/hook").map(String::as_str),
        Some("post-install"),
        "{annotations:?}"
    );
}

#[test]
fn the_repo_sample_renders_through_the_chart() {
    // The docs' sample (operator/controller/examples/edgecache.yaml) as sample.spec.
    let Some(helm) = helm_or_skip() else { return };
    let text =
        std::fs::read_to_string(repo_root().join("operator/controller/examples/edgecache.yaml"))
            .unwrap();
    let sample: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let values = yaml_serde::to_string(&yaml_serde::Value::Mapping(
        yaml_serde::Mapping::from_iter([(
            "sample".into(),
            yaml_serde::Value::Mapping(yaml_serde::Mapping::from_iter([
                ("enabled".into(), true.into()),
                ("name".into(), "web".into()),
                ("spec".into(), sample["spec"].clone()),
            ])),
        )]),
    ))
    .unwrap();
    let dir = std::env::temp_dir().join(format!("ec-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sample-values.yaml");
    std::fs::write(&file, values).unwrap();
    let r = render(&helm, &[file], &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(r.edgecaches.len(), 1);
    let want: EdgeCache = yaml_serde::from_str(&text).unwrap();
    assert_eq!(r.edgecaches[0].spec, want.spec);
}

#[test]
fn bad_values_are_rejected_with_a_clear_message() {
    let Some(helm) = helm_or_skip() else { return };
    let dir = repo_root().join("e2e/fixtures/chart-bad-values");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{}: bad values fixtures", dir.display());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let expect: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: ").map(str::to_string))
            .collect();
        assert!(!expect.is_empty(), "{}: no `# expect:` line", f.display());
        let out = template(&helm, NS, std::slice::from_ref(&f), &[]);
        assert!(
            !out.success,
            "{}: helm template accepted bad values",
            f.display()
        );
        for e in &expect {
            assert!(
                out.stderr.contains(e.as_str()),
                "{}: expected {e:?} in the error, got:\n{}",
                f.display(),
                out.stderr
            );
        }
    }
}

#[test]
fn kind_values_use_the_locally_loaded_image() {
    // e2e/run.sh installs with ci/kind-values.yaml after `kind load docker-image ...:dev`.
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("kind-values.yaml")], &[]);
    let c = &r.deployments[0]
        .spec
        .clone()
        .template
        .spec
        .unwrap()
        .containers[0];
    assert_eq!(c.image.as_deref(), Some("edgecache-operator:dev"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let run_sh = std::fs::read_to_string(repo_root().join("e2e/run.sh")).unwrap();
    assert!(run_sh.contains("ci/kind-values.yaml") && run_sh.contains("kind load docker-image"));
}

#[test]
fn the_helm_test_without_metrics_fails_unless_the_operator_is_ready() {
    // With the metrics Service off, the test cannot read /readyz; it must still fail when no
    // operator replica is ready. `kubectl get -o jsonpath` exits 0 on an empty result, so only a
    // wait for readyReplicas to equal the Deployment's replicas (with a timeout) asserts it.
    let Some(helm) = helm_or_skip() else { return };
    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["metrics.service.enabled=false"],
    );
    let replicas = r.deployments[0].spec.replicas.unwrap();
    let pod = r.pods[0].spec.clone().unwrap();
    assert_eq!(pod.containers.len(), 1);
    let args = pod.containers[0].args.clone().unwrap();
    assert_eq!(args[0], "wait", "{args:?}");
    assert!(
        args.contains(&format!(
            "--for=jsonpath={{.status.readyReplicas}}={replicas}"
        )),
        "{args:?}"
    );
    assert!(args.iter().any(|a| a.starts_with("--timeout=")), "{args:?}");
    let deployment = format!(
        "deployment/{}",
        r.deployments[0].metadata.name.clone().unwrap()
    );
    assert!(args.contains(&deployment), "{args:?}");
}

/// The chart's PodMonitor, if it renders one.
fn pod_monitor(r: &Rendered) -> Option<&Value> {
    r.others.iter().find(|d| d["kind"] == "PodMonitor")
}

#[test]
fn the_pod_monitor_scrapes_the_data_plane_pods_of_every_edgecache() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("default-values.yaml")], &[]);
    assert!(
        pod_monitor(&r).is_none(),
        "off by default, like the ServiceMonitor"
    );

    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &[
            "metrics.podMonitor.enabled=true",
            "metrics.podMonitor.labels.release=prometheus",
        ],
    );
    let pm = pod_monitor(&r).expect("a PodMonitor");
    assert_eq!(pm["metadata"]["labels"]["release"], "prometheus");
    // The data-plane pods, as the operator labels them (not the operator's own pod).
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        serde_json::json!({
            "app.kubernetes.io/name": "edgecache",
            "app.kubernetes.io/component": "dataplane",
            "app.kubernetes.io/managed-by": "edgecache-operator",
        })
    );
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(
        ep["port"], "admin",
        "the data plane's admin port serves /metrics"
    );
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(pm["spec"]["namespaceSelector"]["any"], true);
    // The labels the dashboard and the alerts group by, besides namespace and pod.
    assert_eq!(
        ep["relabelings"],
        serde_json::json!([
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
            {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
             "targetLabel": "edgecache"},
        ])
    );

    // Watching one namespace: the EdgeCaches, and so their pods, are there only.
    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &[
            "metrics.podMonitor.enabled=true",
            "operator.watchNamespace=edge",
        ],
    );
    let pm = pod_monitor(&r).unwrap();
    assert_eq!(
        pm["spec"]["namespaceSelector"],
        serde_json::json!({"matchNames": ["edge"]})
    );
}

/// The chart's PrometheusRule, if it renders one.
fn prometheus_rule(r: &Rendered) -> Option<&Value> {
    r.others.iter().find(|d| d["kind"] == "PrometheusRule")
}

/// The alerts of a PrometheusRule by name.
fn rules_by_name(rule: &Value) -> std::collections::BTreeMap<String, Value> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| (r["alert"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

#[test]
fn the_grafana_dashboard_renders_only_when_enabled_with_the_sidecars_label() {
    let Some(helm) = helm_or_skip() else { return };
    let file = chart_dir().join("dashboards").join("edgecache.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "edgecache-overview");

    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["metrics.grafanaDashboard.enabled=true"],
    );
    assert_eq!(r.config_maps.len(), 1, "one dashboard ConfigMap");
    let cm = &r.config_maps[0];
    assert_eq!(cm.metadata.name.as_deref(), Some("ec-edgecache-dashboard"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some(NS));
    let labels = cm.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["grafana_dashboard"], "1",
        "the sidecar's default label"
    );
    assert_eq!(labels["app.kubernetes.io/part-of"], "edgecache");
    let data = cm.data.clone().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["edgecache.json"],
        "the one dashboard file"
    );
    let shipped: Value = serde_json::from_str(&data["edgecache.json"]).unwrap();
    assert_eq!(shipped, dashboard, "the file, unchanged by the template");

    // Another sidecar label and value, namespace and folder annotation (ci/monitoring-values.yaml).
    let r = render(&helm, &[values("monitoring-values.yaml")], &[]);
    let cm = &r.config_maps[0];
    assert_eq!(cm.metadata.namespace.as_deref(), Some("monitoring"));
    let labels = cm.metadata.labels.clone().unwrap();
    assert_eq!(labels["grafana_dashboard_edge"], "yes");
    assert!(!labels.contains_key("grafana_dashboard"));
    assert_eq!(
        cm.metadata.annotations.clone().unwrap()["grafana_folder"],
        "EdgeCache"
    );
}

#[test]
fn the_alerts_render_only_when_enabled_with_their_thresholds() {
    let Some(helm) = helm_or_skip() else { return };
    let r = render(&helm, &[values("default-values.yaml")], &[]);
    assert!(prometheus_rule(&r).is_none(), "off by default");

    let r = render(
        &helm,
        &[values("default-values.yaml")],
        &["metrics.prometheusRule.enabled=true"],
    );
    let rule = prometheus_rule(&r).expect("a PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], NS);
    assert_eq!(
        rule["metadata"]["labels"]["app.kubernetes.io/part-of"],
        "edgecache"
    );
    let alerts = rules_by_name(rule);
    assert_eq!(
        alerts.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "EdgeCacheDiskErrors",
            "EdgeCacheHitRatioLow",
            "EdgeCacheMemoryNearLimit",
            "EdgeCacheNodeNotReady",
            "EdgeCacheOriginErrors",
            "EdgeCachePurgesNotConfirmed",
        ]
    );
    for (name, a) in &alerts {
        assert!(a["labels"]["severity"].is_string(), "{name}: a severity");
        assert!(a["annotations"]["summary"].is_string(), "{name}: a summary");
        // Prometheus's own template, not Helm's, fills in the labels.
        assert!(
            a["annotations"]["summary"]
                .as_str()
                .unwrap()
                .contains("{{ $labels."),
            "{name}: {}",
            a["annotations"]["summary"]
        );
    }
    let hit = &alerts["EdgeCacheHitRatioLow"];
    let expr = hit["expr"].as_str().unwrap();
    assert!(expr.trim_end().ends_with("< 0.5"), "{expr}");
    assert!(expr.contains("[15m]") && expr.contains("> 1)"), "{expr}");
    assert_eq!(hit["for"], "15m");

    // ci/monitoring-values.yaml: its release label, a team label on every alert, its hit-ratio
    // threshold and window, the memory alert off.
    let r = render(&helm, &[values("monitoring-values.yaml")], &[]);
    let rule = prometheus_rule(&r).unwrap();
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let alerts = rules_by_name(rule);
    assert_eq!(alerts.len(), 5);
    assert!(!alerts.contains_key("EdgeCacheMemoryNearLimit"));
    for (name, a) in &alerts {
        assert_eq!(a["labels"]["team"], "edge", "{name}");
    }
    let hit = &alerts["EdgeCacheHitRatioLow"];
    let expr = hit["expr"].as_str().unwrap();
    assert!(expr.trim_end().ends_with("< 0.3"), "{expr}");
    assert!(expr.contains("[30m]") && expr.contains("> 5)"), "{expr}");
    assert_eq!(hit["for"], "30m");
    assert_eq!(hit["labels"]["severity"], "warning");
    // Every alert off: no PrometheusRule (a rule group needs rules).
    let mut off = vec!["metrics.prometheusRule.enabled=true".to_string()];
    for a in [
        "hitRatio",
        "originErrors",
        "diskErrors",
        "notReady",
        "purgesNotConfirmed",
        "memoryNearLimit",
    ] {
        off.push(format!("metrics.prometheusRule.{a}.enabled=false"));
    }
    let off: Vec<&str> = off.iter().map(String::as_str).collect();
    let r = render(&helm, &[values("default-values.yaml")], &off);
    assert!(prometheus_rule(&r).is_none());
}

/// The dashboard file is one Grafana can lay out and the sidecar can load: unique panel ids,
/// panels within the 24-column grid without overlapping, every panel on the data-source
/// variable with unique query refIds, and every data-plane query filtered by the dashboard's
/// variables (namespace, edgecache, node), which the PodMonitor's labels fill.
#[test]
fn the_dashboard_is_laid_out_and_filtered_by_its_variables() {
    let file = chart_dir().join("dashboards").join("edgecache.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let variables: BTreeSet<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        variables,
        BTreeSet::from(["datasource", "namespace", "edgecache", "node"])
    );
    let mut ids = BTreeSet::new();
    let mut cells: Vec<(u64, u64, u64, u64, String)> = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap().to_string();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "{title}: id repeated"
        );
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24 && w > 0 && h > 0, "{title}: {g}");
        for (x2, y2, w2, h2, other) in &cells {
            let apart = x + w <= *x2 || x2 + w2 <= x || y + h <= *y2 || y2 + h2 <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        cells.push((x, y, w, h, title.clone()));
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(p["description"].is_string(), "{title}: a description");
        let mut refs = BTreeSet::new();
        for t in p["targets"].as_array().unwrap() {
            assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}: refId");
            let expr = t["expr"].as_str().unwrap();
            // Each selector of a data-plane metric carries the three filters.
            for part in expr.split("edgecache_dataplane_").skip(1) {
                let after =
                    part.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
                let selector = after.strip_prefix('{').unwrap_or_else(|| {
                    panic!("{title}: a data-plane metric without a selector in {expr}")
                });
                for filter in [
                    r#"namespace=~"$namespace""#,
                    r#"edgecache=~"$edgecache""#,
                    r#"node=~"$node""#,
                ] {
                    assert!(
                        selector.starts_with(filter) || selector.contains(&format!(", {filter}")),
                        "{title}: {filter} missing in {expr}"
                    );
                }
            }
        }
    }
}

/// Issue 33: the operator's traces are chart values it gets as flags; unset, none.
#[test]
fn the_trace_endpoint_reaches_the_operator() {
    let Some(helm) = helm_or_skip() else { return };
    let flags = |values_file: &str| -> Vec<String> {
        operator_args(&render(&helm, &[values(values_file)], &[]))
            .into_iter()
            .filter(|a| a.starts_with("--trace"))
            .collect()
    };
    assert!(flags("default-values.yaml").is_empty(), "off by default");
    assert_eq!(
        flags("full-values.yaml"),
        [
            "--trace-endpoint=http://otel-collector.observability:4318",
            "--trace-sample=0.1"
        ]
    );
    // Not an OTLP/HTTP URL: refused by the schema.
    let out = template(
        &helm,
        NS,
        &[values("default-values.yaml")],
        &["operator.tracing.endpoint=https://otel:4318"],
    );
    assert!(!out.success);
    assert!(
        out.stderr.contains("/operator/tracing/endpoint"),
        "{}",
        out.stderr
    );
}
