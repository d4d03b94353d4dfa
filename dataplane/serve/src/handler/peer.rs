//! Sharding, per request: a miss of a key another node owns is fetched from that node (one
//! hop), and whatever goes wrong with it the request is fetched from the origin instead, so
//! the client never sees the peer's failure.
//!
//! The hop is marked with [`HOP`] (the sender's node name). A request that carries it is served
//! here whatever this node's ring says (a hit, or a fill from the origin coalesced with every
//! other request for the key) and never forwarded again, so two nodes that disagree about the
//! ring (one has reloaded the peers file, the other not yet) cost one extra hop, never a loop.
//! The header is taken off before anything else looks at the request, so the origin never sees
//! it. With a peer key (`sharding.peerKeyFile`) a hop must carry its proof (dataplane/fleet/src/peer_auth.rs):
//! one without a valid proof is a client's request, the header removed. Without a key the
//! header is trusted (a client could then make this node serve a request itself, as with
//! sharding off; it cannot make a node forward anything).
//!
//! Only fills go to the owner (a miss, a stale response fetched whole, a single-range miss):
//! requests the cache does not answer (unsafe methods, bypasses, hit-for-pass) and
//! revalidations go to the origin as before.
//!
//! The owner marks the 5xx it generates itself for a hop with [`PEER_ERROR`] (`origin` when
//! its origin failed, `internal` otherwise); a 5xx without it is the origin's and is relayed
//! like any origin response. Either mark sends the request to the origin from here; only
//! `internal` marks the peer down (its origin failing says nothing about the peer).

use http::header::HeaderName;

use super::*;
use crate::sharding::Route;

/// The hop header: the name of the node that forwarded the request.
pub const HOP: HeaderName = HeaderName::from_static("edgecache-hop");
/// On a 5xx a node generated itself for a hop: `origin` or `internal`.
pub const PEER_ERROR: HeaderName = HeaderName::from_static("edgecache-peer-error");

/// The request came from another node: serve it here.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hop;

/// A response this node generated itself (not relayed from the origin), and whose fault it is:
/// `origin` or `internal`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Generated(pub &'static str);

/// A fill's response body: the origin's as it comes, or a peer's whose first frame was read
/// before the response was taken (see [`first_frame`]).
pub(crate) type UpBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;

/// Where a fill's response came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upstream {
    Origin,
    /// The key's owner; `keep`: the key is popular here, store a copy too.
    Peer {
        keep: bool,
    },
}

/// Take the hop header off a client request; true when it had one (the request is then marked
/// [`Hop`] and counted as served for a peer).
pub(super) fn take_hop(ctx: &Ctx, parts: &mut request::Parts) -> bool {
    let proof = parts.headers.remove(crate::peer_auth::HOP_AUTH);
    let Some(node) = parts.headers.remove(HOP) else {
        return false;
    };
    if let Err(refused) = proven(
        ctx,
        &parts.method,
        &parts.uri,
        &parts.headers,
        &node,
        proof.as_ref(),
    ) {
        ctx.shared.metrics.peer_hop_refused(refused.as_str());
        return false;
    }
    parts.extensions.insert(Hop);
    ctx.shared.metrics.peer_served.inc();
    true
}

/// Whether a request head carries a hop from another node with a valid proof (any hop header,
/// without a peer key). Such a request is never redirected to HTTPS: nodes talk plain HTTP.
pub fn is_peer_hop(ctx: &Ctx, method: &Method, uri: &http::Uri, headers: &HeaderMap) -> bool {
    ctx.shared.sharding.is_some()
        && headers.get(HOP).is_some_and(|node| {
            let proof = headers.get(crate::peer_auth::HOP_AUTH);
            proven(ctx, method, uri, headers, node, proof).is_ok()
        })
}

/// Whether a hop from `node` carries a valid proof (always, without a peer key).
fn proven(
    ctx: &Ctx,
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
    node: &HeaderValue,
    proof: Option<&HeaderValue>,
) -> Result<(), crate::peer_auth::Refused> {
    let Some(key) = ctx.shared.sharding.as_ref().and_then(|s| s.key()) else {
        return Ok(());
    };
    let hop = crate::peer_auth::Hop::of(node.to_str().unwrap_or(""), method, uri, headers);
    // The wall clock, not the cache's (which tests may move): the peers' clocks are compared.
    key.verify(&hop, proof, std::time::SystemTime::now())
}

/// Whether the request is a (proven) hop from another node. A hop takes no disk stream slot of
/// its sender's address: the per-address slots share the I/O buffers among clients, and a
/// node's forwards carry many clients' requests (those are bounded where they came in).
pub(super) fn is_hop(parts: &request::Parts) -> bool {
    parts.extensions.get::<Hop>().is_some()
}

/// On the response to a hop: mark a 5xx this node generated itself, for the sender.
pub(super) fn mark_generated(resp: &mut Response<Body>) {
    if !resp.status().is_server_error() {
        return;
    }
    if let Some(Generated(blame)) = resp.extensions().get::<Generated>().copied() {
        resp.headers_mut()
            .insert(PEER_ERROR, HeaderValue::from_static(blame));
    }
}

/// Send a fill's request (`parts`, made ready for the origin): to the key's owner when
/// `to_owner`, another node owns the key and is up; else, and whenever the owner fails, to the
/// origin.
pub(super) async fn send_fill(
    ctx: &Ctx,
    parts: &request::Parts,
    peer: SocketAddr,
    key: &CacheKey,
    to_owner: bool,
) -> Result<(Response<UpBody>, Upstream), ProxyError> {
    if let (true, Some(sharding), Some(client)) = (to_owner, &ctx.shared.sharding, &ctx.peers)
        && parts.extensions.get::<Hop>().is_none()
    {
        match sharding.route(key.as_bytes()) {
            Route::Local => {}
            Route::OwnerDown => ctx.shared.metrics.peer_forward("owner_down"),
            Route::Peer { owner, key } => {
                let keep = sharding.keep_copy(key);
                if let Some(resp) = ask_owner(ctx, sharding, client, &owner, parts, peer).await {
                    return Ok((resp, Upstream::Peer { keep }));
                }
            }
        }
    }
    let (resp, _) = send(ctx, parts, peer, &HeaderMap::new()).await?;
    Ok((resp.map(BodyExt::boxed_unsync), Upstream::Origin))
}

/// The owner's response head, or `None` (counted, and the peer marked down when it is at
/// fault) when the request must go to the origin instead.
async fn ask_owner(
    ctx: &Ctx,
    sharding: &crate::sharding::Sharding,
    client: &Origin,
    owner: &crate::ring::Peer,
    parts: &request::Parts,
    peer: SocketAddr,
) -> Option<Response<UpBody>> {
    let metrics = &ctx.shared.metrics;
    let mut hop = HeaderMap::new();
    hop.insert(HOP, HeaderValue::from_str(sharding.node()).ok()?);
    let mut req = client
        .prepare_at(&owner.addr.to_string(), parts, Some(peer.ip()), &hop)
        .ok()?
        .body(origin::empty())
        .ok()?;
    if let Some(key) = sharding.key() {
        // The proof covers the request as it goes (dataplane/fleet/src/peer_auth.rs).
        let hop =
            crate::peer_auth::Hop::of(sharding.node(), req.method(), req.uri(), req.headers());
        let proof = key.sign(&hop, std::time::SystemTime::now());
        req.headers_mut().insert(crate::peer_auth::HOP_AUTH, proof);
    }
    let result = match client.send(req).await {
        Err(e) => {
            sharding.peer_failed(&owner.name, &e.to_string());
            e.kind.as_str()
        }
        Ok((resp, _)) => match resp.headers().get(PEER_ERROR) {
            Some(blame) if resp.status().is_server_error() => {
                if blame.as_bytes() == b"origin" {
                    "origin_error"
                } else {
                    let why = format!("it answered {} itself", resp.status().as_u16());
                    sharding.peer_failed(&owner.name, &why);
                    "peer_error"
                }
            }
            _ => match first_frame(resp, ctx.origin_idle()).await {
                Ok(resp) => {
                    sharding.peer_answered(&owner.name);
                    metrics.peer_forward("ok");
                    return Some(resp);
                }
                Err(why) => {
                    sharding.peer_failed(&owner.name, why);
                    "body"
                }
            },
        },
    };
    debug!(owner = %owner.name, result, "peer fill failed; fetching from the origin");
    metrics.peer_forward(result);
    None
}

/// The peer's response once its first body frame arrived (or its body ended): a peer that
/// fails after its head but before any byte of the body (killed mid-fill) costs the client
/// nothing, the origin is asked instead. Later failures cut the response short, as an
/// origin's do.
async fn first_frame(
    resp: Response<Incoming>,
    idle: Duration,
) -> Result<Response<UpBody>, &'static str> {
    let (parts, mut body) = resp.into_parts();
    if http_body::Body::is_end_stream(&body) {
        return Ok(Response::from_parts(parts, body.boxed_unsync()));
    }
    let first = match tokio::time::timeout(idle, body.frame()).await {
        Err(_) => return Err("its body did not start within the idle timeout"),
        Ok(Some(Err(_))) => return Err("its body failed before the first byte"),
        Ok(None) => None,
        Ok(Some(Ok(frame))) => Some(frame),
    };
    let rest = http_body_util::BodyStream::new(body);
    let frames = futures_util::stream::iter(first.map(Ok)).chain(rest);
    let body = http_body_util::StreamBody::new(frames).boxed_unsync();
    Ok(Response::from_parts(parts, body))
}
