//! Scenarios that change the chart's release itself (issue 35 §2): `helm upgrade` to a chart whose
//! CRD schema changed, and `helm uninstall` with and without `crds.keep`. They upgrade, uninstall
//! and install again the release `edgecache` in `edgecache-system` that the other scenarios run
//! against (the CRDs are cluster-wide and belong to that release: another release cannot install
//! them), so `scripts/cluster-tier.sh` runs them alone, one at a time, after `kind.rs` and before
//! `control_plane.rs` (whose API server restart the cluster is slow to recover from), with the
//! helm binary in `EDGECACHE_HELM`. Each leaves the release as the tier installed it
//! (the chart with `charts/edgecache/values-local.yaml`), whatever happened. Without
//! `EDGECACHE_HELM`, or without a cluster, each prints `SKIPPED: ...` and passes; a plain
//! `cargo test` does not run them (`test = false`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use edgecache_api::v1alpha1::EdgeCache;
use edgecache_e2e::cluster::{OPERATOR_NAMESPACE, eventually, operator_pods, scenario};
use edgecache_e2e::scenarios::edgecache;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};

const RELEASE: &str = "edgecache";
const CRDS: [&str; 2] = ["edgecaches.edgecache.dev", "edgecachepurges.edgecache.dev"];
const POLL: Duration = Duration::from_millis(500);
const WITHIN: Duration = Duration::from_secs(120);
/// The field the changed chart's CRD adds to `spec` (no EdgeCache of the real CRD has it).
const PROBE: &str = "e2eUpgradeProbe";

/// The helm binary (`EDGECACHE_HELM`, set by scripts/cluster-tier.sh), or None.
fn helm_binary() -> Option<String> {
    let path = std::env::var("EDGECACHE_HELM").ok()?;
    Path::new(&path).exists().then_some(path)
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/edgecache")
}

/// `helm ARGS`, off the async runtime: its output (stdout then stderr), or an error with it.
async fn helm(args: Vec<String>) -> anyhow::Result<String> {
    let binary = helm_binary().context("EDGECACHE_HELM is not set")?;
    let shown = args.join(" ");
    let out = tokio::task::spawn_blocking(move || Command::new(binary).args(&args).output())
        .await?
        .context("running helm")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "helm {shown}: {}\n{text}", out.status);
    Ok(text)
}

/// `helm upgrade --install` of `chart` as the tier installs it (values-local.yaml, `--wait`),
/// with `extra` arguments.
async fn install(chart: &Path, extra: &[&str]) -> anyhow::Result<String> {
    let values = self::chart().join("values-local.yaml");
    let mut args: Vec<String> = ["upgrade", "--install", RELEASE]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(chart.display().to_string());
    args.extend(["-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "3m", "-f"].map(String::from));
    args.push(values.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    helm(args).await
}

async fn uninstall() -> anyhow::Result<String> {
    let args = [
        "uninstall",
        RELEASE,
        "-n",
        OPERATOR_NAMESPACE,
        "--wait",
        "--timeout",
        "3m",
    ];
    helm(args.map(String::from).to_vec()).await
}

/// `body`, then the release put back as the tier installed it, whatever `body` did.
async fn restoring(body: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let result = body.await;
    let restored = install(&chart(), &[]).await;
    result?;
    restored.map(|_| ())
}

/// [`scenario`] where helm is at hand (`EDGECACHE_HELM`); otherwise the SKIPPED line.
async fn helm_scenario<F, Fut>(name: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    if helm_binary().is_none() {
        println!("SKIPPED: EDGECACHE_HELM is not set (scripts/cluster-tier.sh sets it)");
        return;
    }
    scenario(name, body).await;
}

/// The EdgeCache CRD as served, as JSON.
async fn served_crd(client: &Client) -> anyhow::Result<Value> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(CRDS[0])
        .await?;
    Ok(serde_json::to_value(crd)?)
}

/// The schema of `spec.PROBE` in the served EdgeCache CRD, if it has one.
fn probe_schema(crd: &Value) -> Option<&Value> {
    crd.pointer(&format!(
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/{PROBE}"
    ))
}

/// A copy of the chart in `dir` whose EdgeCache CRD has an optional string `spec.PROBE` and a
/// changed description of `spec`.
fn changed_chart(dir: &Path) -> anyhow::Result<PathBuf> {
    let copy = dir.join("edgecache");
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart())
        .arg(&copy)
        .status()?;
    ensure!(status.success(), "cp -r the chart: {status}");
    let file = copy.join("files/edgecache.dev_edgecaches.yaml");
    let mut crd: Value = yaml_serde::from_str(&std::fs::read_to_string(&file)?)?;
    let spec = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .context("the CRD's spec schema")?;
    spec["description"] = json!("The EdgeCache's spec (changed by the upgrade scenario).");
    spec["properties"][PROBE] = json!({
        "type": "string",
        "description": "A field only the upgrade scenario's chart has.",
    });
    // As JSON (which YAML includes): a YAML 1.2 writer leaves `off` unquoted, which the YAML 1.1
    // of Helm and the API server reads as a boolean.
    std::fs::write(&file, serde_json::to_string_pretty(&crd)?)?;
    Ok(copy)
}

/// The API of EdgeCaches as untyped objects (fields the Rust type lacks are kept).
fn untyped(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<EdgeCache>(&()))
}

/// An EdgeCache using the probe field, paused (it needs no pods), as the API server stores it:
/// a dry run, or a create.
async fn with_probe(client: &Client, ns: &str, dry_run: bool) -> anyhow::Result<DynamicObject> {
    let mut obj = serde_json::to_value(edgecache(ns, "probe", json!({"paused": true})))?;
    obj["spec"][PROBE] = json!("hello");
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let obj: DynamicObject = serde_json::from_value(obj)?;
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    Ok(untyped(client, ns).create(&params, &obj).await?)
}

fn probe_value(obj: &DynamicObject) -> Option<&str> {
    obj.data.pointer(&format!("/spec/{PROBE}"))?.as_str()
}

/// Issue 35 §2: `helm upgrade` to a chart whose CRD schema changed (an optional field added to
/// `spec`, its description changed) upgrades the served CRD, since the chart ships the CRDs as
/// templates: before, the API server drops the field from an EdgeCache (pruning); after, it
/// keeps it, and the operator reconciles such an EdgeCache. The chart as it is, upgraded again,
/// takes the field away.
#[tokio::test]
async fn helm_upgrade_to_a_changed_crd_schema_upgrades_the_crd() {
    helm_scenario("crd-upgrade", |client, ns| async move {
        let before = served_crd(&client).await?;
        ensure!(
            probe_schema(&before).is_none(),
            "the served CRD already has {PROBE}"
        );
        let pruned = with_probe(&client, &ns, true).await?;
        ensure!(
            probe_value(&pruned).is_none(),
            "{PROBE} kept before the upgrade"
        );
        let dir = tempfile::tempdir()?;
        let changed = changed_chart(dir.path())?;
        restoring(async {
            install(&changed, &[]).await?;
            let after = served_crd(&client).await?;
            let schema = probe_schema(&after).context("the upgraded CRD has no spec.{PROBE}")?;
            ensure!(schema["type"] == "string", "{PROBE}: {schema}");
            let generations = [&before, &after].map(|c| c.pointer("/metadata/generation").cloned());
            ensure!(
                generations[0] != generations[1],
                "the CRD's generation: {generations:?}"
            );
            // The API server takes up a changed schema within a moment of the write.
            eventually(
                "an EdgeCache with the new field kept",
                WITHIN,
                POLL,
                || async {
                    let obj = with_probe(&client, &ns, true).await?;
                    Ok(probe_value(&obj).is_some().then_some(()))
                },
            )
            .await?;
            let created = with_probe(&client, &ns, false).await?;
            ensure!(probe_value(&created) == Some("hello"), "{PROBE} not stored");
            // The operator reads it (its type has no such field) and reports it Paused.
            let api = Api::<EdgeCache>::namespaced(client.clone(), &ns);
            eventually(
                "the EdgeCache reconciled (Paused)",
                WITHIN,
                POLL,
                || async {
                    let ec = api.get("probe").await?;
                    let st = ec.status.as_ref();
                    let paused = st
                        .and_then(|s| s.condition("Progressing"))
                        .is_some_and(|c| c.reason == "Paused");
                    Ok(
                        (paused
                            && st.and_then(|s| s.observed_generation) == ec.metadata.generation)
                            .then_some(()),
                    )
                },
            )
            .await?;
            Ok(())
        })
        .await?;
        let restored = served_crd(&client).await?;
        ensure!(
            probe_schema(&restored).is_none(),
            "the chart as it is did not take {PROBE} away"
        );
        println!(
            "helm upgrade added spec.{PROBE} to the served CRD, and the chart as it is took it away"
        );
        Ok(())
    })
    .await;
}

/// Whether each of the chart's CRDs exists.
async fn crds_present(client: &Client) -> anyhow::Result<[bool; 2]> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    Ok([
        api.get_opt(CRDS[0]).await?.is_some(),
        api.get_opt(CRDS[1]).await?.is_some(),
    ])
}

/// The uid of DaemonSet `name` in `ns`, once it exists.
async fn daemon_set_uid(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let api = Api::<DaemonSet>::namespaced(client.clone(), ns);
    eventually(&format!("DaemonSet {name}"), WITHIN, POLL, || async {
        Ok(api.get_opt(name).await?.and_then(|d| d.uid()))
    })
    .await
}

/// Issue 35 §2: `helm uninstall` follows `crds.keep`. With `crds.keep: true` (the default) the
/// CRDs stay, and with them an EdgeCache and its DaemonSet (same uids); installed again, the
/// release adopts the kept CRDs and its new operator reconciles EdgeCaches. Upgraded with
/// `crds.keep=false` and uninstalled, the CRDs go, every EdgeCache with them and, through the
/// garbage collector, their DaemonSets.
#[tokio::test]
async fn helm_uninstall_follows_crds_keep() {
    helm_scenario("uninstall", |client, ns| async move {
        let api = Api::<EdgeCache>::namespaced(client.clone(), &ns);
        let kept = api
            .create(&PostParams::default(), &edgecache(&ns, "kept", json!({})))
            .await?;
        let ds_uid = daemon_set_uid(&client, &ns, "kept").await?;
        restoring(async {
            // crds.keep: true, as installed.
            let out = uninstall().await?;
            println!("helm uninstall (crds.keep true): {}", out.trim());
            eventually("the operator's pods gone", WITHIN, POLL, || async {
                Ok(operator_pods(&client).await?.is_empty().then_some(()))
            })
            .await?;
            ensure!(crds_present(&client).await? == [true, true], "a CRD went");
            let still = api.get("kept").await?;
            ensure!(still.uid() == kept.uid(), "the EdgeCache was replaced");
            ensure!(
                daemon_set_uid(&client, &ns, "kept").await? == ds_uid,
                "the DaemonSet was replaced"
            );
            install(&chart(), &[]).await?;
            ensure!(
                api.get("kept").await?.uid() == kept.uid(),
                "the EdgeCache was replaced"
            );
            api.create(&PostParams::default(), &edgecache(&ns, "after", json!({})))
                .await?;
            let after_uid = daemon_set_uid(&client, &ns, "after").await?;
            println!("installed again: the kept CRDs adopted, a new EdgeCache reconciled");

            // crds.keep=false.
            install(&chart(), &["--set", "crds.keep=false"]).await?;
            let crd = served_crd(&client).await?;
            ensure!(
                crd.pointer("/metadata/annotations/helm.sh~1resource-policy")
                    .is_none(),
                "crds.keep=false left the resource policy: {:?}",
                crd.pointer("/metadata/annotations")
            );
            let started = std::time::Instant::now();
            let out = uninstall().await?;
            println!("helm uninstall (crds.keep false): {}", out.trim());
            eventually("both CRDs gone", WITHIN, POLL, || async {
                Ok((crds_present(&client).await? == [false, false]).then_some(()))
            })
            .await?;
            let crds_gone = started.elapsed();
            let dss = Api::<DaemonSet>::namespaced(client.clone(), &ns);
            eventually("the DaemonSets collected", WITHIN, POLL, || async {
                let left: Vec<String> = dss
                    .list(&Default::default())
                    .await?
                    .into_iter()
                    .filter_map(|d| d.uid())
                    .filter(|u| *u == ds_uid || *u == after_uid)
                    .collect();
                Ok(left.is_empty().then_some(()))
            })
            .await?;
            println!(
                "the CRDs went {:.1} s and the DaemonSets {:.1} s after helm uninstall began",
                crds_gone.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        })
        .await?;
        ensure!(
            crds_present(&client).await? == [true, true],
            "the CRDs were not installed again"
        );
        Ok(())
    })
    .await;
}
