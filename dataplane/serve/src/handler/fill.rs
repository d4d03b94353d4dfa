//! Filling the cache from the origin: one fetch per key (coalesced), streamed to the client
//! while it is written to the store and replayed to the requests waiting on it; the client's
//! own validators and Range answered from the fetched response.

use super::*;

/// How a request the store cannot answer goes to the origin.
pub(super) struct Miss {
    /// Send the client's single byte range to the origin (`policy::partial::forwards_range`)
    /// rather than fetching the whole representation: nothing complete is stored for it.
    range: bool,
    /// The selected stored response when it is partial content, to combine a new 206 with.
    pub held: Option<(ObjectRef, StoredResponse)>,
    /// What the index held for the key at the lookup, when the lookup says.
    pub seen: Option<super::Seen>,
}

impl Miss {
    /// For `parts`, given the stored response the lookup selected (if any).
    pub fn of(parts: &request::Parts, selected: Option<(&ObjectRef, &StoredResponse)>) -> Self {
        let held = selected
            .filter(|(_, s)| s.status() == StatusCode::PARTIAL_CONTENT)
            .map(|(r, s)| (r.clone(), s.clone()));
        let complete_stored = selected.is_some() && held.is_none();
        Miss {
            range: !complete_stored
                && policy::partial::forwards_range(&parts.method, &parts.headers),
            held,
            seen: None,
        }
    }

    /// Why it goes to the origin when its selected response could not answer: held partial
    /// content that does not cover the request is `fwd=partial` (RFC 9211 2.2).
    pub fn unanswered(&self) -> Fwd {
        if self.held.is_some() {
            Fwd::Partial
        } else {
            Fwd::UriMiss
        }
    }
}

/// Go to the origin for a request the store cannot answer: one origin fetch per key, shared
/// with concurrent requests for it. When the origin answers a forwarded range with the whole
/// 200, the requests waiting on it are served from it; a 206 answers only its own request (see
/// `follow`).
pub(super) async fn fill(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    fwd: Fwd,
    miss: Miss,
) -> Response<Body> {
    // Hit-for-pass: the last response for this key could not be stored; nothing is gained by
    // waiting on another request's fetch.
    if ctx.shared.coalescer.passes(key.as_bytes()) {
        return fetch(ctx, parts, key, peer, None, Fwd::Bypass).await;
    }
    match ctx.shared.coalescer.join(key.as_bytes()) {
        // A fill of the key landed between the lookup and here (its flight left the table
        // after its publish): look again rather than fetch it twice.
        Role::Leader(guard)
            if miss.seen.is_some_and(|s| {
                s != super::Seen::of(&ctx.shared.store.lookup(key.as_bytes()))
            }) =>
        {
            drop(guard);
            Box::pin(super::lookup(ctx, parts, key, peer)).await
        }
        Role::Leader(guard) if miss.range => {
            fetch_range(ctx, parts, key, peer, miss.held, guard, fwd).await
        }
        Role::Leader(guard) => fetch(ctx, parts, key, peer, Some(guard), fwd).await,
        // Complete and still in the table: its store write is landing (only a fill being
        // stored answers before it leaves the table). Read what it stores, as a hit does.
        Role::Waiter(flight) if flight.complete() => {
            flight.landed().await;
            Box::pin(super::lookup(ctx, parts, key, peer)).await
        }
        Role::Waiter(flight) => follow(ctx, parts, key, peer, flight, fwd).await,
    }
}

/// A single-range GET: the client's Range and If-Range go to the origin (its validators are
/// the cache's to answer).
async fn fetch_range(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    held: Option<(ObjectRef, StoredResponse)>,
    guard: LeaderGuard,
    fwd: Fwd,
) -> Response<Body> {
    let mut fetch_parts = parts.clone();
    fetch_parts.headers.remove(header::IF_NONE_MATCH);
    fetch_parts.headers.remove(header::IF_MODIFIED_SINCE);
    let size = super::sliced::slice_size(ctx);
    let aligned = match &parts
        .headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
    {
        // Not through the owner (sharding): its answer is not this node's to slice.
        Some(v) if held.is_none() && size > 0 && ctx.shared.sharding.is_none() => {
            crate::slices::aligned_request(v, size)
        }
        _ => None,
    };
    let guard = match aligned {
        Some(range) => {
            let mut aligned_parts = fetch_parts.clone();
            aligned_parts.headers.insert(header::RANGE, range);
            match fetch_aligned(ctx, &parts, &aligned_parts, peer, &key, guard, fwd).await {
                Ok(resp) => return resp,
                Err(guard) => guard,
            }
        }
        None => guard,
    };
    let mut sent = Sent::now(ctx, &key);
    match super::peer::send_fill(ctx, &fetch_parts, peer, &key, true).await {
        Ok((resp, upstream)) => {
            sent.upstream = upstream;
            relay_origin_response(ctx, &parts, peer, key, resp, sent, Some(guard), fwd, held).await
        }
        Err(e) => {
            drop(guard);
            origin_failure(ctx, &e, fwd)
        }
    }
}

/// A first range request sent with its Range widened to whole slices
/// (`slices::aligned_request`): a 206 of slices of a large object is cached as slices, a 206 of
/// the whole (small) representation is stored as its 200, and a 200 or any other answer is
/// relayed as before. `Err`: a 206 of part of a representation that is not sliced (no strong
/// validator, or not aligned): the caller asks for the client's own range instead.
async fn fetch_aligned(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    aligned_parts: &request::Parts,
    peer: SocketAddr,
    key: &CacheKey,
    guard: LeaderGuard,
    fwd: Fwd,
) -> Result<Response<Body>, LeaderGuard> {
    let sent = Sent::now(ctx, key);
    let resp = match send(ctx, aligned_parts, peer, &HeaderMap::new()).await {
        Ok((resp, _)) => resp,
        Err(e) => {
            drop(guard);
            return Ok(origin_failure(ctx, &e, fwd));
        }
    };
    let Some(resp) = aligned_answer(ctx, resp) else {
        return Err(guard);
    };
    Ok(relay_origin_response(
        ctx,
        parts,
        peer,
        key.clone(),
        resp,
        sent,
        Some(guard),
        fwd,
        None,
    )
    .await)
}

/// The origin's answer to a Range widened to whole slices, made fit to relay: a 206 of the
/// whole (small) representation becomes its 200, a 206 of slices of a large one stays; `None`
/// for a 206 of part of a representation that is not sliced (the caller asks for the
/// client's own range instead). Any other answer is relayed as it is.
pub(super) fn aligned_answer(ctx: &Ctx, resp: Response<Incoming>) -> Option<Response<Incoming>> {
    let (mut rparts, rbody) = resp.into_parts();
    if rparts.status == StatusCode::PARTIAL_CONTENT {
        match crate::slices::Received::of(rparts.status, &rparts.headers) {
            Some(got) if got.whole() => {
                rparts.status = StatusCode::OK;
                rparts.headers = crate::slices::whole_fields(&rparts.headers, got.total);
            }
            Some(_) if super::sliced::plan(ctx, &rparts).is_some() => {}
            _ => return None,
        }
    }
    Some(Response::from_parts(rparts, rbody))
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
    // The leader's fetch has the origin's timeouts; past them, and when it failed before a
    // response head, try on our own.
    let Ok(Some(head)) = tokio::time::timeout(ctx.head_deadline(), flight.head()).await else {
        ctx.shared.metrics.coalesce_gave_up.inc();
        return fetch(ctx, parts, key, peer, None, fwd).await;
    };
    if head.sliced {
        // The leader stored a manifest: read the slices as a hit does.
        return Box::pin(super::lookup(ctx, parts, key, peer)).await;
    }
    // The leader's response may answer this request only where a stored copy could: it is
    // storable, its Vary matches, and an authorized request may reuse it (RFC 9111 3.5).
    // If-Match / If-Unmodified-Since are the origin's to evaluate: such a request fetches.
    let authorized_refused = parts.headers.contains_key(header::AUTHORIZATION)
        && !policy::storable::allows_authorized(&head.stored.directives().cc);
    let origin_precondition = parts.headers.contains_key(header::IF_MATCH)
        || parts.headers.contains_key(header::IF_UNMODIFIED_SINCE);
    // A 206 the origin sent for a whole fetch answers only the leader.
    if !head.shareable
        || head.stored.status() == StatusCode::PARTIAL_CONTENT
        || !head.stored.matches(&parts.headers)
        || authorized_refused
        || origin_precondition
    {
        return fetch(ctx, parts, key, peer, None, fwd).await;
    }
    if !head.tail && head.growing.is_none() {
        // Too large to replay from memory, and not stored as it arrives (unknown length):
        // wait for the stored copy.
        if flight.landed().await == End::Complete
            && let Selected::One(r, stored, obj) = select(ctx, &key, &parts, peer).await
        {
            let now = ctx.shared.clock.now();
            let status = CacheStatus::hit(&ctx.policy.name)
                .ttl(stored.freshness(now, ctx.policy_for(&parts)).ttl())
                .collapsed(true);
            if let Some(resp) =
                serve_stored(ctx, &parts, peer, &r, Some(obj), &stored, now, status).await
            {
                return resp;
            }
        }
        return fetch(ctx, parts, key, peer, None, fwd).await;
    }
    ctx.shared.metrics.request(Outcome::Coalesced);
    let mut headers = head.stored.headers().clone();
    downstream(&mut headers);
    let status = CacheStatus::forward(&ctx.policy.name, fwd)
        .fwd_status(head.stored.status().as_u16())
        .collapsed(true);
    let content_length = policy::partial::content_length(head.stored.headers());
    let answer = ClientAnswer::of(&parts, &head.stored, content_length, ctx.shared.clock.now());
    let (code, client_body) = answer.apply(head.stored.status(), &mut headers);
    let Some(client_range) = client_body else {
        return respond(code, headers, status, body::empty());
    };
    let count = count_sent(ctx);
    let body = match (head.growing, client_range) {
        // From the store, as the leader's fetch writes it.
        (Some(g), range) => body::stream(ctx.store.read_growing(g, range).inspect(count)),
        (None, None) => {
            body::stream(feed::flight_chunks(flight, 0, feed::NotKept::Fail).inspect(count))
        }
        (None, Some(range)) => {
            let chunks = feed::flight_chunks(flight, 0, feed::NotKept::Fail);
            body::stream(body::slice(chunks, range).inspect(count))
        }
    };
    respond(code, headers, status, body)
}

/// Counts the body bytes a client is sent, as its body stream yields them.
fn count_sent(ctx: &Ctx) -> impl FnMut(&io::Result<Bytes>) + 'static {
    let metrics = ctx.shared.metrics.clone();
    move |c| {
        if let Ok(c) = c {
            metrics.response_bytes.inc_by(c.len() as u64);
        }
    }
}

/// Fetch from the origin, stream to the client, store when allowed, and feed waiters.
pub(super) async fn fetch(
    ctx: &Rc<Ctx>,
    parts: request::Parts,
    key: CacheKey,
    peer: SocketAddr,
    guard: Option<LeaderGuard>,
    fwd: Fwd,
) -> Response<Body> {
    let mut sent = Sent::now(ctx, &key);
    // A HEAD miss is fetched as a GET so the object can be stored (HEAD is then served from it).
    // The whole object is fetched so it can be stored: the client's Range and validators are
    // the cache's to answer, not the origin's.
    let mut fetch_parts = parts.clone();
    if fetch_parts.method == Method::HEAD {
        fetch_parts.method = Method::GET;
    }
    policy::request::strip_for_fill(&mut fetch_parts.headers);
    // Hit-for-pass goes straight to the origin: the owner would pass it on too.
    let to_owner = fwd != Fwd::Bypass;
    match super::peer::send_fill(ctx, &fetch_parts, peer, &key, to_owner).await {
        Ok((resp, upstream)) => {
            sent.upstream = upstream;
            relay_origin_response(ctx, &parts, peer, key, resp, sent, guard, fwd, None).await
        }
        Err(e) => {
            drop(guard);
            origin_failure(ctx, &e, fwd)
        }
    }
}

/// Send an origin response on to the client while storing it when the policy allows. A 206
/// that continues `held` partial content is stored combined with it (RFC 9111 3.4).
#[allow(clippy::too_many_arguments)]
pub(super) async fn relay_origin_response(
    ctx: &Rc<Ctx>,
    parts: &request::Parts,
    peer: SocketAddr,
    key: CacheKey,
    resp: Response<impl http_body::Body<Data = Bytes, Error = hyper::Error> + Send + 'static>,
    sent: Sent,
    guard: Option<LeaderGuard>,
    fwd: Fwd,
    held: Option<(ObjectRef, StoredResponse)>,
) -> Response<Body> {
    let request_time = sent.time;
    let response_time = ctx.shared.clock.now();
    let (mut rparts, rbody) = resp.into_parts();
    // The fields that make a stored response a manifest, or mark it compressed by the cache,
    // are the cache's own.
    rparts.headers.remove(crate::slices::MARKER);
    rparts.headers.remove(policy::encoding::CODED);
    let rbody = rbody.boxed_unsync();
    // The response as stored; the stored GET answers HEAD too, so judge it as a GET, with its
    // framing as it arrived.
    let as_get = match parts.method {
        Method::GET => std::borrow::Cow::Borrowed(parts),
        _ => {
            let mut p = parts.clone();
            p.method = Method::GET;
            std::borrow::Cow::Owned(p)
        }
    };
    // Its freshness fields, read once for the verdict and the stored response: compression
    // changes none of them (policy::freshness::BASIS_FIELDS).
    let basis = policy::freshness::Basis::of(&rparts.headers, response_time);
    let verdict =
        policy::storable::storable_as_received(&as_get, &rparts, &basis, ctx.policy_for(&as_get));
    // Compressed as it arrives when the site, the response and the client allow it: decided
    // before anything else reads the fields, which change with it.
    let compression = compression(ctx, parts, &mut rparts, sent.upstream, held.is_some()).await;
    let content_length = policy::partial::content_length(&rparts.headers);
    let stored = StoredResponse::from_received(
        &as_get.headers,
        rparts.status,
        &rparts.headers,
        request_time,
        response_time,
        basis,
    );
    // Larger than a slice, with a strong validator: cached as slices (handler/sliced.rs).
    if verdict.is_ok()
        && held.is_none()
        && sent.upstream == Upstream::Origin
        && matches!(compression, Compression::None | Compression::Identity)
        && let Some(plan) = super::sliced::plan(ctx, &rparts)
    {
        return super::sliced::relay(ctx, parts, peer, key, rparts, rbody, sent, guard, fwd, plan)
            .await;
    }
    let mut status = CacheStatus::forward(&ctx.policy.name, fwd).fwd_status(rparts.status.as_u16());
    // What is written: the response as received, or combined with held partial content.
    let splice = match (&verdict, held) {
        (Ok(_), Some((r, old))) if rparts.status == StatusCode::PARTIAL_CONTENT => {
            Splice::plan(r, &old, &as_get, &rparts, request_time, response_time)
        }
        _ => None,
    };
    let (to_store, store_len) = match &splice {
        Some(s) => (&s.stored, Some(s.len)),
        None => (&stored, content_length),
    };
    let mut writer: Option<ObjectWriter> = None;
    match &verdict {
        // The owner keeps it; this node only once it is popular here.
        Ok(_) if sent.upstream == (Upstream::Peer { keep: false }) => {
            status = status.detail("peer");
        }
        // Sent identity while the worker compresses as many bodies as it may: stored, it would
        // answer the bucket's clients uncompressed until it expires.
        Ok(_) if matches!(compression, Compression::Busy | Compression::Fallback(_)) => {
            status = status.detail("compress-busy");
        }
        Ok(_) if store_len.is_some_and(|n| n > ctx.shared.settings.max_object_size) => {
            ctx.shared.metrics.write_abort("too_large");
            status = status.detail("too-large");
        }
        Ok(_) => {
            // Replacing a stored variant (RFC 9111 4.3.4 / 3.2): the new one wins at finish().
            match ctx.store.begin_write(
                Bytes::copy_from_slice(key.as_bytes()),
                Bytes::from(to_store.vary().to_bytes()),
                to_store.encode(),
                store_len,
            ) {
                Ok(mut w) => {
                    // Not published if the key is invalidated before the write ends (RFC 9111
                    // 4.4): checked with the publish, in one step.
                    w.publish_only_if_unchanged(sent.mark);
                    writer = Some(w);
                    status = status.stored(true);
                }
                Err(e) => {
                    // A fill kept off the disk by storage.admission is counted by the store
                    // (store_admission_rejected_total); it is served and shared all the same.
                    if !matches!(e, edgecache_store::StoreError::NotAdmitted) {
                        ctx.shared.metrics.write_abort(e.as_str());
                    }
                    status = status.detail(e.as_str());
                    debug!("not storing: {e}");
                }
            }
        }
        Err(reason) => {
            status = status.detail(reason.as_str());
            if let Some(d) = policy::storable::pass_for(*reason, &rparts, ctx.policy.hit_for_pass) {
                ctx.shared
                    .coalescer
                    .pass_until(key.as_bytes(), std::time::Instant::now() + d);
            }
        }
    }
    // A gzip fallback answers this client only: others of its bucket may not accept gzip.
    let shareable = verdict.is_ok() && !matches!(compression, Compression::Fallback(_));
    // A tail takes its bytes from the memory plan's share up front: without room, waiters and
    // this client stream the body from the store as it is written instead.
    let tail = shareable
        && content_length
            .is_some_and(|n| n <= TAIL_LIMIT && guard.as_ref().is_none_or(|g| g.flight.reserve(n)));
    // A large body being stored is readable from the store as it is written: by waiters, and
    // by this client if it falls behind (not a combined 206: the store's body is not its body).
    let growing = match (&mut writer, &splice) {
        (Some(w), None) if !tail => w.readable(),
        _ => None,
    };
    if let Some(g) = &guard {
        g.flight.set_head(Head {
            stored: stored.clone(),
            shareable,
            tail,
            keep: tail || (shareable && content_length.is_none()),
            growing: growing.clone(),
            sliced: false,
        });
    }
    // Waiters do not share a response that cannot be stored (they fetch on their own): the
    // flight has nothing more to give them, and the body is read only for the client.
    let mut guard = guard;
    if !shareable {
        guard = None;
    }
    ctx.shared.metrics.request(match sent.upstream {
        Upstream::Peer { .. } => Outcome::Peer,
        Upstream::Origin if shareable => Outcome::Miss,
        Upstream::Origin => Outcome::Bypass,
    });

    let mut headers = rparts.headers;
    downstream(&mut headers);
    // The client's own If-None-Match / If-Modified-Since / Range were not sent to the origin
    // (the whole object is fetched to be stored): answer them from what arrived.
    let answer = ClientAnswer::of(parts, &stored, content_length, response_time);
    let (code, client_body) = answer.apply(rparts.status, &mut headers);
    let (tx, rx) = feed::feed(ctx.clone());
    // A body cut on its way (the origin's or the owner's connection failing mid-body, the store
    // failing under a client switched to its copy) is finished from the origin with a Range
    // bound by If-Range, as a hit's is: the whole response, or a cut one, never bytes of two
    // representations.
    let rx: crate::paced::Chunks = match content_length {
        Some(len) if rparts.status == StatusCode::OK => Box::pin(super::repair::body(
            rx,
            0..len,
            super::repair::Repair::new(ctx, parts, peer, &stored, len).of_fill(),
        )),
        _ => Box::pin(rx),
    };
    let pump = Pump {
        ctx: ctx.clone(),
        body: rbody,
        encoder: match compression {
            Compression::Encoding(e) | Compression::Fallback(e) => Some(e),
            _ => None,
        },
        splice: splice.filter(|_| writer.is_some()),
        writer,
        growing,
        guard,
        to_client: client_body.is_some().then_some(tx),
        on_flight: None,
        sent: (0, 0),
        idle: ctx.origin_idle(),
    };
    // Boxed: the task then holds a pointer, and tokio moves that, not the pump's state machine
    // (kilobytes), through its spawn path (several copies a miss; it boxes only futures of
    // 16 KiB and more itself).
    tokio::task::spawn_local(Box::pin(pump.run()));
    let count = count_sent(ctx);
    let body = match client_body {
        None => body::empty(),
        Some(None) => body::stream(rx.inspect(count)),
        // Only the range reaches the client; count what it gets.
        Some(Some(range)) => body::stream(body::slice(rx, range).inspect(count)),
    };
    // A small body goes out with its head in one write (the last chunk of a stored one is
    // held until the whole body has arrived, so the head alone would go first): one send
    // instead of two.
    let body = match content_length {
        Some(n) if n > 0 && n <= ONE_WRITE => body::with_first_frame(body).await,
        _ => body,
    };
    respond(code, headers, status, body)
}

/// What the cache's own compression does to a fetched response (src/compress.rs).
enum Compression {
    /// Nothing: off for the site, not a response the cache may compress
    /// (`policy::encoding::eligible`), a peer's (the owner compressed it), or combined with
    /// held partial content.
    None,
    /// Compressible, for a client that takes identity: sent as it is, varying on
    /// Accept-Encoding.
    Identity,
    /// Compressible, but the worker compresses as many bodies as it may: sent identity,
    /// varying on Accept-Encoding, and not stored.
    Busy,
    /// Compressed as it arrives by this encoder; the fields are the coding's.
    Encoding(crate::compress::Encoder),
    /// No room for the bucket's encoder, and the client also takes gzip: compressed with gzip
    /// for this client alone, neither stored nor shared (another client of the bucket may not
    /// take gzip).
    Fallback(crate::compress::Encoder),
}

/// Decide the compression of a fetched response and give its fields the representation's
/// (`policy::encoding::compressed_fields`).
async fn compression(
    ctx: &Ctx,
    parts: &request::Parts,
    rparts: &mut http::response::Parts,
    upstream: Upstream,
    combining: bool,
) -> Compression {
    use policy::encoding::{self, Coding};
    let Some(cfg) = ctx.compression_for(parts) else {
        return Compression::None;
    };
    if upstream != Upstream::Origin
        || combining
        || encoding::eligible(rparts.status, &rparts.headers, cfg).is_err()
    {
        return Compression::None;
    }
    let mut coding = encoding::negotiate(&parts.headers, &encoding::PREFERENCE);
    if coding == Coding::Identity {
        encoding::compressed_fields(&mut rparts.headers, Coding::Identity);
        return Compression::Identity;
    }
    let wait = crate::compress::WAIT;
    let mut started =
        crate::compress::Encoder::start_within(coding, &cfg.levels, &ctx.compressing, wait).await;
    // No room for a brotli or zstd encoder's state: gzip's is a fraction of it, and this
    // client takes gzip too.
    let mut fallback = false;
    if matches!(started, Err(crate::compress::NotStarted::Busy))
        && coding != Coding::Gzip
        && encoding::negotiate(&parts.headers, &[Coding::Gzip]) == Coding::Gzip
    {
        coding = Coding::Gzip;
        fallback = true;
        started = crate::compress::Encoder::start(coding, &cfg.levels, &ctx.compressing);
    }
    let answer = match started {
        Ok(e) => {
            ctx.shared
                .metrics
                .compressed
                .get_or_create(&[("coding", coding.as_str().to_string())])
                .inc();
            if fallback {
                Compression::Fallback(e)
            } else {
                Compression::Encoding(e)
            }
        }
        Err(crate::compress::NotStarted::Busy) => {
            ctx.shared.metrics.compress_busy.inc();
            Compression::Busy
        }
        Err(crate::compress::NotStarted::Failed(e)) => {
            tracing::warn!("no {} encoder, sent identity: {e}", coding.as_str());
            Compression::Identity
        }
    };
    let applied = match answer {
        Compression::Encoding(_) | Compression::Fallback(_) => coding,
        _ => Coding::Identity,
    };
    encoding::compressed_fields(&mut rparts.headers, applied);
    answer
}

/// Bodies up to this size are sent with their head (`body::with_first_frame`): what one origin
/// read brings.
const ONE_WRITE: u64 = crate::origin::ORIGIN_READ_BUF as u64;

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
        if !asks || stored.status() != StatusCode::OK {
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

/// A new 206 stored combined with held partial content (RFC 9111 3.4): the held bytes before
/// the new ones, the new body, the held bytes after it.
struct Splice {
    /// The stored partial content.
    from: ObjectRef,
    /// Its body bytes to write before and after the new body (offsets in its body).
    before: Option<std::ops::Range<u64>>,
    after: Option<std::ops::Range<u64>>,
    /// The combined response (a 206 of the union, or a complete 200) and its body length.
    stored: StoredResponse,
    len: u64,
}

impl Splice {
    /// `None` when the new 206 does not continue the held bytes (another validator or length,
    /// or a range that neither overlaps nor touches them): it is then stored on its own.
    fn plan(
        from: ObjectRef,
        old: &StoredResponse,
        req: &request::Parts,
        new: &http::response::Parts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Option<Splice> {
        use policy::partial;
        let held = partial::stored_range(old.headers())?;
        let length = held.complete_length?;
        if !partial::combinable(old.headers(), length, &new.headers) {
            return None;
        }
        let c = partial::combine(held, partial::stored_range(&new.headers)?)?;
        let (status, headers) = partial::combined_fields(&new.headers, &c)?;
        let in_held = |(a, b): (u64, u64)| (a - held.first)..(b - held.first + 1);
        Some(Splice {
            from,
            before: c.before.map(in_held),
            after: c.after.map(in_held),
            stored: StoredResponse::from_fields(
                &req.headers,
                status,
                &headers,
                request_time,
                response_time,
            ),
            len: c.union.last - c.union.first + 1,
        })
    }
}

/// Moves an origin body to the client, the store and the waiters; runs on its own so the store
/// write and the waiters finish even when the client goes away.
struct Pump {
    ctx: Rc<Ctx>,
    body: super::peer::UpBody,
    /// Compresses the body as it arrives (`compression`); what it makes is the body from here.
    encoder: Option<crate::compress::Encoder>,
    /// Held bytes to write around the body (a combined 206).
    splice: Option<Splice>,
    writer: Option<ObjectWriter>,
    /// The writer's body as it is written, for this client to fall back on.
    growing: Option<Arc<edgecache_store::Growing>>,
    guard: Option<LeaderGuard>,
    to_client: Option<feed::FeedTx>,
    /// The client's feed while it reads from the flight's kept chunks.
    on_flight: Option<feed::FeedTx>,
    /// Chunks and bytes queued for the client so far.
    sent: (usize, u64),
    idle: Duration,
}

impl Pump {
    /// Send one chunk to the client, if it is still there, without waiting for it when it can
    /// read the rest from a copy that is kept anyway (see `feed`).
    async fn send_to_client(&mut self, chunk: Bytes) {
        let Some(feed) = &self.to_client else {
            return;
        };
        let len = chunk.len();
        let delivered = if feed.has_room(len) {
            feed.push(chunk)
        } else if let Some(rest) = self.rest() {
            self.ctx.shared.metrics.fill_clients_switched.inc();
            let to_flight = matches!(rest, feed::Rest::Flight { .. });
            if let Some(feed) = self.to_client.take() {
                feed.switch(rest);
                // Kept to feed it again if the flight stops keeping chunks.
                if to_flight {
                    self.on_flight = Some(feed);
                }
            }
            return;
        } else {
            // Nothing kept for it: this fill waits for its client. Waiters have nothing to
            // wait for here: dropping the guard fails the flight, and they fetch on their own.
            drop(self.guard.take());
            feed.push_when_room(chunk).await
        };
        if delivered {
            self.sent = (self.sent.0 + 1, self.sent.1 + len as u64);
        } else {
            self.to_client = None;
        }
    }

    /// Where the client can read the rest of the body from, past what it was sent.
    fn rest(&self) -> Option<feed::Rest> {
        let (chunks, bytes) = self.sent;
        if let (Some(growing), Some(_)) = (&self.growing, &self.writer) {
            return Some(feed::Rest::Store {
                growing: growing.clone(),
                offset: bytes,
            });
        }
        let flight = &self.guard.as_ref()?.flight;
        flight.keep_for(chunks).then(|| feed::Rest::Flight {
            flight: flight.clone(),
            index: chunks,
        })
    }

    /// Copy bytes of stored partial content into the writer; on any failure the writer is
    /// dropped (nothing is published) and the client is still served.
    async fn copy_held(&mut self, from: &ObjectRef, range: std::ops::Range<u64>) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let failed = match self.ctx.store.open(from).await {
            Err(e) => Some(e.to_string()),
            Ok(obj) => {
                let mut body = std::pin::pin!(obj.body(Some(range)));
                let mut failed = None;
                while let Some(chunk) = body.next().await {
                    let res = match chunk {
                        Ok(c) => w.write(c).await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    if let Err(e) = res {
                        failed = Some(e);
                        break;
                    }
                }
                failed
            }
        };
        if let Some(e) = failed {
            debug!("partial content not combined: {e}");
            self.ctx.shared.metrics.write_abort("combine");
            self.writer = None;
        }
    }

    /// The next chunk of the body, compressed when it is being compressed: `Ok(None)` at its
    /// end (the encoder's trailer is the last chunk).
    async fn next_chunk(
        &mut self,
        metrics: &crate::metrics::Metrics,
    ) -> Result<Option<Bytes>, String> {
        loop {
            let raw = origin_chunk(&mut self.body, self.idle, metrics).await?;
            let Some(encoder) = self.encoder.as_mut() else {
                return Ok(raw);
            };
            let out = match raw {
                Some(raw) => {
                    metrics.compress_bytes_in.inc_by(raw.len() as u64);
                    encoder.push(&raw)
                }
                None => match self.encoder.take() {
                    Some(e) => e.finish(),
                    None => return Ok(None),
                },
            }
            .map_err(|e| format!("compression failed: {e}"))?;
            metrics.compress_bytes_out.inc_by(out.len() as u64);
            if !out.is_empty() {
                return Ok(Some(out));
            }
            if self.encoder.is_none() {
                return Ok(None);
            }
        }
    }

    async fn run(mut self) {
        let metrics = self.ctx.shared.metrics.clone();
        let splice = self.splice.take();
        if let Some(Splice {
            from,
            before: Some(range),
            ..
        }) = &splice
        {
            self.copy_held(from, range.clone()).await;
        }
        // While storing, the latest chunk is held back until the next one arrives, and the last
        // one until the whole body has arrived (the object is published by then, or the
        // requests for it wait in its flight until it is): a client that has the whole body
        // finds it stored.
        let mut held: Option<Bytes> = None;
        let end = loop {
            let chunk = match self.next_chunk(&metrics).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break Ok(()),
                Err(why) => break Err(why),
            };
            if let Some(g) = &self.guard
                && !g.flight.push(chunk.clone())
                && let Some(feed) = self.on_flight.take()
            {
                // The flight stopped keeping chunks (past its limit): the client switched to
                // it reads up to here from it, and from this chunk on from its feed again.
                // The chunk held back is in the flight already.
                held = None;
                self.to_client = Some(feed);
            }
            if let Some(w) = &mut self.writer
                && let Err(e) = w.write(chunk.clone()).await
            {
                debug!("store write failed, the response is still served: {e}");
                metrics.write_abort(e.as_str());
                self.writer = None;
                self.growing = None;
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
        // Invalidated while it ran (RFC 9111 4.4): it is served, and `finish` does not publish
        // it (the writer's invalidation mark); its readers still get the whole body.
        match end {
            Ok(()) => {
                if let Some(Splice {
                    from,
                    after: Some(range),
                    ..
                }) = &splice
                {
                    self.copy_held(from, range.clone()).await;
                }
                // With a flight in the table, the client and the waiters get the end of the body
                // before the store write lands: requests that come meanwhile join the flight,
                // wait for the write (`fill`) and are hits. Without one, or when the client
                // has no room for it now (the write does not wait for the client), the last
                // chunk waits for the write.
                let landing = match (&self.writer, &self.guard) {
                    (Some(_), Some(g)) => {
                        g.flight.finish(End::Complete);
                        Some(self.ctx.shared.landing.begin())
                    }
                    _ => None,
                };
                if landing.is_some() {
                    let room =
                        |c: &mut Bytes| self.to_client.as_ref().is_none_or(|f| f.has_room(c.len()));
                    if let Some(c) = held.take_if(room) {
                        self.send_to_client(c).await;
                    }
                }
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
                drop(landing);
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
                if let Some(feed) = self.to_client.take() {
                    feed.fail(io::Error::other(why));
                }
            }
        }
    }
}

/// The next data chunk of an origin body (a fill's, a slice's or a repair's 206), waiting at
/// most `idle` for it (other frames are skipped): `Ok(None)` at its end. A silence or a failure
/// is counted (`origin_errors`, `body_timeout` or `body`) and its reason returned.
pub(super) async fn origin_chunk<B>(
    body: &mut B,
    idle: Duration,
    metrics: &crate::metrics::Metrics,
) -> Result<Option<Bytes>, String>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    loop {
        // A frame already there (a small body arrives with its head) is taken without
        // arming the idle timer.
        let next = match futures_util::FutureExt::now_or_never(body.frame()) {
            Some(frame) => Ok(frame),
            None => tokio::time::timeout(idle, body.frame()).await,
        };
        match next {
            Err(_) => {
                metrics.origin_error("body_timeout");
                return Err("the origin went silent mid-body (idle timeout)".to_string());
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                metrics.origin_error("body");
                return Err(format!("the origin body failed: {e}"));
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(chunk) = frame.into_data() {
                    return Ok(Some(chunk));
                }
            }
        }
    }
}
