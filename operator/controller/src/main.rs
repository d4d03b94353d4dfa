use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// The EdgeCache operator.
#[derive(Parser)]
#[command(name = "edgecache-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the cluster of the current kubeconfig or service account.
    Run(RunArgs),
    /// Print the CRDs as one YAML stream (for `kubectl apply -f -`), or the one named:
    /// `edgecaches` (crds/edgecache.dev_edgecaches.yaml) or `edgecachepurges`
    /// (crds/edgecache.dev_edgecachepurges.yaml).
    Crd {
        /// The resource's plural name (default: every CRD).
        plural: Option<String>,
    },
    /// Print, offline, every object the operator would apply for an EdgeCache manifest.
    Render {
        /// The EdgeCache manifest (`-` for standard input).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print one of the operator's reference pages (markdown, as committed in docs/reference/),
    /// or write them all.
    Reference {
        /// Which page.
        #[arg(required_unless_present = "write")]
        page: Option<edgecache_operator::reference::Page>,
        /// Write every page into this directory instead (scripts/reference-docs.sh).
        #[arg(long, value_name = "DIR", conflicts_with = "page")]
        write: Option<PathBuf>,
    },
}

/// What the operator allows every EdgeCache (set at install; `render` takes the same flags).
#[derive(clap::Args)]
struct PolicyArgs {
    /// A node directory a storage.hostPath may be equal to or below (repeat for several).
    #[arg(long = "allowed-host-path", value_name = "DIR",
          default_values_t = edgecache_operator::validate::host_path::DEFAULT_ALLOWED_HOST_PATHS.map(String::from))]
    allowed_host_paths: Vec<String>,
    /// The data-plane image of an EdgeCache that names none (default: this release's image).
    #[arg(long = "dataplane-image", value_name = "IMAGE")]
    dataplane_image: Option<String>,
    /// A Secret, in each EdgeCache's namespace, the data-plane pods pull their image with
    /// (repeat for several).
    #[arg(long = "image-pull-secret", value_name = "NAME")]
    image_pull_secrets: Vec<String>,
    /// The operator's own namespace: with it, each EdgeCache gets a NetworkPolicy that lets the
    /// operator's pods (--operator-pod-label) reach the data-plane pods' admin port and anyone
    /// their serving ports.
    #[arg(long = "operator-namespace", value_name = "NAMESPACE")]
    operator_namespace: Option<String>,
    /// A label of the operator's pods, KEY=VALUE (repeat for several), for that NetworkPolicy.
    #[arg(long = "operator-pod-label", value_name = "KEY=VALUE")]
    operator_pod_labels: Vec<String>,
    /// An address range that may reach the data-plane pods' admin port too, for that
    /// NetworkPolicy (repeat for several; e.g. the nodes' subnet).
    #[arg(long = "admin-from-cidr", value_name = "CIDR")]
    admin_from_cidrs: Vec<String>,
}

impl PolicyArgs {
    fn policy(&self) -> anyhow::Result<edgecache_operator::validate::Policy> {
        let allowed = edgecache_operator::validate::AllowedHostPaths::new(&self.allowed_host_paths)
            .map_err(|why| anyhow::anyhow!("--allowed-host-path: {why}"))?;
        for cidr in &self.admin_from_cidrs {
            edgecache_operator::validate::check_cidr(cidr)
                .map_err(|why| anyhow::anyhow!("--admin-from-cidr: {why}"))?;
        }
        let mut pod_labels = std::collections::BTreeMap::new();
        for l in &self.operator_pod_labels {
            let (k, v) = l
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| anyhow::anyhow!("--operator-pod-label {l}: not KEY=VALUE"))?;
            pod_labels.insert(k.to_string(), v.to_string());
        }
        let admin_clients = match self.operator_namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(_) if pod_labels.is_empty() => {
                anyhow::bail!("--operator-namespace needs at least one --operator-pod-label")
            }
            Some(ns) => Some(edgecache_operator::validate::AdminClients {
                namespace: ns.to_string(),
                pod_labels,
                cidrs: self.admin_from_cidrs.clone(),
            }),
            None => None,
        };
        Ok(edgecache_operator::validate::Policy {
            allowed_host_paths: allowed,
            dataplane_image: self.dataplane_image.clone().filter(|i| !i.is_empty()),
            image_pull_secrets: self.image_pull_secrets.clone(),
            admin_clients,
        })
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "EDGECACHE_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the admin endpoint (/metrics, /healthz, /readyz). `[::]` is dual-stack, and
    /// falls back to 0.0.0.0 where the node has no IPv6.
    #[arg(long, env = "EDGECACHE_ADMIN_ADDR", default_value = "[::]:8080",
          value_parser = edgecache_api::dataplane::parse_socket_addr)]
    admin_addr: std::net::SocketAddr,
    /// EdgeCaches reconciled at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// How long an EdgeCachePurge is kept after its creation before it is deleted (delivered
    /// or not); a node away longer than this no longer gets it when it comes back.
    #[arg(long, env = "EDGECACHE_PURGE_RETENTION", default_value = "24h")]
    purge_retention: edgecache_api::Duration,
    /// Bound on one admin call to a data-plane pod (connect, answer and body).
    #[arg(long, default_value = "5s")]
    pod_call_timeout: edgecache_api::Duration,
    /// OTLP/HTTP endpoint for traces of the reconciles, http://host:port (spans are POSTed to
    /// its /v1/traces) or http://host:port/path. Default: unset, no traces.
    #[arg(long, env = "EDGECACHE_TRACE_ENDPOINT")]
    trace_endpoint: Option<String>,
    /// The share of reconciles traced, from 0 to 1.
    #[arg(long, env = "EDGECACHE_TRACE_SAMPLE", default_value_t = 1.0, value_parser = parse_share)]
    trace_sample: f64,
    /// Log filter (RUST_LOG syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
    #[command(flatten)]
    policy: PolicyArgs,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a share from 0 to 1")),
    }
}

fn main() -> ExitCode {
    // The process-wide rustls provider (the workspace's only one), before a kube client is built.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args).map(|()| String::new()),
        Command::Crd { plural: None } => {
            edgecache_operator::crd::all_crds_yaml().map_err(anyhow::Error::from)
        }
        Command::Crd {
            plural: Some(plural),
        } => edgecache_operator::crd::crd_yaml_of(&plural).map_err(anyhow::Error::from),
        Command::Reference {
            page: Some(page), ..
        } => {
            edgecache_operator::reference::render(page, Cli::command()).map_err(anyhow::Error::from)
        }
        Command::Reference {
            page: None,
            write: Some(dir),
        } => edgecache_operator::reference::write_all(&dir, &Cli::command()).map(|_| String::new()),
        Command::Reference {
            page: None,
            write: None,
        } => Err(anyhow::anyhow!("name a page or --write DIR")),
        Command::Render { file, policy } => policy.policy().and_then(|policy| {
            let text = read(&file)?;
            edgecache_operator::render::render(&text, &policy).map_err(anyhow::Error::from)
        }),
    };
    match result {
        Ok(text) => {
            // Not print!: a closed pipe (`crd | head`) is the reader's choice, not a panic.
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing to stdout: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            let root = e.root_cause().to_string();
            if root != e.to_string() {
                eprintln!("  caused by: {root}");
            }
            ExitCode::FAILURE
        }
    }
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::io::Read as _;
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    use anyhow::Context as _;

    let policy = args.policy.policy()?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log).context("--log")?)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        // Listened for before anything else, and raced against the start: the API server may be
        // slow to answer, and a SIGTERM must stop the process in every state.
        let stop = StopSignals::listen().context("listening for SIGTERM")?;
        let stop = futures_util::FutureExt::shared(Box::pin(stop.recv()));
        let (ctx, ready, admin) = tokio::select! {
            started = start(&args, policy) => started?,
            () = stop.clone() => {
                tracing::info!("stopped while starting");
                return Ok(());
            }
        };
        let purge_cfg = edgecache_operator::purge::Config {
            namespace: args.namespace.clone(),
            concurrency: args.concurrency,
            settings: edgecache_operator::purge::Settings {
                retention: args.purge_retention.get(),
                call_timeout: args.pod_call_timeout.get(),
                ..Default::default()
            },
            ..Default::default()
        };
        let cfg = edgecache_operator::controller::Config {
            namespace: args.namespace,
            concurrency: args.concurrency,
            ..Default::default()
        };
        // One signal stops both controllers; each finishes its in-flight work.
        tokio::join!(
            edgecache_operator::controller::run(ctx.clone(), cfg, ready, stop.clone()),
            edgecache_operator::purge::run(ctx, purge_cfg, stop),
        );
        admin.abort();
        Ok(())
    })
}

/// The client (after one call to the API server), the context, the readiness flag and the
/// admin endpoint.
async fn start(
    args: &RunArgs,
    policy: edgecache_operator::validate::Policy,
) -> anyhow::Result<(
    std::sync::Arc<edgecache_operator::context::Context>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<()>,
)> {
    use anyhow::Context as _;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    let config = kube::Config::infer()
        .await
        .context("no Kubernetes client configuration (kubeconfig or in-cluster)")?;
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .with_context(|| format!("building a Kubernetes client for {url}"))?;
    // One call before anything starts: an unreachable or refusing API server is an exit with
    // its cause (the kubelet restarts the pod with back-off), not a silent retry loop.
    let version = client
        .apiserver_version()
        .await
        .with_context(|| format!("cannot reach the Kubernetes API server at {url}"))?;
    tracing::info!(%url, version = %version.git_version, "connected to the API server");
    let mut ctx = edgecache_operator::context::Context::new(client);
    ctx.policy = policy;
    ctx.watch_namespace = args.namespace.clone();
    ctx.scrape_timeout = Some(std::time::Duration::from_secs(2));
    ctx.tracer = edgecache_trace::Tracer::start(
        &edgecache_operator::trace::settings(args.trace_endpoint.clone(), args.trace_sample),
        ctx.metrics.trace.clone(),
    )
    .context("--trace-endpoint")?;
    let ctx = Arc::new(ctx);
    let ready = Arc::new(AtomicBool::new(false));
    let listener = edgecache_operator::admin::bind(args.admin_addr)
        .await
        .with_context(|| format!("binding the admin address {}", args.admin_addr))?;
    tracing::info!(addr = %args.admin_addr, "admin endpoint listening");
    let admin = tokio::spawn(edgecache_operator::admin::serve(
        listener,
        ctx.clone(),
        ready.clone(),
    ));
    Ok((ctx, ready, admin))
}

/// SIGTERM (the kubelet stopping the pod) and SIGINT (Ctrl-C), listened for from the start of
/// the runtime. In a container the operator is PID 1, for which the kernel drops a signal whose
/// action is the default: a SIGTERM before a handler existed was lost, and the kubelet killed the
/// pod only at the end of its grace period (30 s; seen on a real cluster for a pod stopped as it
/// started, `e2e/tests/control_plane.rs`).
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        tracing::info!("shutdown requested; finishing in-flight reconciliations");
    }
}
