//! One request, from head to last byte: classify, look up, serve from the store, revalidate, or
//! fetch from the origin (coalesced) while streaming to the client and writing to the store.
//! Every decision is made by the pure policy in `edgecache_policy`; this module does the
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
//! * Except a GET with one byte range that nothing complete in the store answers: it goes to
//!   the origin with its Range and If-Range (an edge should not pull a whole large object for a
//!   few bytes of it); coalesced, but a 206 answers only its own request (a whole 200 answers
//!   the waiters too). A 206 is relayed as received and kept as partial content
//!   (RFC 9111 3.3), combined with held bytes of the same representation (3.4: same strong
//!   validator, ranges that overlap or touch) and stored as a complete 200 once the union is
//!   whole. Later ranges within the held bytes are hits; anything else goes forward
//!   (`fwd=partial`). See `policy::partial`.
//! * With slicing on (`storage.sliceSize`), that Range is first widened to whole slices: a
//!   206 of slices of a larger object with a strong validator makes it a sliced object, whose
//!   manifest and slices are stored and served by `handler/sliced.rs` (a whole GET of one is
//!   stored slice by slice too); a 206 of the whole representation is stored as its 200; a 206
//!   of part of an object that is not sliced is dropped and the client's own Range is sent.
//! * Concurrent requests for one stale variant make one conditional request; the others wait
//!   for it and decide again (only for plain staleness, never for authorized requests).
//! * A stored response that may not be served stale (must-revalidate, proxy-revalidate,
//!   s-maxage, no-cache) whose revalidation cannot reach the origin gets a 504 (RFC 9111
//!   5.2.2.2); an error status from the origin is relayed.
//! * A successful unsafe method invalidates its URI and same-origin Location /
//!   Content-Location (RFC 9111 4.4) in the store and in the coalescing table: a fill already
//!   in flight for such a URI is still served to its clients but not stored.
//! * A disk hit whose stored body fails after the response has started (a block that fails its
//!   checksum: the store drops the object) is finished from the origin with a Range for the
//!   rest bound to the stored strong validator by If-Range; anything but a 206 of exactly those
//!   bytes of that representation ends the response short (`handler/repair.rs`,
//!   `policy::partial::Continuation`). The repaired bytes are not stored.
//! * 1xx from the origin: forwarded to the client while the final response is awaited (RFC
//!   9110 15.2), written on the connection's IO next to hyper, whose server has no API for them
//!   (upstream's interim.rs). `Origin::send` hands them to the request's `InterimForwarder`, which
//!   applies `policy::interim::action`: none to HTTP/1.0 clients, no 101, no 100 unless the
//!   client waits for one hyper does not send itself (hyper's server answers `Expect:
//!   100-continue` when the request body is read). Never stored. 1xx arriving after the final
//!   response, or for a request the proxy sent on its own (a background revalidation), are
//!   dropped.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use edgecache_policy::respond::{self, BodyPart};
use edgecache_policy::serve::{self, ServeDecision};
use edgecache_policy::status::{CacheStatus, Fwd};
use edgecache_policy::validate::{self, Freshen};
use edgecache_policy::{self as policy, CacheKey, PolicyConfig, StoredResponse};
use edgecache_store::{ObjectRef, ObjectWriter, Source, StoreWorker, StoredObject};
use futures_util::StreamExt;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, request};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::{debug, info};

use crate::body::{self, Body};
use crate::client_conn::ClientConn;
use crate::coalesce::{End, Flight, Head, LeaderGuard, Role, TAIL_LIMIT};
use crate::error::ProxyError;
use crate::metrics::Outcome;
use crate::origin::{self, Origin};
use crate::paced;
use crate::shared::Shared;
use crate::sites::Unrouted;
use crate::stream_slots::{self, StreamSlots};

mod feed;
mod fill;
mod forward;
mod peer;
mod repair;
mod sliced;

use fill::{Miss, fetch, fill, relay_origin_response};
use forward::forward;
pub(crate) use peer::Upstream;
pub use peer::is_peer_hop;

/// A worker's view of the data plane.
pub struct Ctx {
    pub shared: Arc<Shared>,
    pub store: StoreWorker,
    /// One client per site (`shared.sites.list`, in its order).
    pub origins: Vec<Origin>,
    /// The client for the other nodes, when sharding is on.
    pub peers: Option<Origin>,
    pub policy: PolicyConfig,
    /// Large disk streams per client address on this worker.
    pub stream_slots: StreamSlots,
    /// Disk streams that keep a chunk for a client socket without room (src/paced.rs).
    pub keepers: Rc<crate::paced::Keepers>,
    /// This worker's access log and request histograms (dataplane/observe/src/request_log.rs).
    pub requests: Rc<crate::request_log::WorkerLog>,
    /// The bodies this worker compresses now (src/compress.rs).
    pub compressing: crate::compress::Running,
}

impl Ctx {
    /// The site a request was routed to (the first when it was not, e.g. a test's).
    pub fn site_of(&self, parts: &request::Parts) -> usize {
        parts
            .extensions
            .get::<crate::sites::SiteId>()
            .map_or(0, |s| s.index)
            .min(self.origins.len().saturating_sub(1))
    }

    /// The client of a request's site.
    pub fn origin_for(&self, parts: &request::Parts) -> &Origin {
        &self.origins[self.site_of(parts)]
    }

    /// The compression of a request's site (`None`: off).
    pub fn compression_for(
        &self,
        parts: &request::Parts,
    ) -> Option<&edgecache_policy::encoding::CompressionConfig> {
        self.shared
            .sites
            .list
            .get(self.site_of(parts))
            .and_then(|s| s.compression.as_ref())
    }

    /// The cache policy of a request's site.
    pub fn policy_for(&self, parts: &request::Parts) -> &PolicyConfig {
        self.shared
            .sites
            .list
            .get(self.site_of(parts))
            .map_or(&self.policy, |s| &s.policy)
    }

    /// Longest silence allowed while an origin sends a body (every site's).
    pub fn origin_idle(&self) -> Duration {
        self.shared.settings.origin_idle_timeout
    }

    /// How long a request coalesced on another's fetch waits for its response head.
    pub fn head_deadline(&self) -> Duration {
        self.shared.settings.origin_first_byte_timeout + Duration::from_secs(1)
    }

    /// `policy`: the cache policy of a request routed to no site (the binary maps it from the
    /// operator contract).
    pub fn new(
        shared: Arc<Shared>,
        store: StoreWorker,
        origins: Vec<Origin>,
        peers: Option<Origin>,
        policy: PolicyConfig,
    ) -> Self {
        let limits = stream_slots::limits(
            shared.settings.max_disk_streams_per_ip,
            store.io_budget().capacity(),
            store.read_chunk(),
        );
        Self {
            store,
            origins,
            peers,
            policy,
            stream_slots: StreamSlots::new(limits, shared.metrics.disk_streams.clone()),
            keepers: Rc::default(),
            requests: crate::request_log::WorkerLog::new(shared.requests.clone()),
            compressing: crate::compress::Running::new(shared.metrics.memory.encoders.clone()),
            shared,
        }
    }
}

/// The hyper service function.
pub async fn handle(
    ctx: Rc<Ctx>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = req.into_parts();
    // The request's one authority, normalised, before anything else reads the head.
    let conn = ClientConn::of(&parts).map(|c| c.info);
    let tls = conn.is_some_and(|c| c.tls_version.is_some());
    let routed = ctx
        .shared
        .sites
        .route_head(&mut parts, if tls { "https" } else { "http" });
    // Observed and logged when its body ends or is dropped (dataplane/observe/src/request_log.rs).
    let exchange = ctx.requests.begin(&mut parts, peer, conn);
    let hop = peer::take_hop(&ctx, &mut parts);
    let mut resp = match routed {
        Ok(_) => route(&ctx, parts, body, peer).await,
        Err(Unrouted::NoSite) => misdirected(&ctx),
        Err(Unrouted::Authority(e)) => bad_request(&ctx, &format!("bad request: {e}\n")),
    };
    if hop {
        peer::mark_generated(&mut resp);
    }
    Ok(exchange.respond(resp))
}

/// A routed request (dataplane/upstream/src/sites.rs, [`crate::sites::Sites::route_head`]).
async fn route(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    body: Incoming,
    peer: SocketAddr,
) -> Response<Body> {
    let key = match CacheKey::from_parts(&parts, "http") {
        Ok(k) => k,
        Err(e) => return bad_request(ctx, &format!("bad request: {e}\n")),
    };
    match policy::request::classify(&parts, ctx.policy_for(&parts)) {
        policy::request::RequestClass::Cacheable if has_body(&parts, &body) => {
            // Content in a GET or HEAD has no meaning (RFC 9110 9.3.1) and is a classic request
            // smuggling vector in front of a shared cache: refuse it.
            bad_request(
                ctx,
                "bad request: GET and HEAD requests must not carry content\n",
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

/// 421: no site answers this Host (RFC 9110 15.5.20), answered by the cache itself.
fn misdirected(ctx: &Ctx) -> Response<Body> {
    ctx.shared.metrics.request(Outcome::Synthetic);
    let cs = CacheStatus::none(&ctx.policy.name).detail("no-site");
    synthetic(
        StatusCode::MISDIRECTED_REQUEST,
        "421 Misdirected Request: no site here answers this host\n",
        cs,
    )
}

/// A 400 answered by the cache itself, counted as synthetic.
fn bad_request(ctx: &Ctx, text: &str) -> Response<Body> {
    ctx.shared.metrics.request(Outcome::Synthetic);
    let cs = CacheStatus::none(&ctx.policy.name).detail("bad-request");
    synthetic(StatusCode::BAD_REQUEST, text, cs)
}

/// Whether a request has content: framing fields, or (HTTP/2, where DATA frames need neither) a
/// stream its HEADERS did not end.
fn has_body(parts: &request::Parts, body: &Incoming) -> bool {
    use http_body::Body as _;
    !body.is_end_stream()
        || parts.headers.contains_key(header::TRANSFER_ENCODING)
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
    let mut opened = None;
    let refs = ctx.shared.store.lookup(key.as_bytes());
    let seen = Seen::of(&refs);
    let found = select_in(ctx, refs, &parts, peer).await;
    let found = landed(ctx, &key, &parts, peer, found).await;
    let selected = purged(ctx, &key, found);
    // A manifest: the object is cached as slices (handler/sliced.rs). Fresh (or stale within
    // stale-while-revalidate) it answers from them; stale, it is revalidated (a 304 keeps its
    // slices, a new version makes a new manifest); otherwise it is fetched again (with an
    // unchanged validator, under a new manifest).
    if let Selected::One(r, stored, _) = &selected
        && let Some(manifest) = crate::slices::Manifest::of(stored.headers())
    {
        let d = serve::decide(&parts, stored, now, ctx.policy_for(&parts));
        let status = d.cache_status(&ctx.policy.name);
        let fwd = match d {
            ServeDecision::Serve { .. } | ServeDecision::ServeStale { .. } => {
                let (r, stored) = (r.clone(), (**stored).clone());
                drop(selected);
                ctx.shared.metrics.request(Outcome::HitDisk);
                let answer = sliced::Answer::Slices(stored, status, now);
                return sliced::finish(ctx, parts, key, peer, (r, manifest), answer).await;
            }
            ServeDecision::Revalidate {
                conditional,
                stale_if_error,
                reason,
                ..
            } => {
                let asked = sliced::Asked {
                    stored: (**stored).clone(),
                    conditional,
                    may_serve_stale_on_error: stale_if_error,
                    fwd: reason.fwd(),
                };
                let r = r.clone();
                drop(selected);
                let answer = sliced::Answer::Revalidate(asked);
                return sliced::finish(ctx, parts, key, peer, (r, manifest), answer).await;
            }
            ServeDecision::Forward { reason } => Some(reason.fwd()),
            ServeDecision::GatewayTimeout => None,
        };
        if let Some(fwd) = fwd {
            drop(selected);
            let miss = Miss::of(&parts, None);
            return fill(ctx, parts, key, peer, fwd, miss).await;
        }
    }
    let (selected, decision) = match selected {
        Selected::One(r, stored, obj) => {
            let d = serve::decide(&parts, &stored, now, ctx.policy_for(&parts));
            opened = Some(obj);
            (Some((r, stored)), d)
        }
        Selected::VaryMiss => (None, serve::vary_miss(&parts)),
        Selected::None => (None, serve::miss(&parts)),
    };
    let status = decision.cache_status(&ctx.policy.name);
    match (decision, selected) {
        (ServeDecision::Serve { .. }, Some((r, stored))) => {
            if let Some(resp) =
                serve_stored(ctx, &parts, peer, &r, opened, &stored, now, status).await
            {
                return resp;
            }
            let miss = miss_after_lookup(&parts, Some((&r, &stored)), seen);
            fill(ctx, parts, key, peer, miss.unanswered(), miss).await
        }
        (ServeDecision::ServeStale { conditional, .. }, Some((r, stored))) => {
            // RFC 5861 3: serve stale now, revalidate once in the background.
            background_revalidate(ctx, &parts, &key, peer, &r, &stored, conditional);
            if let Some(resp) = serve_stored(
                ctx,
                &parts,
                peer,
                &r,
                opened,
                &stored,
                now,
                status.detail("stale-while-revalidate"),
            )
            .await
            {
                return resp;
            }
            let miss = miss_after_lookup(&parts, Some((&r, &stored)), seen);
            fill(ctx, parts, key, peer, miss.unanswered(), miss).await
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
            // Its buffers are not held across the origin request.
            drop(opened);
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
                        if let Some(resp) = after_revalidation(ctx, &parts, &key, peer).await {
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
                Arc::unwrap_or_clone(stored),
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
        (ServeDecision::Forward { reason }, selected) => {
            // Neither its buffers nor its stream slot are held across the origin request.
            drop(opened);
            let miss = miss_after_lookup(&parts, selected.as_ref().map(|(r, s)| (r, s)), seen);
            fill(ctx, parts, key, peer, reason.fwd(), miss).await
        }
        (_, None) => {
            let miss = miss_after_lookup(&parts, None, seen);
            fill(ctx, parts, key, peer, Fwd::UriMiss, miss).await
        }
    }
}

/// What a looked-up request takes to the origin when the store does not answer it: made only
/// then, as a hit has no use for it. `selected` is the stored response the lookup selected.
fn miss_after_lookup(
    parts: &request::Parts,
    selected: Option<(&ObjectRef, &Arc<StoredResponse>)>,
    seen: Seen,
) -> Miss {
    let mut miss = Miss::of(parts, selected.map(|(r, s)| (r, &**s)));
    miss.seen = Some(seen);
    miss
}

/// An `only-if-cached` lookup that found nothing, while a fill of the key may be landing (its
/// client answered, its store write not yet published: handler/fill.rs), waits for it and looks
/// again. Other misses meet that fill when they join its flight (`fill`), which this request,
/// answered from the store alone, never does.
async fn landed(
    ctx: &Ctx,
    key: &CacheKey,
    parts: &request::Parts,
    peer: SocketAddr,
    found: Selected,
) -> Selected {
    if !matches!(found, Selected::None)
        || !matches!(serve::miss(parts), ServeDecision::GatewayTimeout)
    {
        return found;
    }
    if let Some(flight) = ctx.shared.coalescer.landing(key.as_bytes()) {
        flight.landed().await;
    }
    // Looked up again in any case: a fill may have landed since the first lookup.
    select(ctx, key, parts, peer).await
}

/// What the index held for a key at a lookup: how many records, and a sum over their places on
/// disk. A fill of the key that lands between a lookup and its fetch changes it: the fetch's
/// leader then looks again (`fill`) instead of fetching what was just stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    records: usize,
    places: u64,
}

impl Seen {
    pub(super) fn of(refs: &[ObjectRef]) -> Seen {
        let places = refs.iter().fold(0u64, |sum, r| {
            let at = r.location();
            sum.wrapping_add((u64::from(at.segment) << 48) ^ at.offset)
        });
        Seen {
            records: refs.len(),
            places,
        }
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
    peer: SocketAddr,
) -> Option<Response<Body>> {
    let Selected::One(r, stored, obj) = select(ctx, key, parts, peer).await else {
        return None;
    };
    let now = ctx.shared.clock.now();
    match serve::decide(parts, &stored, now, ctx.policy_for(parts)) {
        ServeDecision::Serve { freshness, .. } => {
            let status = CacheStatus::hit(&ctx.policy.name)
                .ttl(freshness.ttl())
                .collapsed(true);
            serve_stored(ctx, parts, peer, &r, Some(obj), &stored, now, status).await
        }
        _ => None,
    }
}

/// The selected response as the purge rules leave it: removed (from the store too) when a
/// hard rule names it, stale from the purge when only soft ones do.
fn purged(ctx: &Ctx, key: &CacheKey, selected: Selected) -> Selected {
    let Selected::One(r, mut stored, obj) = selected else {
        return selected;
    };
    match ctx.shared.purges.verdict(key.as_str(), &stored) {
        crate::purges::Verdict::Keep => Selected::One(r, stored, obj),
        crate::purges::Verdict::Remove => {
            ctx.shared
                .metrics
                .purge_hits
                .get_or_create(&[("verdict", "remove".into())])
                .inc();
            ctx.shared.store.remove_object(&r);
            Selected::None
        }
        crate::purges::Verdict::Stale(at) => {
            ctx.shared
                .metrics
                .purge_hits
                .get_or_create(&[("verdict", "stale".into())])
                .inc();
            Arc::make_mut(&mut stored).expired_at = Some(at);
            Selected::One(r, stored, obj)
        }
    }
}

enum Selected {
    /// The stored response that may answer, the complete ref of its object, and the object as
    /// opened (its body not read yet, beyond what the one read of its record brought).
    One(ObjectRef, Arc<StoredResponse>, Opened),
    VaryMiss,
    None,
}

/// An object opened for a request, with the stream slot of its client's address when its
/// body is large (taken before the open, so a wait for the slot wastes no read).
pub(super) struct Opened {
    obj: Box<StoredObject>,
    slot: Option<stream_slots::Slot>,
}

/// The stored response that may answer this request. The store's candidates for the key come
/// newest first with no more than a tag of their variant key, so the newest is opened (one
/// read; it may turn out to be another key's object, a tag collision, and then the next is):
/// it answers if its Vary matches; if not, its Vary names the fields that pick a variant, and
/// only candidates whose tag is the request's variant key's for them are opened, newest first.
/// No candidate is a miss with no disk read. Before a large record is opened from disk (a body
/// over [`STREAM_SLOT_MIN`], as the index's length says) the address's stream slot is taken:
/// the open's first read is the body's first chunk, and waiting for the slot after it would
/// read that chunk again. A copy in the RAM tier holds no I/O buffer and takes no slot (its
/// memory is the tier's, counted there until the response drops it, `edgecache_store`'s RAM
/// tier).
async fn select(ctx: &Ctx, key: &CacheKey, parts: &request::Parts, peer: SocketAddr) -> Selected {
    select_in(ctx, ctx.shared.store.lookup(key.as_bytes()), parts, peer).await
}

/// [`select`] among `refs`, what the index holds for the key.
async fn select_in(
    ctx: &Ctx,
    refs: Vec<ObjectRef>,
    parts: &request::Parts,
    peer: SocketAddr,
) -> Selected {
    let store = &ctx.shared.store;
    let req_headers = &parts.headers;
    if refs.is_empty() {
        return Selected::None;
    }
    let mut slot = None;
    // Once the newest stored response did not match: the tag of the request's variant key.
    let mut want: Option<u8> = None;
    for r in refs {
        if want.is_some_and(|t| t != r.variant_tag) {
            continue;
        }
        // A copy in the RAM tier holds no I/O buffer: it takes no stream slot.
        let obj = match ctx.store.open_ram(&r) {
            Some(obj) => obj,
            None => {
                if slot.is_none()
                    && r.record_len > STREAM_SLOT_MIN + 4096
                    && parts.method != Method::HEAD
                    && !peer::is_hop(parts)
                {
                    slot = Some(ctx.stream_slots.acquire(peer.ip()).await);
                }
                let Ok(obj) = open(ctx, parts, &r).await else {
                    continue;
                };
                obj
            }
        };
        let Some(stored) = stored_response(ctx, &obj) else {
            continue;
        };
        if stored.matches(req_headers) {
            let r = obj.object_ref.clone();
            // A slot taken for a candidate read from disk is no RAM copy's.
            let slot = slot.filter(|_| obj.source != Source::Ram);
            let obj = Box::new(obj);
            return Selected::One(r, stored, Opened { obj, slot });
        }
        if want.is_none() {
            match stored.selecting() {
                policy::vary::Vary::Fields(names) => {
                    let variant = policy::vary::VaryKey::for_request(names, req_headers);
                    want = Some(store.variant_tag(&variant.to_bytes()));
                }
                // No Vary always matches; `Vary: *` never does, nor any variant of it.
                policy::vary::Vary::None | policy::vary::Vary::Any => break,
            }
        }
    }
    Selected::VaryMiss
}

/// Open a stored object from disk (every caller has looked in the RAM tier first,
/// `StoreWorker::open_ram`). A traced request's disk read (the open's read of the record's head
/// and first chunk) is a child span, `disk read`.
async fn open(
    ctx: &Ctx,
    parts: &request::Parts,
    r: &ObjectRef,
) -> Result<StoredObject, edgecache_store::StoreError> {
    let span = if edgecache_trace::active() {
        parts
            .extensions
            .get::<edgecache_observe::trace::SpanContext>()
            .map(|c| c.child("disk read", edgecache_trace::Kind::Internal))
    } else {
        None
    };
    let opened = ctx.store.open_disk(r).await;
    if let Some(mut span) = span {
        match &opened {
            Ok(obj) => {
                span.set("edgecache.store.record_bytes", r.record_len);
                span.set("edgecache.store.body_bytes", obj.body_len);
            }
            Err(e) => span.fail(e.to_string()),
        }
    }
    opened
}

/// The stored response of an opened object: decoded from its meta, or as decoded by an earlier
/// hit when the object came from the RAM tier (which keeps it with its copy). `None` when the
/// meta is not a stored response.
fn stored_response(ctx: &Ctx, obj: &StoredObject) -> Option<Arc<StoredResponse>> {
    if let Some(parsed) = &obj.parsed
        && let Ok(stored) = Arc::clone(parsed).downcast::<StoredResponse>()
    {
        return Some(stored);
    }
    let stored = Arc::new(StoredResponse::decode(&obj.meta).ok()?);
    ctx.store.keep_parsed(obj, stored.clone());
    Some(stored)
}

/// Stored bodies larger than this (one read chunk) take a stream slot of their client's address
/// when they are read from disk: each holds I/O buffers while its client reads (two chunks, or
/// one buffer of a record read whole, up to 1 MiB + 64 KiB). From the RAM tier they take none.
const STREAM_SLOT_MIN: u64 = 256 << 10;

/// Answer from the store: the client's preconditions, HEAD and Range applied
/// (`respond::from_cache`, or `respond::from_partial` for held partial content). `None` when
/// the object vanished or is unreadable, or partial content does not cover the request (the
/// caller goes to the origin then).
#[allow(clippy::too_many_arguments)]
async fn serve_stored(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    peer: SocketAddr,
    r: &ObjectRef,
    opened: Option<Opened>,
    stored: &StoredResponse,
    now: SystemTime,
    cache_status: CacheStatus,
) -> Option<Response<Body>> {
    // A manifest has no body of its own: the caller fetches (`lookup` serves manifests).
    if crate::slices::Manifest::of(stored.headers()).is_some() {
        return None;
    }
    let from_partial = if stored.status() == StatusCode::PARTIAL_CONTENT {
        Some(respond::from_partial(parts, stored, now)?)
    } else {
        None
    };
    // A body of several chunks read from disk holds I/O buffers while its client reads: it
    // takes a stream slot of its client's address (src/stream_slots.rs; those that must wait
    // for one wait here, holding none: an object opened already is dropped before the wait,
    // and opened again after it). A copy in the RAM tier takes none.
    let (mut opened, slot) = match opened {
        Some(o) => (Some(o.obj), o.slot),
        None => (ctx.store.open_ram(r).map(Box::new), None),
    };
    let in_ram = opened.as_ref().is_some_and(|o| o.source == Source::Ram);
    let slot = if slot.is_none()
        && !in_ram
        && r.body_len().is_none_or(|n| n > STREAM_SLOT_MIN)
        && parts.method != Method::HEAD
        && !peer::is_hop(parts)
    {
        match ctx.stream_slots.try_acquire(peer.ip()) {
            Some(slot) => Some(slot),
            None => {
                opened = None;
                Some(ctx.stream_slots.acquire(peer.ip()).await)
            }
        }
    } else {
        slot
    };
    let obj = match opened {
        Some(o) => *o,
        None => match open(ctx, parts, r).await {
            Ok(o) => o,
            Err(e) => {
                debug!("stored object unreadable, treating as a miss: {e}");
                return None;
            }
        },
    };
    let outcome = if obj.source == Source::Ram {
        Outcome::HitRam
    } else {
        Outcome::HitDisk
    };
    ctx.shared.metrics.request(outcome);
    let out = from_partial.unwrap_or_else(|| respond::from_cache(parts, stored, obj.body_len, now));
    let (range, sent) = match out.body {
        BodyPart::Empty => (None, 0),
        BodyPart::Full => (Some(0..obj.body_len), obj.body_len),
        BodyPart::Range { start, end } => (Some(start..end + 1), end + 1 - start),
    };
    let body = match range {
        None => body::empty(),
        Some(range) => {
            ctx.shared.metrics.response_bytes.inc_by(sent);
            match obj.in_memory(Some(range.clone())) {
                // Verified bytes in memory (a RAM copy, a small record read whole): one chunk,
                // nothing to pace or repair.
                Some(bytes) => body::full(bytes),
                None => stream_stored(ctx, parts, peer, stored, obj, outcome, range, sent),
            }
        }
    };
    let body = match slot {
        Some(slot) => body::guarded(body, slot),
        None => body,
    };
    Some(respond(out.status, out.headers, cache_status, body))
}

/// The body bytes `range` of `obj` (`sent` of them) as they stream from disk: paced to the
/// client's socket when large, finished from the origin when a block fails after the head.
#[allow(clippy::too_many_arguments)]
fn stream_stored(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    peer: SocketAddr,
    stored: &StoredResponse,
    obj: StoredObject,
    outcome: Outcome,
    range: std::ops::Range<u64>,
    sent: u64,
) -> Body {
    let whole = range.start == 0 && range.end == obj.body_len;
    let body_len = obj.body_len;
    let object_ref = obj.object_ref.clone();
    let mut chunks: paced::Chunks =
        Box::pin(obj.body(if whole { None } else { Some(range.clone()) }));
    let room = ClientConn::of(parts).map(|c| &c.room);
    if let (Outcome::HitDisk, Some(room)) = (outcome, room)
        && sent > STREAM_SLOT_MIN
    {
        chunks = Box::pin(paced::paced(
            chunks,
            range.clone(),
            room.clone(),
            ctx.keepers.clone(),
            reopen(ctx, object_ref),
        ));
    }
    if outcome == Outcome::HitDisk {
        // A disk body may fail after the head is sent: finish it from the origin.
        let repair = repair::Repair::new(ctx, parts, peer, stored, body_len);
        body::stream(repair::body(chunks, range, repair))
    } else {
        body::stream(chunks)
    }
}

/// Open the record of `r` again for the body bytes of a range (a paced stream whose chunk went
/// back to the budget): the same record or an error, never another object.
fn reopen(ctx: &Rc<Ctx>, r: ObjectRef) -> paced::Reopen {
    let ctx = ctx.clone();
    Rc::new(move |range| {
        let ctx = ctx.clone();
        let r = r.clone();
        Box::pin(async move {
            let obj = ctx.store.open(&r).await.map_err(std::io::Error::other)?;
            Ok(Box::pin(obj.body(Some(range))) as paced::Chunks)
        })
    })
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
    let sent_at = Sent::now(ctx, &key);
    let request_time = sent_at.time;
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
                        serve_stored(ctx, &parts, peer, &r, None, &updated, response_time, status)
                            .await
                    {
                        return resp;
                    }
                }
                // The 304 does not match what is stored, or the body vanished: fetch it whole.
                return fetch(ctx, parts, key, peer, None, fwd).await;
            }
            relay_origin_response(ctx, &parts, peer, key, resp, sent_at, None, fwd, None).await
        }
        other => {
            let now = ctx.shared.clock.now();
            if serve::stale_if_error(&parts.headers, &stored, now, ctx.policy_for(&parts)) {
                let status = CacheStatus::hit(&ctx.policy.name)
                    .ttl(stored.freshness(now, ctx.policy_for(&parts)).ttl())
                    .detail("stale-if-error");
                if let Some(resp) =
                    serve_stored(ctx, &parts, peer, &r, None, &stored, now, status).await
                {
                    return resp;
                }
            }
            match other {
                Ok((resp, _)) => {
                    relay_origin_response(ctx, &parts, peer, key, resp, sent_at, None, fwd, None)
                        .await
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
    // The proxy's own request: not the client's to log.
    parts
        .extensions
        .remove::<crate::request_log::UpstreamNote>();
    tokio::task::spawn_local(async move {
        let sent = Sent::now(&ctx, &key);
        let request_time = sent.time;
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
                let _ = relay_origin_response(
                    &ctx,
                    &parts,
                    peer,
                    key,
                    resp,
                    sent,
                    None,
                    Fwd::Stale,
                    None,
                )
                .await;
            }
            Err(e) => debug!("background revalidation failed: {e}"),
        }
        drop(guard);
    });
}

/// When a request went to the origin: its time (RFC 9111's request_time) and the key's
/// invalidation mark, so what it fetches is stored only if nothing invalidated the key since.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub time: SystemTime,
    pub mark: u64,
    /// Where the response came from: the origin, or the key's owner (sharding).
    pub upstream: Upstream,
}

impl Sent {
    pub(super) fn now(ctx: &Ctx, key: &CacheKey) -> Self {
        Self {
            time: ctx.shared.clock.now(),
            mark: ctx.shared.store.invalidation_mark(key.as_bytes()),
            upstream: Upstream::Origin,
        }
    }
}

/// Send a GET/HEAD-derived request to the origin and wait for its head.
async fn send(
    ctx: &Ctx,
    parts: &request::Parts,
    peer: SocketAddr,
    extra: &HeaderMap,
) -> Result<(Response<Incoming>, Duration), ProxyError> {
    let origin = ctx.origin_for(parts);
    let req = origin
        .prepare(parts, Some(peer.ip()), extra)?
        .body(origin::empty())
        .map_err(|_| ProxyError::bad_request("request cannot be forwarded"))?;
    let sent = origin.send(req).await;
    if let Ok((_, first_byte)) = &sent {
        ctx.shared.metrics.origin_fetches.inc();
        ctx.shared
            .metrics
            .origin_first_byte_seconds
            .observe(first_byte.as_secs_f64());
    }
    sent
}

/// Header fields of an origin response on their way to the client: no hop-by-hop fields, no
/// fields targeted at this cache (RFC 9213).
fn downstream(headers: &mut HeaderMap) {
    origin::strip_hop_by_hop(headers);
    policy::headers::strip_targeted(headers);
    headers.remove(policy::encoding::CODED);
}

fn origin_failure(ctx: &Ctx, e: &ProxyError, fwd: Fwd) -> Response<Body> {
    origin_failure_as(ctx, e, fwd, e.status())
}

fn origin_failure_as(ctx: &Ctx, e: &ProxyError, fwd: Fwd, status: StatusCode) -> Response<Body> {
    ctx.shared.metrics.origin_error(e.kind.as_str());
    ctx.shared.metrics.request(Outcome::OriginError);
    // The chain (addresses, library errors) goes to the log; the client gets a fixed text and
    // the Cache-Status detail.
    info!(blame = ?e.blame, kind = e.kind.as_str(), "origin failure: {e}");
    let cs = CacheStatus::forward(&ctx.policy.name, fwd).detail(e.kind.as_str());
    let mut resp = synthetic(
        status,
        &format!(
            "{} {}: {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            e.public_text()
        ),
        cs,
    );
    if e.blame == crate::error::Blame::Upstream {
        resp.extensions_mut().insert(peer::Generated("origin"));
    }
    resp
}

fn synthetic(status: StatusCode, text: &str, cache_status: CacheStatus) -> Response<Body> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    let mut resp = respond(status, headers, cache_status, body::full(text.to_string()));
    resp.extensions_mut().insert(peer::Generated("internal"));
    resp
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
