//! Finishing a disk hit whose stored body fails after the response has started (a block that
//! fails its checksum, a read error, an eviction racing with the read): the head and the bytes
//! before are with the client, so the rest is asked of the origin with a Range bound to the
//! stored representation by If-Range (`policy::partial::Continuation`), and streamed as the
//! rest of the same response. A 206 of exactly those bytes continues it; so does a whole 200
//! of the same strong entity tag and length (an origin that ignores Range), read from the
//! offset on. Anything else (a 200 of another representation, an error, a cut body) ends the
//! response short, as without a repair: the client never gets bytes of two representations.
//!
//! A miss's body cut on its way (the origin's or the owner's connection failing mid-body, or
//! the store failing under a client that was switched to its copy) is finished the same way
//! ([`Repair::of_fill`]), from the response as it arrived.
//!
//! The store dropped the object when the block failed; it stays dropped (the next request is a
//! miss) and the repaired bytes are not stored. The store's chunks are passed on as they come,
//! and the stored stream (with its read-ahead) is dropped before the origin is asked, so the
//! worker's I/O budget is held no longer than before.

use std::ops::Range;
use std::pin::Pin;

use edgecache_policy::partial::Continuation;
use futures_util::Stream;

use super::*;

/// What a repair needs of the hit being served.
pub(super) struct Repair {
    ctx: Rc<Ctx>,
    /// The client's request target, version and fields, as received: [`Repair::request`] makes
    /// the request a fill sends of them when a repair is asked (few are).
    uri: http::Uri,
    version: http::Version,
    headers: HeaderMap,
    peer: SocketAddr,
    status: StatusCode,
    stored: HeaderMap,
    body_len: u64,
    /// A miss's body, not a hit's (counted apart).
    fill: bool,
}

impl Repair {
    pub(super) fn new(
        ctx: &Rc<Ctx>,
        parts: &request::Parts,
        peer: SocketAddr,
        stored: &StoredResponse,
        body_len: u64,
    ) -> Self {
        // Not the client's extensions (its connection's probes, its 1xx forwarder): a hit
        // clones this for every response, and few are ever repaired.
        Self {
            ctx: ctx.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            headers: parts.headers.clone(),
            peer,
            status: stored.status(),
            stored: stored.headers().clone(),
            body_len,
            fill: false,
        }
    }

    /// The request as a fill sends it: GET, no Range or conditionals, no 1xx forwarder (the
    /// client has its final response already).
    fn request(&self) -> request::Parts {
        let (mut fetch, ()) = Request::new(()).into_parts();
        fetch.method = Method::GET;
        fetch.uri = self.uri.clone();
        fetch.version = self.version;
        fetch.headers = self.headers.clone();
        policy::request::strip_for_fill(&mut fetch.headers);
        fetch.headers.remove(header::IF_MATCH);
        fetch.headers.remove(header::IF_UNMODIFIED_SINCE);
        fetch
    }

    /// The repair of a miss's body (the fill's), counted in `fill_repairs_total`.
    pub(super) fn of_fill(mut self) -> Self {
        self.fill = true;
        self
    }

    /// Ask the origin for stored body bytes `from..to`: its body and what to take of it, or
    /// why not.
    async fn ask(&self, from: u64, to: u64) -> Result<(Incoming, Taking), String> {
        let c = Continuation::of(self.status, &self.stored, self.body_len, from, to)
            .ok_or("the stored response has no validator that may bind an If-Range")?;
        let fields = c.request_fields().ok_or("no Range field for the rest")?;
        let (resp, _) = send(&self.ctx, &self.request(), self.peer, &fields)
            .await
            .map_err(|e| format!("the origin failed: {e}"))?;
        let taking = if c.accepts(&self.stored, resp.status(), resp.headers()) {
            Taking {
                skip: 0,
                left: c.len(),
                whole: false,
            }
        } else if c.whole_carries(&self.stored, resp.status(), resp.headers()) {
            Taking {
                skip: c.first,
                left: c.len(),
                whole: true,
            }
        } else {
            return Err(format!(
                "the origin answered {} without bytes {}-{} of the stored representation",
                resp.status(),
                c.first,
                c.last
            ));
        };
        Ok((resp.into_body(), taking))
    }

    fn done(&self, ok: bool, why: &str) {
        let what = if self.fill {
            self.ctx.shared.metrics.fill_repair(ok);
            "the fetched body"
        } else {
            self.ctx.shared.metrics.hit_repair(ok);
            "stored body"
        };
        if ok {
            info!("{what} failed mid-response; finished from the origin ({why})");
        } else {
            info!("{what} failed mid-response; the response is cut short: {why}");
        }
    }
}

type Chunks = Pin<Box<dyn Stream<Item = io::Result<Bytes>>>>;

/// What is still to be taken of the origin's answer.
#[derive(Debug, Clone, Copy)]
struct Taking {
    /// Bytes before the ones asked for (a whole 200's, before the offset).
    skip: u64,
    /// Bytes still to come to the client.
    left: u64,
    /// A whole 200, whose bytes after the ones asked for are let go (a 206 has none).
    whole: bool,
}

enum Step {
    /// Stored chunks; the next one starts at this body offset.
    Store(Chunks, u64),
    /// The origin's answer.
    Origin(Incoming, Taking),
}

/// The body of a hit: `chunks`, the stored body bytes `range` (end exclusive), finished from the
/// origin when they fail (see the module docs).
pub(super) fn body(
    chunks: impl Stream<Item = io::Result<Bytes>> + 'static,
    range: Range<u64>,
    repair: Repair,
) -> impl Stream<Item = io::Result<Bytes>> + 'static {
    let repair = Rc::new(repair);
    let start = Step::Store(Box::pin(chunks), range.start);
    futures_util::stream::unfold(Some(start), move |state| {
        let repair = repair.clone();
        let end = range.end;
        async move {
            let (body, taking) = match state? {
                Step::Store(mut chunks, pos) => match chunks.next().await {
                    None => return None,
                    Some(Ok(c)) => {
                        let next = pos + c.len() as u64;
                        return Some((Ok(c), Some(Step::Store(chunks, next))));
                    }
                    Some(Err(e)) => {
                        // The read-ahead and its buffer go before the origin is asked.
                        drop(chunks);
                        debug!("stored body failed at byte {pos} of {end}: {e}");
                        match repair.ask(pos, end).await {
                            Ok(rest) => rest,
                            Err(why) => {
                                repair.done(false, &why);
                                return Some((Err(e), None));
                            }
                        }
                    }
                },
                Step::Origin(body, taking) => (body, taking),
            };
            from_origin(body, taking, &repair).await
        }
    })
}

/// The next chunk the client gets of the origin's answer.
async fn from_origin(
    mut body: Incoming,
    mut t: Taking,
    repair: &Repair,
) -> Option<(io::Result<Bytes>, Option<Step>)> {
    let fail = |why: String| {
        repair.done(false, &why);
        Some((Err(io::Error::other(why)), None))
    };
    let idle = repair.ctx.origin_idle();
    loop {
        let mut chunk =
            match super::fill::origin_chunk(&mut body, idle, &repair.ctx.shared.metrics).await {
                Err(why) => return fail(why),
                Ok(None) => {
                    return fail(format!("the origin's answer ended {} bytes short", t.left));
                }
                Ok(Some(chunk)) => chunk,
            };
        // A whole 200's bytes before the offset: read and let go.
        let before = t.skip.min(chunk.len() as u64);
        chunk = chunk.slice(before as usize..);
        t.skip -= before;
        if chunk.is_empty() {
            continue;
        }
        let n = chunk.len() as u64;
        if n > t.left && !t.whole {
            return fail("the origin's 206 is longer than its Content-Range".into());
        }
        if n >= t.left {
            let how = if t.whole {
                "a whole 200 of the same representation"
            } else {
                "If-Range 206"
            };
            repair.done(true, how);
            return Some((Ok(chunk.slice(..t.left as usize)), None));
        }
        t.left -= n;
        return Some((Ok(chunk), Some(Step::Origin(body, t))));
    }
}
