//! One request, from head to last byte: classify, look up, serve from the store, revalidate, or
//! fetch from the origin (coalesced) while streaming to the client and writing to the store.
//! Every decision is made by the pure policy in `edgecache_cache::policy`; this module does the
//! I/O around it.
//!
//! Choices made here (each tested end to end in `tests/rfc_*.rs`):
//!
//! * A miss is fetched whole, without the client's Range and validators, so it can be stored;
//!   the client's own If-None-Match / If-Modified-Since / Range are then answered from the
//!   fetched 200 with `respond::from_cache` semantics ([`ClientAnswer`]): 304, 206 (the bytes
//!   are cut out of the stream as it passes) or 416. With no Content-Length the length is not
//!   known up front, so a Range gets the whole 200 (RFC 9110 14.2 allows ignoring Range).
//!   Coalesced waiters get the same treatment for their own headers.
//! * Concurrent requests for one stale variant make one conditional request; the others wait
//!   for it and decide again (only for plain staleness, never for authorized requests).
//! * A stored response that may not be served stale (must-revalidate, proxy-revalidate,
//!   s-maxage, no-cache) whose revalidation cannot reach the origin gets a 504 (RFC 9111
//!   5.2.2.2); an error status from the origin is relayed.
//! * A successful unsafe method invalidates its URI and same-origin Location /
//!   Content-Location (RFC 9111 4.4) in the store and in the coalescing table: a fill already
//!   in flight for such a URI is still served to its clients but not stored.
//! * 1xx from the origin: hyper's client consumes them and hands over only the final
//!   response, so they are dropped (never stored); a client's `Expect: 100-continue` is
//!   answered by hyper's server when the request body is read.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use edgecache_cache::policy::respond::{self, BodyPart};
use edgecache_cache::policy::serve::{self, ServeDecision};
use edgecache_cache::policy::status::{CacheStatus, Fwd};
use edgecache_cache::policy::validate::{self, Freshen};
use edgecache_cache::policy::{self, CacheKey, PolicyConfig, StoredResponse};
use edgecache_cache::store::{ObjectRef, ObjectWriter, Source, StoreWorker};
use futures_util::StreamExt;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::debug;

use crate::body::{self, Body};
use crate::coalesce::{End, Flight, Head, LeaderGuard, Role, TAIL_LIMIT};
use crate::error::ProxyError;
use crate::metrics::Outcome;
use crate::origin::{self, Origin};
use crate::server::Shared;

/// A worker's view of the data plane.
pub struct Ctx {
    pub shared: Arc<Shared>,
    pub store: StoreWorker,
    pub origin: Origin,
    pub policy: PolicyConfig,
}

impl Ctx {
    pub fn new(shared: Arc<Shared>, store: StoreWorker, origin: Origin) -> Self {
        let policy = PolicyConfig::from(&shared.cfg.cache);
        Self {
            shared,
            store,
            origin,
            policy,
        }
    }
}

/// The hyper service function.
pub async fn handle(
    ctx: Rc<Ctx>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let resp = route(&ctx, parts, body, peer).await;
    Ok(resp)
}

async fn route(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    body: Incoming,
    peer: SocketAddr,
) -> Response<Body> {
    let key = match CacheKey::from_parts(&parts, "http") {
        Ok(k) => k,
        Err(e) => {
            ctx.shared.metrics.request(Outcome::Synthetic);
            let cs = CacheStatus::none(&ctx.policy.name).detail("bad-request");
            return synthetic(StatusCode::BAD_REQUEST, &format!("bad request: {e}\n"), cs);
        }
    };
    match policy::request::classify(&parts, &ctx.policy) {
        policy::request::RequestClass::Cacheable if has_body(&parts) => {
            // Content in a GET or HEAD has no meaning (RFC 9110 9.3.1) and is a classic request
            // smuggling vector in front of a shared cache: refuse it.
            ctx.shared.metrics.request(Outcome::Synthetic);
            let cs = CacheStatus::none(&ctx.policy.name).detail("bad-request");
            synthetic(
                StatusCode::BAD_REQUEST,
                "bad request: GET and HEAD requests must not carry content\n",
                cs,
            )
        }
        policy::request::RequestClass::Cacheable => lookup(ctx, parts, key, peer).await,
        policy::request::RequestClass::Unsafe => forward(ctx, parts, body, peer, true).await,
        policy::request::RequestClass::Bypass(reason) => {
            debug!(reason = reason.as_str(), "bypass");
            forward(ctx, parts, body, peer, false).await
        }
    }
}

fn has_body(parts: &request::Parts) -> bool {
    parts.headers.contains_key(header::TRANSFER_ENCODING)
        || parts
            .headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

/// GET or HEAD: serve from the store when the policy allows, else go to the origin.
async fn lookup(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
) -> Response<Body> {
    let now = ctx.shared.clock.now();
    let (selected, decision) = match select(ctx, &key, &parts.headers).await {
        Selected::One(r, stored) => {
            let d = serve::decide(&parts, &stored, now, &ctx.policy);
            (Some((r, stored)), d)
        }
        Selected::VaryMiss => (None, serve::vary_miss(&parts)),
        Selected::None => (None, serve::miss(&parts)),
    };
    let status = decision.cache_status(&ctx.policy.name);
    match (decision, selected) {
        (ServeDecision::Serve { .. }, Some((r, stored))) => {
            if let Some(resp) = serve_stored(ctx, &parts, &r, &stored, now, status).await {
                return resp;
            }
            fetch_coalesced(ctx, parts, key, peer, Fwd::UriMiss).await
        }
        (ServeDecision::ServeStale { conditional, .. }, Some((r, stored))) => {
            // RFC 5861 3: serve stale now, revalidate once in the background.
            background_revalidate(ctx, &parts, &key, peer, &r, &stored, conditional);
            if let Some(resp) = serve_stored(
                ctx,
                &parts,
                &r,
                &stored,
                now,
                status.detail("stale-while-revalidate"),
            )
            .await
            {
                return resp;
            }
            fetch_coalesced(ctx, parts, key, peer, Fwd::UriMiss).await
        }
        (
            ServeDecision::Revalidate {
                conditional,
                stale_if_error,
                reason,
                ..
            },
            Some((r, stored)),
        ) => {
            // One conditional request per stale stored response at a time: others wait for
            // it and decide again on what it left in the store. Only for plain staleness: a
            // request or response that demands its own validation (no-cache, max-age, ...)
            // would wait and then validate anyway, and another request's validation is not
            // one for an authorized request (its credentials were not checked).
            let joins = reason == serve::Reason::Stale
                && !parts.headers.contains_key(header::AUTHORIZATION);
            let guard = if !joins {
                None
            } else {
                match ctx.shared.coalescer.join(&revalidation_key(&key, &r)) {
                    Role::Leader(guard) => Some(guard),
                    Role::Waiter(flight) => {
                        flight.ended().await;
                        if let Some(resp) = after_revalidation(ctx, &parts, &key).await {
                            return resp;
                        }
                        None
                    }
                }
            };
            let resp = revalidate(
                ctx,
                parts,
                key,
                peer,
                r,
                *stored,
                conditional,
                stale_if_error,
                reason.fwd(),
            )
            .await;
            drop(guard);
            resp
        }
        (ServeDecision::GatewayTimeout, _) => {
            ctx.shared.metrics.request(Outcome::Synthetic);
            synthetic(
                StatusCode::GATEWAY_TIMEOUT,
                "only-if-cached: no usable stored response\n",
                status,
            )
        }
        (ServeDecision::Forward { reason }, _) => {
            fetch_coalesced(ctx, parts, key, peer, reason.fwd()).await
        }
        (_, None) => fetch_coalesced(ctx, parts, key, peer, Fwd::UriMiss).await,
    }
}

/// The coalescing key of a revalidation of one stored variant (foreground or background).
fn revalidation_key(key: &CacheKey, r: &ObjectRef) -> Vec<u8> {
    let mut k = b"revalidate ".to_vec();
    k.extend_from_slice(key.as_bytes());
    k.push(b'\n');
    k.extend_from_slice(&r.variant);
    k
}

/// After waiting for another request's revalidation: serve what it stored if the policy now
/// allows it without going to the origin, else `None` (the caller revalidates itself).
async fn after_revalidation(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    key: &CacheKey,
) -> Option<Response<Body>> {
    let Selected::One(r, stored) = select(ctx, key, &parts.headers).await else {
        return None;
    };
    let now = ctx.shared.clock.now();
    match serve::decide(parts, &stored, now, &ctx.policy) {
        ServeDecision::Serve { freshness, .. } => {
            let status = CacheStatus::hit(&ctx.policy.name)
                .ttl(freshness.ttl())
                .collapsed(true);
            serve_stored(ctx, parts, &r, &stored, now, status).await
        }
        _ => None,
    }
}

enum Selected {
    One(ObjectRef, Box<StoredResponse>),
    VaryMiss,
    None,
}

/// The stored response that may answer this request: the newest variant whose Vary matches.
async fn select(ctx: &Ctx, key: &CacheKey, req_headers: &HeaderMap) -> Selected {
    let mut best: Option<(ObjectRef, StoredResponse)> = None;
    let mut any = false;
    for r in ctx.shared.store.lookup(key.as_bytes()) {
        let meta = if r.meta_in_index() {
            r.meta.clone()
        } else {
            // Too large for the index: read it from the record's header.
            match ctx.store.open(&r).await {
                Ok(obj) => obj.meta.clone(),
                Err(_) => continue,
            }
        };
        let Ok(stored) = StoredResponse::decode(&meta) else {
            continue;
        };
        any = true;
        if stored.matches(req_headers)
            && best
                .as_ref()
                .is_none_or(|(_, b)| stored.response_time > b.response_time)
        {
            best = Some((r, stored));
        }
    }
    match best {
        Some((r, s)) => Selected::One(r, Box::new(s)),
        None if any => Selected::VaryMiss,
        None => Selected::None,
    }
}

/// Answer from the store: the client's preconditions, HEAD and Range applied
/// (`respond::from_cache`). `None` when the object vanished or is unreadable (a miss then).
async fn serve_stored(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    r: &ObjectRef,
    stored: &StoredResponse,
    now: SystemTime,
    cache_status: CacheStatus,
) -> Option<Response<Body>> {
    let obj = match ctx.store.open(r).await {
        Ok(o) => o,
        Err(e) => {
            debug!("stored object unreadable, treating as a miss: {e}");
            return None;
        }
    };
    let outcome = if obj.source == Source::Ram {
        Outcome::HitRam
    } else {
        Outcome::HitDisk
    };
    ctx.shared.metrics.request(outcome);
    let out = respond::from_cache(parts, stored, obj.body_len, now);
    let (range, sent) = match out.body {
        BodyPart::Empty => (None, 0),
        BodyPart::Full => (Some(0..obj.body_len), obj.body_len),
        BodyPart::Range { start, end } => (Some(start..end + 1), end + 1 - start),
    };
    let body = match range {
        None => body::empty(),
        Some(range) => {
            ctx.shared.metrics.response_bytes.inc_by(sent);
            let whole = range.start == 0 && range.end == obj.body_len;
            body::stream(obj.body(if whole { None } else { Some(range) }))
        }
    };
    Some(respond(out.status, out.headers, cache_status, body))
}

/// Revalidate a stale stored response with a conditional request (RFC 9111 4.3).
#[allow(clippy::too_many_arguments)]
async fn revalidate(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    r: ObjectRef,
    stored: StoredResponse,
    conditional: HeaderMap,
    may_serve_stale_on_error: bool,
    fwd: Fwd,
) -> Response<Body> {
    let request_time = ctx.shared.clock.now();
    let mut fetch_parts = parts.clone();
    fetch_parts.method = Method::GET;
    policy::request::strip_for_fill(&mut fetch_parts.headers);
    let sent = send(ctx, &fetch_parts, peer, &conditional).await;
    let error_status = match &sent {
        Ok((resp, _)) if serve::is_error_for_stale(resp.status()) => Some(resp.status()),
        _ => None,
    };
    match sent {
        Ok((resp, _)) if error_status.is_none() || !may_serve_stale_on_error => {
            let response_time = ctx.shared.clock.now();
            if resp.status() == StatusCode::NOT_MODIFIED {
                let (rparts, _) = resp.into_parts();
                if let Freshen::Updated(updated) =
                    validate::freshen(&stored, &rparts, request_time, response_time)
                {
                    if let Err(e) = ctx.store.update_meta(&r, updated.encode()).await {
                        debug!("cannot update stored headers after 304: {e}");
                    }
                    ctx.shared.metrics.request(Outcome::Revalidated);
                    let status = CacheStatus::forward(&ctx.policy.name, fwd).fwd_status(304);
                    if let Some(resp) =
                        serve_stored(ctx, &parts, &r, &updated, response_time, status).await
                    {
                        return resp;
                    }
                }
                // The 304 does not match what is stored, or the body vanished: fetch it whole.
                return fetch(ctx, parts, key, peer, None, fwd).await;
            }
            relay_origin_response(ctx, &parts, key, resp, request_time, None, fwd).await
        }
        other => {
            let now = ctx.shared.clock.now();
            if serve::stale_if_error(&parts.headers, &stored, now, &ctx.policy) {
                let status = CacheStatus::hit(&ctx.policy.name)
                    .ttl(stored.freshness(now, &ctx.policy).ttl())
                    .detail("stale-if-error");
                if let Some(resp) = serve_stored(ctx, &parts, &r, &stored, now, status).await {
                    return resp;
                }
            }
            match other {
                Ok((resp, _)) => {
                    relay_origin_response(ctx, &parts, key, resp, request_time, None, fwd).await
                }
                // A stored response exists but may not be served stale (must-revalidate and
                // the like): "the generated status code SHOULD be 504" (RFC 9111 5.2.2.2).
                Err(e) => origin_failure_as(ctx, &e, fwd, StatusCode::GATEWAY_TIMEOUT),
            }
        }
    }
}

/// stale-while-revalidate: one background conditional request per key (others see the
/// revalidation in flight in the coalescing table and do not start another).
fn background_revalidate(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    key: &CacheKey,
    peer: SocketAddr,
    r: &ObjectRef,
    stored: &StoredResponse,
    conditional: HeaderMap,
) {
    let Role::Leader(guard) = ctx.shared.coalescer.join(&revalidation_key(key, r)) else {
        return;
    };
    let (ctx, mut parts, key, r, stored) = (
        ctx.clone(),
        parts.clone(),
        key.clone(),
        r.clone(),
        stored.clone(),
    );
    parts.method = Method::GET;
    policy::request::strip_for_fill(&mut parts.headers);
    tokio::task::spawn_local(async move {
        let request_time = ctx.shared.clock.now();
        match send(&ctx, &parts, peer, &conditional).await {
            Ok((resp, _)) if resp.status() == StatusCode::NOT_MODIFIED => {
                let (rparts, _) = resp.into_parts();
                if let Freshen::Updated(updated) =
                    validate::freshen(&stored, &rparts, request_time, ctx.shared.clock.now())
                    && let Err(e) = ctx.store.update_meta(&r, updated.encode()).await
                {
                    debug!("cannot update stored headers after background 304: {e}");
                }
            }
            Ok((resp, _)) => {
                // A new response replaces the stored one; nobody waits for its body.
                let _ =
                    relay_origin_response(&ctx, &parts, key, resp, request_time, None, Fwd::Stale)
                        .await;
            }
            Err(e) => debug!("background revalidation failed: {e}"),
        }
        drop(guard);
    });
}

/// Send a GET/HEAD-derived request to the origin and wait for its head.
async fn send(
    ctx: &Ctx,
    parts: &request::Parts,
    peer: SocketAddr,
    extra: &HeaderMap,
) -> Result<(Response<Incoming>, Duration), ProxyError> {
    let req = ctx
        .origin
        .prepare(parts, Some(peer.ip()), extra)?
        .body(origin::empty())
        .map_err(|_| ProxyError::bad_request("request cannot be forwarded"))?;
    let sent = ctx.origin.send(req).await;
    if let Ok((_, first_byte)) = &sent {
        ctx.shared.metrics.origin_fetches.inc();
        ctx.shared
            .metrics
            .origin_first_byte_seconds
            .observe(first_byte.as_secs_f64());
    }
    sent
}

/// A miss: one origin fetch per key, shared with concurrent requests for it.
async fn fetch_coalesced(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    fwd: Fwd,
) -> Response<Body> {
    match ctx.shared.coalescer.join(key.as_bytes()) {
        Role::Leader(guard) => fetch(ctx, parts, key, peer, Some(guard), fwd).await,
        Role::Waiter(flight) => follow(ctx, parts, key, peer, flight, fwd).await,
    }
}

/// Served from another request's fetch, as it arrives.
async fn follow(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    flight: Arc<Flight>,
    fwd: Fwd,
) -> Response<Body> {
    let Some(head) = flight.head().await else {
        // The leader failed before a response head: try on our own.
        return fetch(ctx, parts, key, peer, None, fwd).await;
    };
    // The leader's response may answer this request only where a stored copy could: it is
    // storable, its Vary matches, and an authorized request may reuse it (RFC 9111 3.5).
    // If-Match / If-Unmodified-Since are the origin's to evaluate: such a request fetches.
    let authorized_refused = parts.headers.contains_key(header::AUTHORIZATION)
        && !policy::store::allows_authorized(&head.stored.directives().cc);
    let origin_precondition = parts.headers.contains_key(header::IF_MATCH)
        || parts.headers.contains_key(header::IF_UNMODIFIED_SINCE);
    if !head.shareable
        || !head.stored.matches(&parts.headers)
        || authorized_refused
        || origin_precondition
    {
        return fetch(ctx, parts, key, peer, None, fwd).await;
    }
    if !head.tail {
        // Too large to replay from memory: wait for the stored copy.
        if flight.ended().await == End::Complete
            && let Selected::One(r, stored) = select(ctx, &key, &parts.headers).await
        {
            let now = ctx.shared.clock.now();
            let status = CacheStatus::hit(&ctx.policy.name)
                .ttl(stored.freshness(now, &ctx.policy).ttl())
                .collapsed(true);
            if let Some(resp) = serve_stored(ctx, &parts, &r, &stored, now, status).await {
                return resp;
            }
        }
        return fetch(ctx, parts, key, peer, None, fwd).await;
    }
    ctx.shared.metrics.request(Outcome::Coalesced);
    let mut headers = head.stored.headers.clone();
    downstream(&mut headers);
    let status = CacheStatus::forward(&ctx.policy.name, fwd)
        .fwd_status(head.stored.status.as_u16())
        .collapsed(true);
    let content_length = head
        .stored
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let answer = ClientAnswer::of(&parts, &head.stored, content_length, ctx.shared.clock.now());
    let (code, client_body) = answer.apply(head.stored.status, &mut headers);
    let Some(client_range) = client_body else {
        return respond(code, headers, status, body::empty());
    };
    let chunks = futures_util::stream::unfold(Some((flight, 0usize)), |state| async move {
        let (flight, i) = state?;
        match flight.chunk(i).await {
            Ok(Some(c)) => Some((Ok(c), Some((flight, i + 1)))),
            Ok(None) => None,
            Err(()) => Some((Err(io::Error::other("the origin fetch failed")), None)),
        }
    });
    let metrics = ctx.shared.metrics.clone();
    let count = move |c: &io::Result<Bytes>| {
        if let Ok(c) = c {
            metrics.response_bytes.inc_by(c.len() as u64);
        }
    };
    let body = match client_range {
        None => body::stream(chunks.inspect(count)),
        Some(range) => body::stream(body::slice(chunks, range).inspect(count)),
    };
    respond(code, headers, status, body)
}

/// Fetch from the origin, stream to the client, store when allowed, and feed waiters.
async fn fetch(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    guard: Option<LeaderGuard>,
    fwd: Fwd,
) -> Response<Body> {
    let request_time = ctx.shared.clock.now();
    // A HEAD miss is fetched as a GET so the object can be stored (HEAD is then served from it).
    // The whole object is fetched so it can be stored: the client's Range and validators are
    // the cache's to answer, not the origin's.
    let mut fetch_parts = parts.clone();
    if fetch_parts.method == Method::HEAD {
        fetch_parts.method = Method::GET;
    }
    policy::request::strip_for_fill(&mut fetch_parts.headers);
    match send(ctx, &fetch_parts, peer, &HeaderMap::new()).await {
        Ok((resp, _)) => {
            relay_origin_response(ctx, &parts, key, resp, request_time, guard, fwd).await
        }
        Err(e) => {
            drop(guard);
            origin_failure(ctx, &e, fwd)
        }
    }
}

/// Send an origin response on to the client while storing it when the policy allows.
async fn relay_origin_response(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    key: CacheKey,
    resp: Response<Incoming>,
    request_time: SystemTime,
    guard: Option<LeaderGuard>,
    fwd: Fwd,
) -> Response<Body> {
    let response_time = ctx.shared.clock.now();
    let (rparts, rbody) = resp.into_parts();
    let content_length = rparts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The response as stored; the stored GET answers HEAD too, so judge it as a GET.
    let mut as_get = parts.clone();
    as_get.method = Method::GET;
    let stored = StoredResponse::new(&as_get, &rparts, request_time, response_time);
    let verdict = policy::store::storable(&as_get, &rparts, response_time, &ctx.policy);
    let mut status = CacheStatus::forward(&ctx.policy.name, fwd).fwd_status(rparts.status.as_u16());
    let mut writer: Option<ObjectWriter> = None;
    match &verdict {
        Ok(_)
            if content_length
                .is_some_and(|n| n > ctx.shared.cfg.storage.max_object_size.bytes()) =>
        {
            ctx.shared.metrics.write_abort("too_large");
            status = status.detail("too-large");
        }
        Ok(_) => {
            // Replacing a stored variant (RFC 9111 4.3.4 / 3.2): the new one wins at finish().
            match ctx.store.begin_write(
                Bytes::copy_from_slice(key.as_bytes()),
                Bytes::from(stored.vary.to_bytes()),
                stored.encode(),
                content_length,
            ) {
                Ok(w) => {
                    writer = Some(w);
                    status = status.stored(true);
                }
                Err(e) => {
                    ctx.shared.metrics.write_abort(e.as_str());
                    status = status.detail(e.as_str());
                    debug!("not storing: {e}");
                }
            }
        }
        Err(reason) => {
            status = status.detail(reason.as_str());
        }
    }
    let shareable = verdict.is_ok();
    if let Some(g) = &guard {
        g.flight.set_head(Head {
            stored: stored.clone(),
            shareable,
            tail: shareable && content_length.is_some_and(|n| n <= TAIL_LIMIT),
        });
    }
    ctx.shared.metrics.request(if shareable {
        Outcome::Miss
    } else {
        Outcome::Bypass
    });

    let mut headers = rparts.headers;
    downstream(&mut headers);
    // The client's own If-None-Match / If-Modified-Since / Range were not sent to the origin
    // (the whole object is fetched to be stored): answer them from what arrived.
    let answer = ClientAnswer::of(parts, &stored, content_length, response_time);
    let (code, client_body) = answer.apply(rparts.status, &mut headers);
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let pump = Pump {
        ctx: ctx.clone(),
        body: rbody,
        writer,
        guard,
        to_client: client_body.is_some().then_some(tx),
        count_sent: matches!(client_body, Some(None)),
        idle: ctx.origin.idle_timeout,
    };
    tokio::task::spawn_local(pump.run());
    let body = match client_body {
        None => body::empty(),
        Some(None) => body::channel(rx),
        Some(Some(range)) => {
            // Only the range reaches the client; count what it gets.
            let metrics = ctx.shared.metrics.clone();
            body::stream(body::slice(body::receiver(rx), range).inspect(move |c| {
                if let Ok(c) = c {
                    metrics.response_bytes.inc_by(c.len() as u64);
                }
            }))
        }
    };
    respond(code, headers, status, body)
}

/// How a request is answered from a response fetched whole from the origin (a miss, or a
/// revalidation the origin answered with a new response): with `respond::from_cache`'s
/// semantics, as if the response had been stored first.
///
/// Only a 200 is evaluated (a precondition or a Range applies to a 2xx/200 representation);
/// a Range is answered only when the length is known up front (Content-Length), else the whole
/// 200 is sent, which RFC 9110 14.2 allows.
enum ClientAnswer {
    /// Send the response as received (HEAD: without its body).
    AsReceived { head_only: bool },
    /// 304 with these fields.
    NotModified(HeaderMap),
    /// 206 with these Content-Range and Content-Length, body bytes `start..end` (exclusive).
    Partial {
        content_range: HeaderValue,
        range: std::ops::Range<u64>,
    },
    /// 416 with this Content-Range.
    Unsatisfiable(HeaderValue),
}

impl ClientAnswer {
    fn of(
        parts: &request::Parts,
        stored: &StoredResponse,
        content_length: Option<u64>,
        now: SystemTime,
    ) -> Self {
        let head_only = parts.method == Method::HEAD;
        let h = &parts.headers;
        let asks = h.contains_key(header::IF_NONE_MATCH)
            || h.contains_key(header::IF_MODIFIED_SINCE)
            || h.contains_key(header::RANGE);
        if !asks || stored.status != StatusCode::OK {
            return ClientAnswer::AsReceived { head_only };
        }
        let out = match content_length {
            Some(len) => respond::from_cache(parts, stored, len, now),
            None => {
                let mut whole = parts.clone();
                whole.headers.remove(header::RANGE);
                respond::from_cache(&whole, stored, 0, now)
            }
        };
        let content_range = || {
            out.headers
                .get(header::CONTENT_RANGE)
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("bytes */0"))
        };
        match (out.status, out.body) {
            (StatusCode::NOT_MODIFIED, _) => ClientAnswer::NotModified(out.headers),
            (StatusCode::PARTIAL_CONTENT, BodyPart::Range { start, end }) => {
                ClientAnswer::Partial {
                    content_range: content_range(),
                    range: start..end.saturating_add(1),
                }
            }
            (StatusCode::RANGE_NOT_SATISFIABLE, _) => ClientAnswer::Unsatisfiable(content_range()),
            _ => ClientAnswer::AsReceived { head_only },
        }
    }

    /// The status to send, with `headers` (the origin's, already made fit for downstream)
    /// adjusted, and the body: `None` for no body, `Some(None)` for all of it, `Some(range)`.
    fn apply(
        self,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) -> (StatusCode, Option<Option<std::ops::Range<u64>>>) {
        match self {
            ClientAnswer::AsReceived { head_only: true } => (status, None),
            ClientAnswer::AsReceived { head_only: false } => (status, Some(None)),
            ClientAnswer::NotModified(h) => {
                *headers = h;
                (StatusCode::NOT_MODIFIED, None)
            }
            ClientAnswer::Partial {
                content_range,
                range,
            } => {
                headers.insert(header::CONTENT_RANGE, content_range);
                headers.insert(
                    header::CONTENT_LENGTH,
                    HeaderValue::from(range.end - range.start),
                );
                (StatusCode::PARTIAL_CONTENT, Some(Some(range)))
            }
            ClientAnswer::Unsatisfiable(content_range) => {
                headers.insert(header::CONTENT_RANGE, content_range);
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
                (StatusCode::RANGE_NOT_SATISFIABLE, None)
            }
        }
    }
}

/// Moves an origin body to the client, the store and the waiters; runs on its own so the store
/// write and the waiters finish even when the client goes away.
struct Pump {
    ctx: Rc<Ctx>,
    body: Incoming,
    writer: Option<ObjectWriter>,
    guard: Option<LeaderGuard>,
    to_client: Option<tokio::sync::mpsc::Sender<io::Result<Bytes>>>,
    /// Count the bytes sent to the client here (false when the client's body is a range, which
    /// is counted as it is cut out).
    count_sent: bool,
    idle: Duration,
}

impl Pump {
    /// Send one chunk to the client, if it is still there.
    async fn send_to_client(&mut self, chunk: Bytes) {
        if let Some(tx) = &self.to_client {
            if self.count_sent {
                self.ctx
                    .shared
                    .metrics
                    .response_bytes
                    .inc_by(chunk.len() as u64);
            }
            if tx.send(Ok(chunk)).await.is_err() {
                self.to_client = None;
            }
        }
    }

    async fn run(mut self) {
        let metrics = self.ctx.shared.metrics.clone();
        // While storing, the latest chunk is held back until the next one arrives, and the last
        // one until the object is published: a client that has the whole body finds it stored.
        let mut held: Option<Bytes> = None;
        let end = loop {
            let frame = match tokio::time::timeout(self.idle, self.body.frame()).await {
                Err(_) => {
                    metrics.origin_error("body_timeout");
                    break Err("the origin went silent mid-body (idle timeout)".to_string());
                }
                Ok(None) => break Ok(()),
                Ok(Some(Err(e))) => {
                    metrics.origin_error("body");
                    break Err(format!("the origin body failed: {e}"));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            if let Some(g) = &self.guard {
                g.flight.push(chunk.clone());
            }
            if let Some(w) = &mut self.writer
                && let Err(e) = w.write(chunk.clone()).await
            {
                debug!("store write failed, the response is still served: {e}");
                metrics.write_abort(e.as_str());
                self.writer = None;
            }
            if self.writer.is_some() {
                if let Some(previous) = held.replace(chunk) {
                    self.send_to_client(previous).await;
                }
            } else {
                if let Some(previous) = held.take() {
                    self.send_to_client(previous).await;
                }
                self.send_to_client(chunk).await;
            }
            if self.to_client.is_none() && self.writer.is_none() && self.guard.is_none() {
                // Nobody wants the rest.
                return;
            }
        };
        if self.guard.as_ref().is_some_and(|g| g.flight.invalidated()) {
            // Invalidated while it ran (RFC 9111 4.4): serve it, do not publish it.
            debug!("not storing a response fetched before an invalidation of its URI");
            self.writer = None;
        }
        match end {
            Ok(()) => {
                if let Some(w) = self.writer.take()
                    && let Err(e) = w.finish().await
                {
                    debug!("object not stored: {e}");
                    metrics.write_abort(e.as_str());
                }
                if let Some(g) = self.guard.take() {
                    g.retire();
                    g.flight.finish(End::Complete);
                }
                if let Some(c) = held.take() {
                    self.send_to_client(c).await;
                }
            }
            Err(why) => {
                debug!("{why}");
                // The writer is dropped unfinished: nothing is published.
                self.writer = None;
                if let Some(g) = self.guard.take() {
                    g.flight.finish(End::Failed);
                }
                if let Some(c) = held.take() {
                    self.send_to_client(c).await;
                }
                if let Some(tx) = self.to_client.take() {
                    let _ = tx.send(Err(io::Error::other(why))).await;
                }
            }
        }
    }
}

/// Forward a request the cache must not answer (unsafe or bypassed methods), invalidating
/// stored responses after a successful unsafe one (RFC 9111 4.4).
async fn forward(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    body: Incoming,
    peer: SocketAddr,
    unsafe_method: bool,
) -> Response<Body> {
    let fwd = if unsafe_method {
        Fwd::Method
    } else {
        Fwd::Bypass
    };
    let req = match ctx
        .origin
        .prepare(&parts, Some(peer.ip()), &HeaderMap::new())
    {
        Ok(b) => b
            .body(body.boxed())
            .map_err(|_| ProxyError::bad_request("request cannot be forwarded")),
        Err(e) => Err(e),
    };
    let sent = match req {
        Ok(req) => ctx.origin.send(req).await,
        Err(e) => Err(e),
    };
    match sent {
        Ok((resp, _)) => {
            ctx.shared.metrics.origin_fetches.inc();
            ctx.shared.metrics.request(Outcome::Bypass);
            if unsafe_method {
                for target in
                    policy::invalidate::targets(&parts, resp.status(), resp.headers(), "http")
                {
                    ctx.shared.coalescer.invalidate(target.as_bytes());
                    ctx.shared.store.remove(target.as_bytes());
                }
            }
            let (rparts, rbody) = resp.into_parts();
            let mut headers = rparts.headers;
            downstream(&mut headers);
            let status =
                CacheStatus::forward(&ctx.policy.name, fwd).fwd_status(rparts.status.as_u16());
            let idle = ctx.origin.idle_timeout;
            let metrics = ctx.shared.metrics.clone();
            let stream = futures_util::stream::unfold(Some(rbody), move |state| {
                let metrics = metrics.clone();
                async move {
                    let mut b = state?;
                    loop {
                        match tokio::time::timeout(idle, b.frame()).await {
                            Err(_) => {
                                return Some((Err(io::Error::other("origin idle timeout")), None));
                            }
                            Ok(None) => return None,
                            Ok(Some(Err(e))) => return Some((Err(io::Error::other(e)), None)),
                            Ok(Some(Ok(f))) => {
                                if let Ok(d) = f.into_data() {
                                    metrics.response_bytes.inc_by(d.len() as u64);
                                    return Some((Ok(d), Some(b)));
                                }
                            }
                        }
                    }
                }
            });
            respond(rparts.status, headers, status, body::stream(stream))
        }
        Err(e) => origin_failure(ctx, &e, fwd),
    }
}

/// Header fields of an origin response on their way to the client: no hop-by-hop fields, no
/// fields targeted at this cache (RFC 9213).
fn downstream(headers: &mut HeaderMap) {
    origin::strip_hop_by_hop(headers);
    policy::headers::strip_targeted(headers);
}

fn origin_failure(ctx: &Ctx, e: &ProxyError, fwd: Fwd) -> Response<Body> {
    origin_failure_as(ctx, e, fwd, e.status())
}

fn origin_failure_as(ctx: &Ctx, e: &ProxyError, fwd: Fwd, status: StatusCode) -> Response<Body> {
    ctx.shared.metrics.origin_error(e.kind.as_str());
    ctx.shared.metrics.request(Outcome::OriginError);
    debug!(blame = ?e.blame, "origin failure: {e}");
    let cs = CacheStatus::forward(&ctx.policy.name, fwd).detail(e.kind.as_str());
    synthetic(
        status,
        &format!(
            "{} {}: {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            e.message
        ),
        cs,
    )
}

fn synthetic(status: StatusCode, text: &str, cache_status: CacheStatus) -> Response<Body> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    respond(status, headers, cache_status, body::full(text.to_string()))
}

fn respond(
    status: StatusCode,
    mut headers: HeaderMap,
    cache_status: CacheStatus,
    body: Body,
) -> Response<Body> {
    cache_status.append_to(&mut headers);
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}
