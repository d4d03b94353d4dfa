//! The kind end-to-end harness: a client for the current KUBECONFIG (or the reason there is
//! none), one namespace per test, `eventually`, requests through the API server's pod proxy and
//! diagnostics when a test fails.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use edgecache_api::v1alpha1::EdgeCache;
use http_body_util::BodyExt as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client, ResourceExt as _};

/// Namespace `e2e/run.sh` installs the chart into.
pub const OPERATOR_NAMESPACE: &str = "edgecache-system";
/// Label on every test namespace (so `e2e/run.sh` can list and delete leftovers).
pub const TEST_LABEL: &str = "edgecache.dev/e2e";
/// The label selector of the operator's pods (the chart's Deployment).
pub const OPERATOR_PODS: &str = "app.kubernetes.io/name=edgecache-operator";

/// The operator's pods.
pub async fn operator_pods(client: &Client) -> anyhow::Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels(OPERATOR_PODS))
        .await?
        .items)
}

/// The lines every operator pod logged at or after `since` (by the kubelet's timestamp of each
/// line, which the API server's `sinceTime` rounds to the second), one pod after the other.
pub async fn operator_log_since(client: &Client, since: Timestamp) -> anyhow::Result<String> {
    let api = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let params = LogParams {
        // A second early: the API server rounds sinceTime to the second.
        since_time: Some(since.saturating_sub(SignedDuration::from_secs(1))?),
        timestamps: true,
        ..LogParams::default()
    };
    let mut out = String::new();
    for pod in operator_pods(client).await? {
        let log = api.logs(&pod.name_any(), &params).await?;
        for line in log.lines() {
            let Some((at, text)) = line.split_once(' ') else {
                continue;
            };
            if at.parse::<Timestamp>().is_ok_and(|at| at >= since) {
                out.push_str(text);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// A reachable kind cluster with the chart installed.
pub struct Kind {
    pub client: Client,
    pub context: String,
}

/// The cluster of the current KUBECONFIG, or why the kind tests cannot run. Only a context
/// named `kind-*` is used (set `EDGECACHE_E2E_ANY_CONTEXT=1` to allow another one): these tests
/// create and delete namespaces.
pub async fn connect() -> Result<Kind, String> {
    let kubeconfig = match kube::config::Kubeconfig::read() {
        Ok(k) => k,
        Err(e) => return Err(format!("no kubeconfig: {e}")),
    };
    let context = kubeconfig.current_context.clone().unwrap_or_default();
    if !context.starts_with("kind-") && std::env::var_os("EDGECACHE_E2E_ANY_CONTEXT").is_none() {
        return Err(format!(
            "current context {context:?} is not a kind cluster (kind-*); \
             set EDGECACHE_E2E_ANY_CONTEXT=1 to use it anyway"
        ));
    }
    let options = kube::config::KubeConfigOptions::default();
    let config = match tokio::time::timeout(
        Duration::from_secs(5),
        kube::Config::from_custom_kubeconfig(kubeconfig, &options),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(format!("kubeconfig context {context}: {e}")),
        Err(_) => return Err(format!("kubeconfig context {context}: timed out")),
    };
    let url = config.cluster_url.to_string();
    // The process-wide rustls provider (the workspace's only one), before the client is built.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = Client::try_from(config).map_err(|e| format!("client for {url}: {e}"))?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(
        Duration::from_secs(5),
        namespaces.list(&ListParams::default().limit(1)),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("API server {url} ({context}): {e}")),
        Err(_) => {
            return Err(format!(
                "API server {url} ({context}) did not answer in 5 s"
            ));
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let operator: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let installed = crds
        .get_opt("edgecaches.edgecache.dev")
        .await
        .ok()
        .flatten()
        .is_some()
        && operator
            .list(&ListParams::default().labels("app.kubernetes.io/name=edgecache-operator"))
            .await
            .is_ok_and(|l| !l.items.is_empty());
    if !installed {
        return Err(format!(
            "{context} is reachable but the edgecache chart is not installed in \
             {OPERATOR_NAMESPACE}; run e2e/run.sh"
        ));
    }
    Ok(Kind { client, context })
}

/// Run one kind scenario: connect (or print the SKIPPED line and return), create a namespace,
/// run `body`, and on failure print diagnostics before failing. The namespace is deleted
/// afterwards unless `EDGECACHE_E2E_KEEP=1`.
pub async fn scenario<F, Fut>(name: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let kind = match connect().await {
        Ok(k) => k,
        Err(reason) => {
            println!("SKIPPED: no kind cluster ({reason})");
            return;
        }
    };
    let ns = match create_namespace(&kind.client, name).await {
        Ok(ns) => ns,
        Err(e) => panic!(
            "{name}: cannot create a namespace in {}: {e:#}",
            kind.context
        ),
    };
    let result = body(kind.client.clone(), ns.clone()).await;
    if let Err(e) = &result {
        eprintln!("{name} failed: {e:#}");
        eprintln!("{}", diagnostics(&kind.client, &ns).await);
    }
    if std::env::var_os("EDGECACHE_E2E_KEEP").is_none() {
        let api: Api<Namespace> = Api::all(kind.client.clone());
        let _ = api.delete(&ns, &DeleteParams::background()).await;
    }
    if let Err(e) = result {
        panic!("{name}: {e:#}");
    }
}

/// A fresh namespace `ec-e2e-NAME-SUFFIX` allowing privileged pods (the data plane needs
/// capabilities), labelled for cleanup.
pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<String> {
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() % 100_000)
        .unwrap_or(0);
    let short: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    let ns_name = format!("ec-e2e-{}-{suffix}", short.trim_matches('-'));
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns_name,
            "labels": {
                TEST_LABEL: "true",
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": "privileged",
            }
        }
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {ns_name}"))?;
    Ok(ns_name)
}

/// Whether `pod`'s Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Poll `check` every `poll` until it returns `Some`, or fail after `timeout` with the last
/// error or "still not" message.
pub async fn eventually<T, F, Fut>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "condition not met".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() >= timeout {
            bail!("{what}: not within {timeout:?} (last: {last})");
        }
        tokio::time::sleep(poll).await;
    }
}

/// A response through the API server's pod proxy.
#[derive(Debug)]
pub struct ProxyResponse {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl ProxyResponse {
    /// The `Cache-Status` header, or "".
    pub fn cache_status(&self) -> String {
        self.headers
            .get("cache-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }
}

/// GET `path` on `pod:port` through `/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH`.
pub async fn proxy_get(
    client: &Client,
    ns: &str,
    pod: &str,
    port: u16,
    path: &str,
) -> anyhow::Result<ProxyResponse> {
    let uri = format!(
        "/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{}",
        path.trim_start_matches('/')
    );
    let req = http::Request::get(&uri)
        .body(Vec::new())
        .context("building the proxy request")?;
    let resp = tokio::time::timeout(Duration::from_secs(30), client.send(req.map(Into::into)))
        .await
        .map_err(|_| anyhow!("GET {uri}: timed out"))?
        .with_context(|| format!("GET {uri}"))?;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .with_context(|| format!("reading {uri}"))?
        .to_bytes()
        .to_vec();
    Ok(ProxyResponse {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// The value of a Prometheus info metric's label, e.g. `engine` of
/// `edgecache_dataplane_io_engine_info{engine="uring"} 1`.
pub fn info_label(metrics: &str, metric: &str, label: &str) -> Option<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{'))
        .find_map(|l| {
            let needle = format!("{label}=\"");
            let start = l.find(&needle)? + needle.len();
            let end = l[start..].find('"')? + start;
            Some(l[start..end].to_string())
        })
}

/// Everything useful about a namespace after a failure: EdgeCaches with status, DaemonSets,
/// pods with their node and conditions, events, and the tail of each pod's log.
pub async fn diagnostics(client: &Client, ns: &str) -> String {
    let mut out = format!("---- diagnostics of namespace {ns} ----\n");
    let ecs: Api<EdgeCache> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = ecs.list(&ListParams::default()).await {
        for ec in list {
            out.push_str(&format!(
                "EdgeCache {} generation {:?} status {}\n",
                ec.name_any(),
                ec.metadata.generation,
                serde_json::to_string(&ec.status).unwrap_or_default()
            ));
        }
    }
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = dss.list(&ListParams::default()).await {
        for ds in list {
            out.push_str(&format!(
                "DaemonSet {} status {}\n",
                ds.name_any(),
                serde_json::to_string(&ds.status).unwrap_or_default()
            ));
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list {
            let name = p.name_any();
            let st = p.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "Pod {name} node {:?} phase {:?} conditions {} containers {}\n",
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                st.phase,
                serde_json::to_string(&st.conditions).unwrap_or_default(),
                serde_json::to_string(&st.container_statuses).unwrap_or_default()
            ));
            let logs = pods
                .logs(
                    &name,
                    &LogParams {
                        tail_lines: Some(40),
                        ..LogParams::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            out.push_str(&format!("  log of {name}:\n"));
            for l in logs.lines() {
                out.push_str(&format!("    {l}\n"));
            }
        }
    }
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list {
            out.push_str(&format!(
                "Event {} {} {}: {}\n",
                e.type_.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            ));
        }
    }
    out
}

/// Node names carrying every label in `labels` (`key=value`).
pub async fn nodes_with(
    client: &Client,
    labels: &BTreeMap<&str, &str>,
) -> anyhow::Result<Vec<String>> {
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut names: Vec<String> = nodes
        .list(&ListParams::default().labels(&selector.join(",")))
        .await?
        .into_iter()
        .map(|n| n.name_any())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_label_reads_the_label_of_an_info_metric() {
        let m = "# HELP x\nedgecache_dataplane_io_engine_info{engine=\"uring\"} 1\n\
                 edgecache_dataplane_steering_info{mode=\"cpu\"} 1\n";
        assert_eq!(
            info_label(m, "edgecache_dataplane_io_engine_info", "engine").as_deref(),
            Some("uring")
        );
        assert_eq!(
            info_label(m, "edgecache_dataplane_steering_info", "mode").as_deref(),
            Some("cpu")
        );
        assert_eq!(info_label(m, "edgecache_dataplane_steering", "mode"), None);
    }
}
