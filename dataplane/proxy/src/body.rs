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

/// A body from a stream of chunks; an `Err` aborts the response (the client sees a truncated
/// body, never a complete-looking one).
pub fn stream<S>(s: S) -> Body
where
    S: Stream<Item = io::Result<Bytes>> + 'static,
{
    Box::pin(StreamBody::new(s.map(|r| r.map(Frame::data))))
}

/// A body fed through a channel by a task that runs on its own.
pub fn channel(rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>) -> Body {
    stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}
