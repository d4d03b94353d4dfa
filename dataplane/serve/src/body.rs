//! Response bodies. Bodies stay on their worker thread (the store's io_uring files are `!Send`),
//! so the body type is a boxed, `!Send` `http_body::Body`; hyper's HTTP/1 server does not need
//! `Send`.

use std::io;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use futures_util::StreamExt;
use http_body::Frame;
use http_body_util::{BodyExt, Empty, Full, StreamBody};

pub type Body = Pin<Box<dyn http_body::Body<Data = Bytes, Error = io::Error>>>;

pub fn empty() -> Body {
    Box::pin(Empty::new().map_err(|never| match never {}))
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Box::pin(Full::new(b.into()).map_err(|never| match never {}))
}

/// `inner`, holding `guard` until the body is done or dropped (hyper drops a response body
/// once it has written it, or when the connection goes).
pub fn guarded<G: Unpin + 'static>(inner: Body, guard: G) -> Body {
    Box::pin(Guarded {
        inner,
        _guard: guard,
    })
}

struct Guarded<G> {
    inner: Body,
    _guard: G,
}

impl<G: Unpin> http_body::Body for Guarded<G> {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.get_mut().inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// `body` with its first frame already at hand (waiting for it here), so a response returned
/// after this goes out with its head and first chunk in one write, not the head alone first
/// and the chunk in a second write: for a small body, the whole response in one `writev`.
pub async fn with_first_frame(mut body: Body) -> Body {
    match body.frame().await {
        None => empty(),
        Some(first) => Box::pin(FirstFrame {
            first: Some(first),
            rest: body,
        }),
    }
}

struct FirstFrame {
    first: Option<Result<Frame<Bytes>, io::Error>>,
    rest: Body,
}

impl http_body::Body for FirstFrame {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        match this.first.take() {
            Some(first) => std::task::Poll::Ready(Some(first)),
            None => this.rest.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let rest = self.rest.size_hint();
        let held = match &self.first {
            Some(Ok(f)) => f.data_ref().map_or(0, |d| d.len() as u64),
            _ => 0,
        };
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(rest.lower() + held);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

/// A body from a stream of chunks; an `Err` aborts the response (the client sees a truncated
/// body, never a complete-looking one).
pub fn stream<S>(s: S) -> Body
where
    S: Stream<Item = io::Result<Bytes>> + 'static,
{
    Box::pin(StreamBody::new(s.map(|r| r.map(Frame::data))))
}

/// The bytes `range` (end exclusive) of a stream of chunks that starts at offset 0. A stream
/// that ends before the range is complete ends with an error (a truncated response, never a
/// complete-looking one).
pub fn slice<S>(s: S, range: std::ops::Range<u64>) -> impl Stream<Item = io::Result<Bytes>>
where
    S: Stream<Item = io::Result<Bytes>> + 'static,
{
    let (start, end) = (range.start, range.end);
    futures_util::stream::unfold(Some((Box::pin(s), 0u64)), move |state| async move {
        let (mut s, mut pos) = state?;
        loop {
            if pos >= end {
                return None;
            }
            match s.next().await {
                None => {
                    let e = io::Error::other("the body ended before the requested range");
                    return Some((Err(e), None));
                }
                Some(Err(e)) => return Some((Err(e), None)),
                Some(Ok(chunk)) => {
                    let chunk_start = pos;
                    pos += chunk.len() as u64;
                    if pos <= start {
                        continue;
                    }
                    // Both offsets are within this chunk, so they fit in usize.
                    let from = usize::try_from(start.saturating_sub(chunk_start)).unwrap_or(0);
                    let to = usize::try_from(end.min(pos) - chunk_start).unwrap_or(chunk.len());
                    return Some((Ok(chunk.slice(from..to)), Some((s, pos))));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(range: std::ops::Range<u64>) -> Vec<io::Result<Bytes>> {
        let chunks = ["0123", "4567", "89"].map(|c| Ok(Bytes::from_static(c.as_bytes())));
        slice(futures_util::stream::iter(chunks), range)
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_body_with_its_first_frame_at_hand_keeps_every_byte() {
        let chunks = ["0123", "4567", "89"].map(|c| Ok(Bytes::from_static(c.as_bytes())));
        let body = with_first_frame(stream(futures_util::stream::iter(chunks))).await;
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], b"0123456789");
        let empty_body = with_first_frame(empty()).await;
        assert!(empty_body.is_end_stream());
        let cut = [Ok(Bytes::from_static(b"01")), Err(io::Error::other("cut"))];
        let body = with_first_frame(stream(futures_util::stream::iter(cut))).await;
        assert!(body.collect().await.is_err(), "an error stays an error");
    }

    #[tokio::test]
    async fn slice_cuts_the_range_out_of_chunks() {
        let joined = |v: Vec<io::Result<Bytes>>| {
            v.into_iter()
                .map(|r| String::from_utf8(r.unwrap().to_vec()).unwrap())
                .collect::<String>()
        };
        assert_eq!(joined(collect(0..10).await), "0123456789");
        assert_eq!(joined(collect(2..3).await), "2");
        assert_eq!(joined(collect(3..9).await), "345678");
        assert_eq!(joined(collect(4..8).await), "4567");
        let cut = collect(8..12).await;
        assert!(cut.last().unwrap().is_err(), "a short body is an error");
    }
}
