//! The start-up sequence of `serve`, and the shutdown that ends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use edgecache_api::{DataplaneConfig, SteeringMode};
use edgecache_observe::request_log::RequestLog;
use edgecache_store::Store;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::admin::{self, Admin};
use crate::clock::Clock;
use crate::coalesce::Coalescer;
use crate::metrics::{self, MemoryParts, Metrics, StoreCollector};
use crate::node::Node;
use crate::server::WorkerListeners;
use crate::shared::Shared;
use edgecache_edge::client_caps::PerIpCaps;
use edgecache_edge::tls::{Tls, TlsMetrics};
use edgecache_fleet::sharding::Sharding;

use crate::supervisor::{self, Supervisor, SupervisorMetrics, TlsGroup};

pub fn serve(cfg: DataplaneConfig) -> anyhow::Result<()> {
    let cpus =
        edgecache_host::worker_cpus(cfg.workers.count).context("cannot find the CPUs to run on")?;
    let workers = cpus.len();
    let limit = match cfg.memory.limit {
        Some(l) => Some(l.bytes()),
        None => edgecache_host::read_memory_limit().unwrap_or_else(|e| {
            warn!("cannot read the cgroup memory limit ({e}); planning as if unlimited");
            None
        }),
    };
    let plan = edgecache_host::plan_memory(limit, &crate::contract::memory(&cfg.memory), workers);
    info!(workers, cpus = ?cpus, "memory plan: {plan}");
    let max_connections_per_worker = match cfg.clients.max_connections_per_worker {
        0 => usize::try_from(edgecache_host::connections_per_worker(&plan)).unwrap_or(usize::MAX),
        n => n as usize,
    };
    info!(
        max_connections_per_worker,
        max_connections_per_ip = cfg.clients.max_connections_per_ip,
        "connection caps"
    );
    // One budget in bytes for each worker's connections, of which an HTTP/2 connection takes
    // all it can hold under limits derived from it.
    let connection_budget_per_worker =
        edgecache_host::connection_budget_per_worker(max_connections_per_worker as u64);
    let http2 = edgecache_host::http2_limits(
        connection_budget_per_worker,
        &crate::contract::http2(&cfg.http2),
    );
    let http2_connection_bytes = edgecache_host::http2_connection_bytes(&http2);
    if cfg.http2.enabled && http2_connection_bytes > connection_budget_per_worker {
        bail!(
            "http2: one HTTP/2 connection can hold {http2_connection_bytes} bytes under its limits \
             ({http2:?}), more than a worker's connection budget of \
             {connection_budget_per_worker} bytes: lower http2.connectionWindow, \
             maxConcurrentStreams or maxHeaderListSize (0 derives them from the memory plan), or \
             raise clients.maxConnectionsPerWorker"
        );
    }
    let per_ip_http2 = edgecache_host::http2_connections_per_address(
        connection_budget_per_worker,
        http2_connection_bytes,
        workers,
    );
    info!(
        max_concurrent_streams = http2.max_concurrent_streams,
        http2_connections_per_ip = per_ip_http2,
        max_header_list_size = http2.max_header_list_size,
        stream_window = http2.stream_window,
        connection_window = http2.connection_window,
        connection_bytes = http2_connection_bytes,
        http2_connections_per_worker = connection_budget_per_worker / http2_connection_bytes,
        "http2 limits"
    );

    // The index reserve is shared with the connections, which take a quarter of it
    // (`edgecache_host::connections_per_worker`): the object index is bounded by the rest, and
    // what this store's index can never use goes to the RAM tier.
    let split = crate::index_budget::split(
        plan.index_reserve,
        plan.ram_tier,
        plan.ram_tier_source == edgecache_host::RamTierSource::Planned,
        // `auto`: not known before the store opens; the index keeps its whole reserve.
        cfg.storage.size.size().map_or(u64::MAX, |s| s.bytes()),
        side_tables(&cfg.storage),
    );
    if split.side_tables > 0 {
        info!(
            side_tables = split.side_tables,
            ram_tier = split.ram_tier,
            "the RAM tier gives up what the store's admission filter and reinsertion bits take"
        );
    }
    if split.given_back > 0 {
        info!(
            index_bound = split.index_bytes,
            ram_tier = split.ram_tier,
            given_back = split.given_back,
            "the index of this store needs less than its reserve: the rest goes to the RAM tier"
        );
    }
    let store = Store::open(crate::contract::store_config(
        &cfg.storage,
        split.ram_tier,
        split.index_bytes,
    ))
    .with_context(|| format!("cannot open the store in {}", cfg.storage.dir))?;
    // Every read and write buffer of a worker comes out of this budget, so in-flight bodies
    // cannot outgrow the memory plan however many clients there are.
    store.set_io_buffer_bytes_per_worker(plan.io_buffers_per_worker);
    // Purge rules survive restarts in the cache directory; a file that does not parse stops
    // the start (serving content a lost purge named would be worse).
    let purges = Arc::new(
        crate::purges::Purges::open(
            std::path::Path::new(&cfg.storage.dir),
            usize::try_from(cfg.cache.max_purge_rules).unwrap_or(usize::MAX),
            std::time::SystemTime::now(),
        )
        .with_context(|| format!("cannot read the purge rules in {}", cfg.storage.dir))?,
    );
    let stats = store.stats();
    info!(
        engine = store.engine().as_str(),
        objects = stats.objects,
        bytes = stats.bytes_used,
        dropped = stats.corrupt_dropped,
        "store open in {}",
        cfg.storage.dir
    );

    // Every in-flight part of the plan is bounded and exported (`memory_bytes{part}`).
    let memory = MemoryParts::with_store(&store);
    memory.set_bounds(&plan);
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    let metrics = Metrics::register_with(&mut registry, memory);
    registry.register_collector(Box::new(StoreCollector(store.clone())));
    metrics::register_plan(
        &mut registry,
        &metrics::PlanFacts {
            engine: store.engine().as_str(),
            workers: workers as i64,
            memory_limit: plan.limit.unwrap_or(0) as i64,
            ram_tier: split.ram_tier as i64,
            index_reserve: plan.index_reserve as i64,
        },
    );

    let listeners = edgecache_steering::bind_group(cfg.listen, workers, supervisor::BACKLOG)
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let requested = cfg.workers.steering;
    let steering = match edgecache_steering::attach(
        &listeners,
        &cpus,
        requested,
        cfg.workers.queue_offset,
        cfg.workers.steering_required,
    ) {
        Ok(s) => s,
        Err(edgecache_steering::SteeringError::Unavailable { reason, .. }) => bail!(
            "refusing to start: steering mode `{requested}` is required \
             (workers.steeringRequired: true) but unavailable: {reason}"
        ),
        Err(e) => bail!("cannot set up steering mode `{requested}`: {e}"),
    };
    // The steering crate has logged the one warning line that says why.
    if steering.fallback_reason().is_some() {
        metrics.steering_fallbacks.inc();
    }
    let mode: SteeringMode = steering.mode_in_effect();
    metrics::register_steering(&mut registry, mode);
    // TLS: the certificates must load at start; later changes that do not load keep the
    // ones in force (edgecache_edge::tls). Its listeners are a second group, steered the same way.
    let (tls, tls_group) = match cfg.tls.listen {
        Some(addr) => {
            let tls_metrics = TlsMetrics::register(&mut registry);
            let tls = Tls::new(
                &crate::contract::tls(&cfg.tls),
                cfg.http2.enabled,
                tls_metrics,
            )
            .map_err(|e| anyhow::anyhow!("tls.certificates: {e}"))?;
            let tls = Arc::new(tls);
            tls.watch_files()
                .context("cannot start the certificate reload thread")?;
            let group = edgecache_steering::bind_group(addr, workers, supervisor::BACKLOG)
                .with_context(|| format!("cannot listen on {addr} (tls.listen)"))?;
            let steering = edgecache_steering::attach(
                &group,
                &cpus,
                mode,
                cfg.workers.queue_offset,
                cfg.workers.steering_required,
            )
            .map_err(|e| anyhow::anyhow!("cannot set up steering on the TLS listeners: {e}"))?;
            info!(listen = %addr, "TLS steering mapping: {}", steering.mapping());
            (Some(tls), Some((addr, group, steering)))
        }
        None => (None, None),
    };
    let (listeners, tls_group) = match tls_group {
        Some((addr, group, steering)) => (
            listeners
                .into_iter()
                .zip(group)
                .map(|(plain, tls)| WorkerListeners {
                    plain,
                    tls: Some(tls),
                })
                .collect::<Vec<_>>(),
            Some(TlsGroup { addr, steering }),
        ),
        None => (
            listeners
                .into_iter()
                .map(|plain| WorkerListeners { plain, tls: None })
                .collect(),
            None,
        ),
    };
    let sup_metrics = SupervisorMetrics::register(&mut registry);
    info!(mode = %mode, "steering mapping: {}", steering.mapping());

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(Clock::from_env());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let token = admin::TokenSource::new(cfg.admin_access.token_file.as_deref());
    if let Some(file) = token.file()
        && token.expected() == admin::Expected::Unavailable
    {
        bail!(
            "adminAccess.tokenFile: cannot read an admin token from {} (missing or empty)",
            file.display()
        );
    }
    let admin_listener = rt
        .block_on(tokio::net::TcpListener::bind(cfg.admin))
        .with_context(|| format!("cannot listen on the admin address {}", cfg.admin))?;

    // Sharding: the peers file must be right at start; later mistakes keep the list in force.
    let sharding = match crate::contract::sharding(&cfg.sharding) {
        Some(settings) => {
            let s = Sharding::open(settings, metrics.sharding.clone())?;
            info!(
                node = s.node(),
                peers_file = %s.settings().peers_file.display(),
                "sharding on (consistent)"
            );
            Some(Arc::new(s))
        }
        None => None,
    };
    let sites = Arc::new(
        crate::sites::Sites::from_config(&crate::contract::sites(&cfg))
            .map_err(|e| anyhow::anyhow!("sites: {e}"))?,
    );
    registry.register_collector(Box::new(crate::sites::SitesCollector(sites.clone())));
    crate::compress::warn_unplanned(&sites.list, metrics.memory.encoders.bound());
    let tracer = edgecache_trace::Tracer::start(&crate::contract::tracing(&cfg), metrics.trace())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let requests = Arc::new(RequestLog::start(
        &crate::contract::access_log(&cfg.access_log),
        &cfg.cache.name,
        metrics.request_log(),
        tracer.clone(),
    ));
    let landing = Arc::new(crate::landing::Landing::default());
    let shared = Arc::new(Shared {
        settings: crate::contract::serve_settings(&cfg),
        store: store.clone(),
        metrics: metrics.clone(),
        coalescer: Arc::new(Coalescer::new(metrics.memory.coalescing_tails.clone())),
        landing: landing.clone(),
        clock: clock.clone(),
        sharding: sharding.clone(),
        purges: purges.clone(),
        sites: sites.clone(),
        requests: requests.clone(),
    });
    let node = Arc::new(Node {
        serve: shared.clone(),
        cfg: cfg.clone(),
        shutdown: shutdown_rx.clone(),
        per_ip: PerIpCaps::new(cfg.clients.max_connections_per_ip),
        connection_budget_per_worker,
        http2,
        http2_connection_bytes,
        per_ip_http2: PerIpCaps::new(per_ip_http2),
        tls,
    });
    let sup = Supervisor::start(listeners, &cpus, steering, tls_group, node, sup_metrics)?;
    metrics.ready.set(1);
    ready.store(true, Ordering::Release);
    let ckpt_store = store.clone();
    spawn_checkpointer(store.clone())?;
    let admin = Arc::new(Admin {
        registry,
        store,
        ready,
        clock,
        token,
        metrics_public: cfg.admin_access.metrics_public,
        header_timeout: cfg.clients.header_timeout.get(),
        max_connections_per_ip: cfg.clients.max_admin_connections_per_ip,
        purges,
        node: cfg.sharding.node_name.clone().unwrap_or_default(),
        sites: sites.clone(),
        landing,
        sharding: sharding.clone(),
    });
    info!(
        listen = %cfg.listen,
        tls = ?cfg.tls.listen,
        admin = %cfg.admin,
        origin = %cfg.origin.url,
        "edgecache data plane ready"
    );

    rt.block_on(async {
        let admin_task = tokio::spawn(admin::serve(admin_listener, admin, shutdown_rx.clone()));
        let sharding_task = sharding.map(|s| tokio::spawn(s.run(shutdown_rx.clone())));
        let health_task = tokio::spawn(crate::sites::run_health_checks(sites, shutdown_rx.clone()));
        let sup_task = tokio::spawn(sup.run(shutdown_rx));
        wait_for_signal().await;
        info!("shutting down: no new connections; finishing in-flight responses");
        let _ = shutdown_tx.send(true);
        let _ = admin_task.await;
        // The supervisor restarts nothing from here on, and waits for the workers to stop
        // (within the grace period); it drops the steering state last.
        let _ = sup_task.await;
        if let Some(t) = sharding_task {
            let _ = t.await;
        }
        let _ = health_task.await;
    });
    // Every worker has stopped: the last access-log lines are queued.
    requests.flush(std::time::Duration::from_secs(2));
    // ... and the last spans.
    if let Some(t) = &tracer
        && !t.flush(std::time::Duration::from_secs(2))
    {
        warn!("tracing: the last spans were not sent within 2s");
    }
    // Every worker has stopped: nothing writes. The next start restores the index from this
    // instead of scanning the disk.
    let t = std::time::Instant::now();
    match ckpt_store.checkpoint() {
        Ok(bytes) => info!(bytes, took = ?t.elapsed(), "index checkpoint written"),
        Err(e) => warn!("no index checkpoint (the next start scans the disk): {e}"),
    }
    info!("stopped");
    Ok(())
}

/// How often the running store is asked whether a checkpoint is due.
const CHECKPOINT_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// What the store's side tables will take (`edgecache_store::side_table_bytes`) for the layout
/// `storage` gets; for `size: auto` the filesystem is measured as the store will measure it (0
/// when it cannot be: the store's open then says why).
fn side_tables(storage: &edgecache_api::dataplane::StorageConfig) -> u64 {
    let cfg = crate::contract::store_config(storage, 0, 0);
    let capacity = if cfg.size_auto {
        let dir = std::path::Path::new(&storage.dir);
        let layout = std::fs::create_dir_all(dir)
            .map_err(edgecache_store::StoreError::from)
            .and_then(|()| edgecache_store::space::measure(dir))
            .and_then(|space| space.layout(&cfg));
        match layout {
            Ok(l) => l.capacity(),
            Err(_) => return 0,
        }
    } else {
        edgecache_store::Layout::plan(cfg.size).capacity()
    };
    edgecache_store::side_table_bytes(capacity, cfg.admission, cfg.reinsertion)
}

/// Checkpoint the store's index while it runs, whenever it says one is due, on a thread of its
/// own (writing the index blocks; the workers go on meanwhile), so a start after a kill reads
/// only the segments written since.
fn spawn_checkpointer(store: Arc<Store>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(CHECKPOINT_POLL);
                if !store.checkpoint_due() {
                    continue;
                }
                let t = std::time::Instant::now();
                match store.checkpoint() {
                    Ok(bytes) => info!(bytes, took = ?t.elapsed(), "index checkpoint written"),
                    Err(e) => {
                        warn!("index checkpoint failed (a start after a kill scans more): {e}")
                    }
                }
            }
        })
        .context("cannot start the checkpoint thread")?;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
