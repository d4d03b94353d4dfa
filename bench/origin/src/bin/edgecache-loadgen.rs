//! `edgecache-loadgen`: the benchmark harness's helper client.
//!
//! - `pass`: request every object `/obj/<size>/<id>` for ids `start..start+count`
//!   once over `--conns` keep-alive connections, check every body byte for byte,
//!   and report throughput and time-to-first-byte (a warm-up pass, or the miss
//!   path on a cold cache).
//! - `burst`: open `--n` connections, then send one request on each at the same
//!   instant (for the coalescing run), and report per-request latency.
//!
//! Output: one JSON object on stdout.

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use edgecache_origin::{check_body, parse_size};
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

#[derive(Parser)]
#[command(name = "edgecache-loadgen")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Fetch every object of a set once, verifying bodies.
    Pass {
        /// host:port of the server (cache or origin).
        #[arg(long)]
        target: String,
        /// Object size (4k, 100k, 1m, ...).
        #[arg(long)]
        size: String,
        /// Number of objects (ids start..start+count).
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Concurrent connections.
        #[arg(long, default_value_t = 16)]
        conns: usize,
        /// Extra query string appended to every URL (without '?').
        #[arg(long)]
        query: Option<String>,
        /// Host header to send (default: the target), e.g. the name HTTPS clients use, so that
        /// a cache whose key holds the Host is warmed for them.
        #[arg(long)]
        host: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
    /// N simultaneous requests for one URL path on N connections.
    Burst {
        #[arg(long)]
        target: String,
        /// Request path, e.g. /obj/1m/cold-1?delay_ms=100
        #[arg(long)]
        path: String,
        #[arg(long, default_value_t = 1000)]
        n: usize,
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
}

/// A pass gives up after this many failed attempts in a row (the server is gone).
const MAX_CONSECUTIVE_FAILURES: u64 = 200;

#[derive(Default)]
struct Counters {
    /// Failed attempts since the last success.
    consecutive_failures: AtomicU64,
    aborted: std::sync::atomic::AtomicBool,
    ok: AtomicU64,
    errors: AtomicU64,
    bad_status: AtomicU64,
    bad_body: AtomicU64,
    bytes: AtomicU64,
}

async fn connect(
    target: &str,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let s = TcpStream::connect(target)
        .await
        .with_context(|| format!("connect {target}"))?;
    let _ = s.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn lat_json(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    serde_json::json!({
        "n": v.len(),
        "mean_ms": mean,
        "p50_ms": percentile(&v, 50.0),
        "p90_ms": percentile(&v, 90.0),
        "p99_ms": percentile(&v, 99.0),
        "p999_ms": percentile(&v, 99.9),
        "max_ms": v.last().copied().unwrap_or(0.0),
        "min_ms": v.first().copied().unwrap_or(0.0),
    })
}

/// One request; returns (time to head, time to end, body) or an error string.
async fn one(
    send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    target: &str,
    path: &str,
) -> Result<(u16, Duration, Duration, Bytes), String> {
    let t0 = Instant::now();
    send.ready().await.map_err(|e| e.to_string())?;
    let req = Request::get(path)
        .header("host", target)
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let ttfb = t0.elapsed();
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, ttfb, t0.elapsed(), body))
}

/// Where a pass connects, and the Host it sends (the address itself when none is given).
struct Endpoint {
    target: String,
    host: Option<String>,
}

async fn pass(
    to: Endpoint,
    size_s: String,
    count: u64,
    start: u64,
    conns: usize,
    query: Option<String>,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    let Endpoint { target, host } = to;
    let host = host.unwrap_or_else(|| target.clone());
    let Some(size) = parse_size(&size_s) else {
        bail!("bad size {size_s:?}");
    };
    let next = Arc::new(AtomicU64::new(start));
    let end = start + count;
    let c = Arc::new(Counters::default());
    let t0 = Instant::now();
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut tasks = Vec::new();
    for _ in 0..conns.max(1) {
        let (next, c, target, host, size_s, query, first_error) = (
            next.clone(),
            c.clone(),
            target.clone(),
            host.clone(),
            size_s.clone(),
            query.clone(),
            first_error.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut ttfb = Vec::new();
            let mut total = Vec::new();
            let mut send = None;
            loop {
                if c.aborted.load(Ordering::Relaxed) {
                    break;
                }
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id >= end {
                    break;
                }
                let path = match &query {
                    Some(q) => format!("/obj/{size_s}/{id}?{q}"),
                    None => format!("/obj/{size_s}/{id}"),
                };
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    if send.is_none() {
                        match connect(&target).await {
                            Ok(s) => send = Some(s),
                            Err(e) => {
                                c.errors.fetch_add(1, Ordering::Relaxed);
                                note(&first_error, format!("{path}: {e:#}"));
                                if c.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
                                    >= MAX_CONSECUTIVE_FAILURES
                                {
                                    c.aborted.store(true, Ordering::Relaxed);
                                    break;
                                }
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                if attempt < 3 {
                                    continue;
                                }
                                break;
                            }
                        }
                    }
                    let Some(s) = send.as_mut() else { break };
                    match one(s, &host, &path).await {
                        Ok((status, tf, tt, body)) => {
                            c.consecutive_failures.store(0, Ordering::Relaxed);
                            ttfb.push(tf.as_secs_f64() * 1e3);
                            total.push(tt.as_secs_f64() * 1e3);
                            c.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                            if status != 200 {
                                c.bad_status.fetch_add(1, Ordering::Relaxed);
                                note(&first_error, format!("{path}: status {status}"));
                            } else if let Err(e) = check_body(size, id, &body) {
                                c.bad_body.fetch_add(1, Ordering::Relaxed);
                                note(&first_error, format!("{path}: {e}"));
                            } else {
                                c.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                        Err(e) => {
                            send = None;
                            c.errors.fetch_add(1, Ordering::Relaxed);
                            note(&first_error, format!("{path}: {e}"));
                            if c.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
                                >= MAX_CONSECUTIVE_FAILURES
                            {
                                c.aborted.store(true, Ordering::Relaxed);
                                break;
                            }
                            if attempt < 3 {
                                continue;
                            }
                            break;
                        }
                    }
                }
            }
            (ttfb, total)
        }));
    }
    let mut ttfb = Vec::new();
    let mut total = Vec::new();
    let all = async {
        for t in tasks {
            if let Ok((a, b)) = t.await {
                ttfb.extend(a);
                total.extend(b);
            }
        }
    };
    let timed_out = tokio::time::timeout(timeout, all).await.is_err();
    let secs = t0.elapsed().as_secs_f64();
    let bytes = c.bytes.load(Ordering::Relaxed);
    let fe = first_error.lock().ok().and_then(|g| g.clone());
    Ok(serde_json::json!({
        "kind": "pass",
        "target": target,
        "size": size,
        "count": count,
        "ok": c.ok.load(Ordering::Relaxed),
        "errors": c.errors.load(Ordering::Relaxed),
        "bad_status": c.bad_status.load(Ordering::Relaxed),
        "bad_body": c.bad_body.load(Ordering::Relaxed),
        "timed_out": timed_out,
        "aborted": c.aborted.load(Ordering::Relaxed),
        "seconds": secs,
        "bytes": bytes,
        "req_per_s": c.ok.load(Ordering::Relaxed) as f64 / secs,
        "mb_per_s": bytes as f64 / secs / 1e6,
        "ttfb": lat_json(ttfb),
        "latency": lat_json(total),
        "first_error": fe,
    }))
}

fn note(slot: &std::sync::Mutex<Option<String>>, msg: String) {
    if let Ok(mut g) = slot.lock()
        && g.is_none()
    {
        *g = Some(msg);
    }
}

async fn burst(
    target: String,
    path: String,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    // Expected body, if the path is /obj/<size>/<id>.
    let expect = path
        .split('?')
        .next()
        .and_then(|p| p.strip_prefix("/obj/"))
        .and_then(|r| r.split_once('/'))
        .and_then(|(s, id)| parse_size(s).map(|s| (s, id.to_owned())));
    let mut conns = Vec::with_capacity(n);
    let mut connect_errors = 0u64;
    for _ in 0..n {
        match connect(&target).await {
            Ok(s) => conns.push(s),
            Err(_) => connect_errors += 1,
        }
    }
    let go = Arc::new(tokio::sync::Notify::new());
    let ready = Arc::new(tokio::sync::Barrier::new(conns.len() + 1));
    let mut tasks = Vec::new();
    for mut s in conns {
        let (go, ready, path, target) = (go.clone(), ready.clone(), path.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let notified = go.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            ready.wait().await;
            notified.await;
            one(&mut s, &target, &path).await
        }));
    }
    ready.wait().await;
    let t0 = Instant::now();
    go.notify_waiters();
    let mut lat = Vec::new();
    let mut ttfb = Vec::new();
    let (mut ok, mut errors, mut bad_body, mut bad_status) = (0u64, 0u64, 0u64, 0u64);
    let mut first_error = None;
    let all = async {
        for t in tasks {
            match t.await {
                Ok(Ok((status, tf, tt, body))) => {
                    lat.push(tt.as_secs_f64() * 1e3);
                    ttfb.push(tf.as_secs_f64() * 1e3);
                    if status != 200 {
                        bad_status += 1;
                        first_error.get_or_insert(format!("status {status}"));
                    } else if let Some((size, id)) = &expect
                        && let Err(e) = check_body(*size, id, &body)
                    {
                        bad_body += 1;
                        first_error.get_or_insert(e.to_string());
                    } else {
                        ok += 1;
                    }
                }
                Ok(Err(e)) => {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
    };
    let timed_out = tokio::time::timeout(timeout, all).await.is_err();
    Ok(serde_json::json!({
        "kind": "burst",
        "target": target,
        "path": path,
        "n": n,
        "connect_errors": connect_errors,
        "ok": ok,
        "errors": errors,
        "bad_status": bad_status,
        "bad_body": bad_body,
        "timed_out": timed_out,
        "seconds": t0.elapsed().as_secs_f64(),
        "latency": lat_json(lat),
        "ttfb": lat_json(ttfb),
        "first_error": first_error,
    }))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let v = rt.block_on(async {
        match args.cmd {
            Cmd::Pass {
                target,
                size,
                count,
                start,
                conns,
                query,
                host,
                timeout_s,
            } => {
                pass(
                    Endpoint { target, host },
                    size,
                    count,
                    start,
                    conns,
                    query,
                    Duration::from_secs(timeout_s),
                )
                .await
            }
            Cmd::Burst {
                target,
                path,
                n,
                timeout_s,
            } => burst(target, path, n, Duration::from_secs(timeout_s)).await,
        }
    })?;
    println!("{v}");
    Ok(())
}
