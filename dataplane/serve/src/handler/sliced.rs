//! Objects larger than `storage.sliceSize`, cached as slices (the layout and the checks are
//! `crate::slices`, pure): a manifest under the cache key, one stored object per slice.
//!
//! * An origin response to slice (a 200 with a Content-Length above the slice size, or a 206
//!   of slice-aligned bytes of such a representation, with a strong validator, no Vary,
//!   storable) makes a manifest, written before anything else; its body is then stored slice
//!   by slice as it arrives, by a task of its own that runs at the origin's speed whatever the
//!   client does. Each slice is one store record: a crash loses whole slices.
//! * A client is always answered from the slices, in order: each is read from the store, or
//!   waited for when a fetch of it is in flight (one per slice key, `coalesce`), or fetched
//!   with `Range` + `If-Range` for exactly that slice and stored as it passes. A slice whose
//!   answer is not a 206 of that slice with the manifest's validator and total length means the
//!   object changed: the manifest is dropped and the response ends short, never with bytes of
//!   two versions; the next request fetches the new version.
//! * A waiter on the key's fill whose leader sliced the response reads the slices too.
//! * A stale manifest is revalidated ([`Answer::Revalidate`]): a 304 freshens its stored
//!   fields and its slices keep serving; another answer is a miss (a new manifest). Within
//!   stale-while-revalidate its slices answer at once and it is revalidated behind them, once.

use super::*;
use crate::metrics::{ManifestEvent, SliceSource};
use crate::slices::{Manifest, Received, whole_fields};
use edgecache_store::Store;
use tokio::sync::mpsc;

/// The slice size in force: 0 when slicing is off (configured so, or larger than a record).
pub(super) fn slice_size(ctx: &Ctx) -> u64 {
    let s = ctx.shared.settings.slice_size;
    if s > ctx.shared.store.max_body_len() {
        0
    } else {
        s
    }
}

/// A nonce for a new manifest (see `crate::slices`): new slices for every manifest.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// The manifest for an origin response, when it is to be sliced; `None`: relay it as before.
pub(super) fn plan(ctx: &Ctx, rparts: &http::response::Parts) -> Option<(Manifest, Received)> {
    let size = slice_size(ctx);
    if size == 0 {
        return None;
    }
    let got = Received::of(rparts.status, &rparts.headers)?;
    let aligned = got.first.is_multiple_of(size)
        && (got.first + got.len == got.total || got.len.is_multiple_of(size));
    if !aligned || got.total > ctx.shared.settings.max_object_size {
        return None;
    }
    Some((
        Manifest::plan(&rparts.headers, got.total, size, nonce())?,
        got,
    ))
}

/// Relay an origin response that [`plan`] sliced: write the manifest, store the body slice
/// by slice on its own task, answer the client from the slices.
#[allow(clippy::too_many_arguments)]
pub(super) async fn relay(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    peer: SocketAddr,
    key: CacheKey,
    rparts: http::response::Parts,
    rbody: super::peer::UpBody,
    sent: Sent,
    guard: Option<LeaderGuard>,
    fwd: Fwd,
    (manifest, got): (Manifest, Received),
) -> Response<Body> {
    let response_time = ctx.shared.clock.now();
    let mut fields = whole_fields(&rparts.headers, got.total);
    if let Some(m) = manifest.marker() {
        fields.insert(crate::slices::MARKER, m);
    }
    let mut as_get = parts.clone();
    as_get.method = Method::GET;
    let stored = StoredResponse::from_fields(
        &as_get.headers,
        StatusCode::OK,
        &fields,
        sent.time,
        response_time,
    );
    let mut status = CacheStatus::forward(&ctx.policy.name, fwd).fwd_status(rparts.status.as_u16());
    let written = write_manifest(ctx, &key, &stored, sent.mark).await;
    if let Some(g) = guard {
        // Waiters read the slices as this client does (`follow`).
        g.flight.set_head(Head {
            stored: stored.clone(),
            shareable: false,
            tail: false,
            keep: false,
            growing: None,
            sliced: written.is_ok(),
        });
        g.retire();
        g.flight.finish(End::Complete);
    }
    ctx.shared.metrics.request(Outcome::Miss);
    if let Err(e) = written {
        // Not stored (admission, a full store, an invalidation since the request): the body
        // goes to this client only.
        ctx.shared.metrics.write_abort(e.as_str());
        status = status.detail(e.as_str());
        let out = respond::from_cache(parts, &stored, got.total, response_time);
        let mut headers = out.headers;
        headers.remove(crate::slices::MARKER);
        let body = match out.body {
            BodyPart::Empty => body::empty(),
            part => {
                let (a, b) = match part {
                    BodyPart::Range { start, end } => (start, end + 1),
                    _ => (0, got.total),
                };
                let rel = a.saturating_sub(got.first)..b.saturating_sub(got.first);
                if a < got.first || b > got.first + got.len {
                    // Outside what arrived: nothing to answer with.
                    return origin_failure(
                        ctx,
                        &ProxyError::bad_request("range outside the fetched bytes"),
                        fwd,
                    );
                }
                let chunks = rbody
                    .into_data_stream()
                    .map(|r| r.map_err(io::Error::other));
                body::stream(body::slice(chunks, rel))
            }
        };
        return respond(out.status, headers, status, body);
    }
    let first = got.first / manifest.slice_size;
    let guards = manifest
        .touched(&(got.first..got.first + got.len))
        .map(|i| {
            match ctx
                .shared
                .coalescer
                .join(&manifest.slice_key(key.as_bytes(), i))
            {
                Role::Leader(g) => Some(g),
                Role::Waiter(_) => None,
            }
        })
        .collect::<Vec<_>>();
    let pump = {
        let (ctx, manifest, key) = (ctx.clone(), manifest.clone(), key.clone());
        async move {
            let fill = Fill {
                ctx: &ctx,
                manifest: &manifest,
                key: key.as_bytes(),
                first_slice: first,
            };
            if let Err(e) = fill.store(rbody, got.first, got.len, guards, None).await {
                debug!("sliced fill ended early: {e}");
            }
        }
    };
    tokio::task::spawn_local(pump);
    serve(
        ctx,
        parts,
        peer,
        &key,
        manifest,
        &stored,
        None,
        response_time,
        status.stored(true),
    )
    .await
}

/// Do what `answer` leaves to do for a request that found the manifest `r`.
///
/// [`Answer::Revalidate`]: a stale manifest is revalidated with a conditional request from
/// its validator (RFC 9111 4.3.1), for the client's slices when it asked for one range. A 304
/// that selects it freshens its stored fields (4.3.4) and the client is answered from the
/// slices it names, none fetched again; any other answer is relayed as a miss (a new version
/// makes a new manifest, with a new nonce: the old slices are never read again). Concurrent
/// requests for the same stale manifest wait for one revalidation and look again.
///
/// [`Answer::Slices`] of a manifest stale within stale-while-revalidate (RFC 5861 3; what
/// `lookup` decided, decided again from the same fields): served now, and revalidated once in
/// the background ([`revalidate_behind`]), as a whole object is.
pub(super) async fn finish(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    (r, manifest): (ObjectRef, Manifest),
    answer: Answer,
) -> Response<Body> {
    match answer {
        Answer::Slices(stored, mut status, now) => {
            if let ServeDecision::ServeStale { conditional, .. } =
                serve::decide(&parts, &stored, now, ctx.policy_for(&parts))
            {
                let asked = Asked {
                    stored: stored.clone(),
                    conditional,
                    may_serve_stale_on_error: false,
                    fwd: Fwd::Stale,
                };
                revalidate_behind(ctx, &parts, &key, peer, (&r, &manifest), asked);
                status = status.detail("stale-while-revalidate");
            }
            serve(
                ctx,
                &parts,
                peer,
                &key,
                manifest,
                &stored,
                Some(r),
                now,
                status,
            )
            .await
        }
        Answer::Relay(resp, sent, fwd) => {
            relay_origin_response(ctx, &parts, peer, key, resp, sent, None, fwd, None).await
        }
        Answer::Fill(fwd) => {
            let miss = Miss::of(&parts, None);
            fill(ctx, parts, key, peer, fwd, miss).await
        }
        Answer::Done(resp) => resp,
        Answer::Revalidate(asked) => {
            let _guard = match ctx.shared.coalescer.join(&revalidation_key(&key, &r)) {
                Role::Leader(guard) => guard,
                Role::Waiter(flight) => {
                    ctx.shared.metrics.slice_manifest(ManifestEvent::Coalesced);
                    flight.ended().await;
                    return Box::pin(lookup(ctx, parts, key, peer)).await;
                }
            };
            let answer = asked.origin(ctx, &parts, &key, peer, (&r, &manifest)).await;
            Box::pin(finish(ctx, parts, key, peer, (r, manifest), answer)).await
        }
    }
}

/// A stale manifest's revalidation: its stored response, the conditional fields from its
/// validator, whether an error answer may be met with it stale, and the Cache-Status `fwd`.
pub(super) struct Asked {
    pub stored: StoredResponse,
    pub conditional: HeaderMap,
    pub may_serve_stale_on_error: bool,
    pub fwd: Fwd,
}

/// What a lookup or a revalidation of a manifest leaves to do.
pub(super) enum Answer {
    /// Answer from the manifest's slices, with these stored fields, status and time.
    Slices(StoredResponse, CacheStatus, SystemTime),
    /// Relay the origin's answer as a miss (a new version: a new manifest).
    Relay(Response<Incoming>, Sent, Fwd),
    /// Fetch the object as a miss.
    Fill(Fwd),
    /// This response.
    Done(Response<Body>),
    /// Revalidate the stale manifest, then do what that leaves to do.
    Revalidate(Asked),
}

impl Asked {
    /// Send the conditional request (for the client's slices when it asked for one range)
    /// and decide on its answer.
    async fn origin(
        self,
        ctx: &Ctx,
        parts: &request::Parts,
        key: &CacheKey,
        peer: SocketAddr,
        (r, manifest): (&ObjectRef, &Manifest),
    ) -> Answer {
        let sent = Sent::now(ctx, key);
        let result = self.send(ctx, parts, peer).await;
        // As for a whole object (`handler::revalidate`): no answer, or an error answer when
        // the decision allowed serving stale on one.
        let failed = match &result {
            Ok((resp, _)) => {
                self.may_serve_stale_on_error && serve::is_error_for_stale(resp.status())
            }
            Err(_) => true,
        };
        let now = ctx.shared.clock.now();
        let policy = ctx.policy_for(parts);
        if failed && serve::stale_if_error(&parts.headers, &self.stored, now, policy) {
            let status = CacheStatus::hit(&ctx.policy.name)
                .ttl(self.stored.freshness(now, policy).ttl())
                .detail("stale-if-error");
            ctx.shared.metrics.request(Outcome::HitDisk);
            return Answer::Slices(self.stored, status, now);
        }
        let resp = match result {
            Ok((resp, _)) => resp,
            // A stored response that may not be served stale: 504 (RFC 9111 5.2.2.2).
            Err(e) => {
                let resp = origin_failure_as(ctx, &e, self.fwd, StatusCode::GATEWAY_TIMEOUT);
                return Answer::Done(resp);
            }
        };
        if resp.status() != StatusCode::NOT_MODIFIED {
            return match super::fill::aligned_answer(ctx, resp) {
                Some(resp) => Answer::Relay(resp, sent, self.fwd),
                // A 206 that is not slices of a new version: ask for the client's own range.
                None => Answer::Fill(self.fwd),
            };
        }
        let Some(updated) = self.freshen(ctx, resp, sent, (r, manifest)).await else {
            // A 304 that does not select the manifest: fetch the object again.
            return Answer::Fill(self.fwd);
        };
        ctx.shared.metrics.request(Outcome::Revalidated);
        let status = CacheStatus::forward(&ctx.policy.name, self.fwd).fwd_status(304);
        let response_time = updated.response_time();
        Answer::Slices(updated, status, response_time)
    }

    /// The conditional request to the origin, with the client's slices as its Range when it
    /// asked for one range.
    async fn send(
        &self,
        ctx: &Ctx,
        parts: &request::Parts,
        peer: SocketAddr,
    ) -> Result<(Response<Incoming>, Duration), ProxyError> {
        let mut fetch_parts = parts.clone();
        fetch_parts.method = Method::GET;
        policy::request::strip_for_fill(&mut fetch_parts.headers);
        let mut extra = self.conditional.clone();
        let size = slice_size(ctx);
        if size > 0
            && policy::partial::forwards_range(&parts.method, &parts.headers)
            && let Some(range) = parts
                .headers
                .get(header::RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| crate::slices::aligned_request(v, size))
        {
            extra.insert(header::RANGE, range);
        }
        send(ctx, &fetch_parts, peer, &extra).await
    }

    /// Freshen the manifest with the origin's 304 (`resp`) to the request `sent` (RFC 9111
    /// 4.3.4) and store its updated fields (counted `freshened`): the updated stored
    /// response, or `None` when the 304 does not select this manifest.
    async fn freshen(
        &self,
        ctx: &Ctx,
        resp: Response<Incoming>,
        sent: Sent,
        (r, manifest): (&ObjectRef, &Manifest),
    ) -> Option<StoredResponse> {
        let response_time = ctx.shared.clock.now();
        let (mut rparts, _) = resp.into_parts();
        // An origin cannot make or change a manifest.
        rparts.headers.remove(crate::slices::MARKER);
        let Freshen::Updated(updated) =
            validate::freshen(&self.stored, &rparts, sent.time, response_time)
        else {
            return None;
        };
        if Manifest::of(updated.headers()).as_ref() != Some(manifest) {
            return None;
        }
        match ctx.store.update_meta(r, updated.encode()).await {
            Ok(()) => ctx.shared.metrics.slice_manifest(ManifestEvent::Freshened),
            Err(e) => debug!("cannot update a manifest's stored headers after 304: {e}"),
        }
        Some(*updated)
    }
}

/// stale-while-revalidate (RFC 5861 3): revalidate the manifest on a task of its own, one at
/// a time (a request that finds its revalidation in flight starts none), as
/// `handler::background_revalidate` does for a whole object: a 304 freshens it, another
/// answer is stored as a miss's would be (a new version, a new manifest), and nobody waits
/// for either; a failure leaves the manifest as it is. The client's request is not counted
/// again, nor logged with the origin's answer.
fn revalidate_behind(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    key: &CacheKey,
    peer: SocketAddr,
    (r, manifest): (&ObjectRef, &Manifest),
    asked: Asked,
) {
    let Role::Leader(guard) = ctx.shared.coalescer.join(&revalidation_key(key, r)) else {
        return;
    };
    let (ctx, mut parts, key) = (ctx.clone(), parts.clone(), key.clone());
    let (r, manifest) = (r.clone(), manifest.clone());
    // The proxy's own request: not the client's to log.
    parts
        .extensions
        .remove::<crate::request_log::UpstreamNote>();
    tokio::task::spawn_local(async move {
        let sent = Sent::now(&ctx, &key);
        match asked.send(&ctx, &parts, peer).await {
            Ok((resp, _)) if resp.status() == StatusCode::NOT_MODIFIED => {
                if asked
                    .freshen(&ctx, resp, sent, (&r, &manifest))
                    .await
                    .is_none()
                {
                    debug!("a background 304 does not select the manifest");
                }
            }
            Ok((resp, _)) => {
                if let Some(resp) = super::fill::aligned_answer(&ctx, resp) {
                    parts.method = Method::GET;
                    policy::request::strip_for_fill(&mut parts.headers);
                    // Stored as a miss's would be; nobody reads the response.
                    let answer = Answer::Relay(resp, sent, Fwd::Stale);
                    drop(Box::pin(finish(&ctx, parts, key, peer, (r, manifest), answer)).await);
                }
            }
            Err(e) => debug!("background revalidation of a manifest failed: {e}"),
        }
        drop(guard);
    });
}

/// Publish the manifest (an empty body; everything is in its stored fields).
async fn write_manifest(
    ctx: &Ctx,
    key: &CacheKey,
    stored: &StoredResponse,
    mark: u64,
) -> Result<(), edgecache_store::StoreError> {
    let mut w = ctx.store.begin_write(
        Bytes::copy_from_slice(key.as_bytes()),
        Bytes::from(stored.vary().to_bytes()),
        stored.encode(),
        Some(0),
    )?;
    w.publish_only_if_unchanged(mark);
    w.finish().await?;
    ctx.shared.metrics.slice_manifest(ManifestEvent::Written);
    Ok(())
}

/// Answer a request from the slices of `manifest` (`stored`: its stored response, the
/// manifest ref when it came from the store). Like a whole object's hit, a large body takes a
/// stream slot of the client's address, and a slice read from disk is paced to the client's
/// socket (src/paced.rs), so stalled clients hold no more I/O buffers than for whole objects.
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    peer: SocketAddr,
    key: &CacheKey,
    manifest: Manifest,
    stored: &StoredResponse,
    manifest_ref: Option<ObjectRef>,
    now: SystemTime,
    cache_status: CacheStatus,
) -> Response<Body> {
    let out = respond::from_cache(parts, stored, manifest.total, now);
    let mut headers = out.headers;
    headers.remove(crate::slices::MARKER);
    let range = match out.body {
        BodyPart::Empty => return respond(out.status, headers, cache_status, body::empty()),
        BodyPart::Full => 0..manifest.total,
        BodyPart::Range { start, end } => start..end + 1,
    };
    let slot = if range.end - range.start > STREAM_SLOT_MIN && !super::peer::is_hop(parts) {
        match ctx.stream_slots.try_acquire(peer.ip()) {
            Some(slot) => Some(slot),
            None => Some(ctx.stream_slots.acquire(peer.ip()).await),
        }
    } else {
        None
    };
    ctx.shared
        .metrics
        .response_bytes
        .inc_by(range.end - range.start);
    let mut fetch_parts = parts.clone();
    fetch_parts.method = Method::GET;
    policy::request::strip_for_fill(&mut fetch_parts.headers);
    fetch_parts
        .extensions
        .remove::<crate::request_log::UpstreamNote>();
    let room = ClientConn::of(parts).map(|c| c.room.clone());
    let reader = Rc::new(Reader {
        ctx: ctx.clone(),
        parts: fetch_parts,
        peer,
        key: key.clone(),
        manifest,
        stored: stored.headers().clone(),
        manifest_ref,
        room,
    });
    let chunks = futures_util::stream::iter(reader.manifest.touched(&range))
        .then(move |i| {
            let reader = reader.clone();
            let range = range.clone();
            async move { reader.slice(i, &range).await }
        })
        .flatten()
        // Nothing after a failed slice: the response ends short there.
        .scan(false, |failed, chunk| {
            let next = (!*failed).then(|| {
                *failed = chunk.is_err();
                chunk
            });
            async move { next }
        });
    let body = body::stream(chunks);
    let body = match slot {
        Some(slot) => body::guarded(body, slot),
        None => body,
    };
    respond(out.status, headers, cache_status, body)
}

/// Reads a range of a sliced object for one client, slice after slice.
struct Reader {
    ctx: Rc<Ctx>,
    /// The client's request made fit for the origin (a GET without its conditionals).
    parts: request::Parts,
    peer: SocketAddr,
    key: CacheKey,
    manifest: Manifest,
    /// The manifest's stored fields (its validators).
    stored: HeaderMap,
    manifest_ref: Option<ObjectRef>,
    /// The client socket's send room, to pace disk reads to it.
    room: Option<crate::send_room::SendRoom>,
}

impl Reader {
    /// The bytes of `range` (offsets in the representation) that slice `i` holds: from the
    /// store, after the fetch of it in flight, or fetched now.
    async fn slice(&self, i: u64, range: &std::ops::Range<u64>) -> paced::Chunks {
        let m = &self.manifest;
        let b = m.bounds(i);
        let want = range.start.max(b.start) - b.start..range.end.min(b.end) - b.start;
        let skey = m.slice_key(self.key.as_bytes(), i);
        let metrics = &self.ctx.shared.metrics;
        if let Some(chunks) = self.stored_slice(i, &skey, &want).await {
            metrics.slice(SliceSource::Store);
            return chunks;
        }
        let guard = match self.ctx.shared.coalescer.join(&skey) {
            Role::Leader(g) => Some(g),
            Role::Waiter(flight) => {
                flight.ended().await;
                if let Some(chunks) = self.stored_slice(i, &skey, &want).await {
                    metrics.slice(SliceSource::Waited);
                    return chunks;
                }
                None
            }
        };
        let want = b.start + want.start..b.start + want.end;
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
        match self.fetch(i).await {
            Ok((rbody, m)) => {
                metrics.slice(SliceSource::Origin);
                let (ctx, key) = (self.ctx.clone(), self.key.clone());
                tokio::task::spawn_local(async move {
                    let fill = Fill {
                        ctx: &ctx,
                        manifest: &m,
                        key: key.as_bytes(),
                        first_slice: i,
                    };
                    let b = m.bounds(i);
                    let len = b.end - b.start;
                    let client = Some((want, &tx));
                    if let Err(e) = fill.store(rbody, b.start, len, vec![guard], client).await {
                        let _ = tx.send(Err(io::Error::other(e))).await;
                    }
                });
                Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|c| (c, rx))
                }))
            }
            Err(e) => {
                debug!("sliced response ends short: {e}");
                Box::pin(futures_util::stream::once(async move { Err(e) }))
            }
        }
    }

    /// Bytes `want` (offsets in the slice) of slice `i` from the store, if it holds it.
    async fn stored_slice(
        &self,
        i: u64,
        skey: &[u8],
        want: &std::ops::Range<u64>,
    ) -> Option<paced::Chunks> {
        for r in self.ctx.shared.store.lookup(skey) {
            let Ok(obj) = self.ctx.store.open(&r).await else {
                continue;
            };
            if !self.manifest.is_slice(i, &obj.meta, obj.body_len) {
                continue;
            }
            let disk = obj.source == Source::Disk;
            let object_ref = obj.object_ref.clone();
            let chunks: paced::Chunks = Box::pin(obj.body(Some(want.clone())));
            return Some(match &self.room {
                Some(room) if disk && want.end - want.start > STREAM_SLOT_MIN => {
                    Box::pin(paced::paced(
                        chunks,
                        want.clone(),
                        room.clone(),
                        self.ctx.keepers.clone(),
                        reopen(&self.ctx, object_ref),
                    ))
                }
                _ => chunks,
            });
        }
        None
    }

    /// Ask the origin for slice `i` and check that the answer is that slice of this version;
    /// on a mismatch the manifest is dropped.
    async fn fetch(&self, i: u64) -> io::Result<(super::peer::UpBody, Manifest)> {
        let m = &self.manifest;
        let fields = m
            .continuation(i)
            .and_then(|c| c.request_fields())
            .ok_or_else(|| io::Error::other("no slice to ask for"))?;
        let (resp, _) = send(&self.ctx, &self.parts, self.peer, &fields)
            .await
            .map_err(io::Error::other)?;
        let (rparts, rbody) = resp.into_parts();
        if !m.accepts(i, &self.stored, rparts.status, &rparts.headers) {
            // Another version (or an answer that names none): these slices no longer combine.
            self.ctx.shared.metrics.write_abort("slice_mismatch");
            self.ctx
                .shared
                .metrics
                .slice_manifest(ManifestEvent::Dropped);
            match &self.manifest_ref {
                Some(r) => {
                    self.ctx.shared.store.remove_object(r);
                }
                None => drop_manifest(&self.ctx.shared.store, &self.key),
            }
            return Err(io::Error::other(format!(
                "slice {i} of another version (status {})",
                rparts.status
            )));
        }
        Ok((rbody.boxed_unsync(), m.clone()))
    }
}

/// Drop the manifest of the key when it was not read from the store (a fill's own): every
/// record of the key goes, and a refetch replaces it; a newer manifest written meanwhile is
/// lost with it (fetched again), never mixed with these slices.
fn drop_manifest(store: &Store, key: &CacheKey) {
    store.remove(key.as_bytes());
}

/// Stores an origin body of slices of one version.
struct Fill<'a> {
    ctx: &'a Rc<Ctx>,
    manifest: &'a Manifest,
    key: &'a [u8],
    /// The index of the slice the body starts with (`guards[0]` is its fetch's).
    first_slice: u64,
}

impl Fill<'_> {
    /// Store `len` bytes of `body`, from byte `first` (a slice boundary) of the
    /// representation, one record per slice, each published when whole (and its fetch's
    /// waiters told); bytes within `client`'s range go to its channel as they pass. `Ok(false)`
    /// when the client went away (the slice in progress is finished first).
    async fn store(
        &self,
        mut body: super::peer::UpBody,
        first: u64,
        len: u64,
        mut guards: Vec<Option<LeaderGuard>>,
        mut client: Option<(std::ops::Range<u64>, &mpsc::Sender<io::Result<Bytes>>)>,
    ) -> Result<bool, String> {
        let m = self.manifest;
        let end = first + len;
        let mut pos = first;
        let mut writer: Option<ObjectWriter> = None;
        let idle = self.ctx.origin_idle();
        let metrics = &self.ctx.shared.metrics;
        while pos < end {
            let Some(mut chunk) = super::fill::origin_chunk(&mut body, idle, metrics).await? else {
                return Err(format!("the body ended at {pos} of {end}"));
            };
            while !chunk.is_empty() {
                if pos >= end {
                    return Err("the body is longer than its range".into());
                }
                let i = pos / m.slice_size;
                let b = m.bounds(i);
                let piece = chunk.split_to(((b.end - pos) as usize).min(chunk.len()));
                if pos == b.start {
                    writer = self.begin(i, b.end - b.start);
                }
                if let Some(w) = &mut writer
                    && let Err(e) = w.write(piece.clone()).await
                {
                    metrics.write_abort(e.as_str());
                    writer = None;
                }
                if let Some((want, tx)) = &client {
                    let (a, z) = (want.start.max(pos), want.end.min(pos + piece.len() as u64));
                    if a < z {
                        let part = piece.slice((a - pos) as usize..(z - pos) as usize);
                        if tx.send(Ok(part)).await.is_err() {
                            client = None;
                        }
                    }
                }
                pos += piece.len() as u64;
                if pos == b.end {
                    if let Some(w) = writer.take()
                        && let Err(e) = w.finish().await
                    {
                        metrics.write_abort(e.as_str());
                    }
                    let g = i
                        .checked_sub(self.first_slice)
                        .and_then(|k| guards.get_mut(k as usize))
                        .and_then(Option::take);
                    if let Some(g) = g {
                        g.retire();
                        g.flight.finish(End::Complete);
                    }
                }
            }
        }
        Ok(client.is_some())
    }

    /// A writer for slice `i` (`len` bytes), or `None` when the store does not take it (the
    /// slice is then served but not kept).
    fn begin(&self, i: u64, len: u64) -> Option<ObjectWriter> {
        match self.ctx.store.begin_write(
            Bytes::from(self.manifest.slice_key(self.key, i)),
            Bytes::new(),
            Bytes::from(self.manifest.slice_meta(i)),
            Some(len),
        ) {
            Ok(w) => Some(w),
            Err(e) => {
                if !matches!(e, edgecache_store::StoreError::NotAdmitted) {
                    self.ctx.shared.metrics.write_abort(e.as_str());
                }
                None
            }
        }
    }
}
