//! Requests the cache must not answer (unsafe or bypassed methods): forwarded to the origin,
//! with the invalidations RFC 9111 4.4 asks for after a successful unsafe method.

use super::*;

/// Forward a request the cache must not answer (unsafe or bypassed methods), invalidating
/// stored responses after a successful unsafe one (RFC 9111 4.4).
pub(super) async fn forward(
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
    let origin = ctx.origin_for(&parts);
    let req = match origin.prepare(&parts, Some(peer.ip()), &HeaderMap::new()) {
        Ok(b) => b
            .body(body.boxed())
            .map_err(|_| ProxyError::bad_request("request cannot be forwarded")),
        Err(e) => Err(e),
    };
    let sent = match req {
        Ok(req) => origin.send(req).await,
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
            let idle = ctx.origin_idle();
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
