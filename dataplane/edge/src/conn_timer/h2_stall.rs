//! HTTP/2 streams whose client takes nothing. Flow control lets a client hold a stream's window
//! at zero (`SETTINGS_INITIAL_WINDOW_SIZE=0`, no WINDOW_UPDATE): hyper then never polls the
//! response body, no socket write ever blocks, so the write timeout of src/conn_timer.rs never
//! sees it, while the body keeps what it read ahead (I/O buffers, a disk stream slot).
//!
//! So each response body of an HTTP/2 connection is watched. It is *owed* from the moment it
//! has bytes to give (made, or just yielded a chunk) until hyper polls it again; a poll that
//! finds it waiting on its own source (the origin, the disk) is not owed. A body owed for the
//! write timeout is dropped, so its buffers go back at once, and its stream is reset when hyper
//! next polls it. A connection on which no stream was polled for the write timeout while one
//! was owed is closed. The rule, [`Streams::check`], takes `now`.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::time::Instant;

#[cfg(test)]
use super::PRESSURE_RECHECK;
use super::{Expiry, Timeouts, write_wait};

/// A response body as the data plane makes them (its `body::Body`): boxed and `!Send`, since
/// bodies stay on their worker thread.
pub type Body = Pin<Box<dyn http_body::Body<Data = Bytes, Error = io::Error>>>;

/// The watched response bodies of one HTTP/2 connection.
pub struct Streams {
    list: RefCell<Vec<Weak<Watched>>>,
    /// When a body of this connection was last polled (or the connection began).
    progress: Cell<Instant>,
    /// The shortest time a body may owe (`write_under_pressure`).
    soonest: Duration,
    /// When the connection's watchdog looks next, as it said ([`Streams::sleeping_until`]).
    wake_at: Cell<Option<Instant>>,
    /// Wakes the watchdog when a body starts to owe and could owe too long before `wake_at`.
    changed: tokio::sync::Notify,
}

struct Watched {
    owed_since: Cell<Option<Instant>>,
    /// `None` once dropped for owing too long.
    body: RefCell<Option<Body>>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("watched", &self.list.borrow().len())
            .finish_non_exhaustive()
    }
}

impl Streams {
    pub fn new(t: &Timeouts) -> Rc<Self> {
        Rc::new(Self {
            list: RefCell::default(),
            progress: Cell::new(Instant::now()),
            soonest: t.write_under_pressure.min(t.write),
            wake_at: Cell::new(None),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// A body owes since `now`: wake the watchdog if it would look only after the body could
    /// owe too long (rare: while bodies progress, an earlier one's deadline is sooner).
    fn owes_since(&self, now: Instant) {
        if self.wake_at.get().is_none_or(|w| w > now + self.soonest) {
            self.wake_at.set(None);
            self.changed.notify_one();
        }
    }

    /// The watchdog sleeps until `at`.
    pub fn sleeping_until(&self, at: Instant) {
        self.wake_at.set(Some(at));
    }

    /// `body`, watched: owed from now until hyper first polls it.
    pub fn watch(self: &Rc<Self>, body: Body) -> Body {
        let now = Instant::now();
        let w = Rc::new(Watched {
            owed_since: Cell::new(Some(now)),
            body: RefCell::new(Some(body)),
        });
        let mut list = self.list.borrow_mut();
        list.retain(|w| w.strong_count() > 0);
        list.push(Rc::downgrade(&w));
        self.owes_since(now);
        Box::pin(WatchedBody {
            w,
            streams: self.clone(),
        })
    }

    /// Resolves when a body started to owe that the watchdog should look at sooner.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Drop the bodies owed for the write timeout or longer (for `write_under_pressure` while
    /// `pressure()` says requests on the worker wait for I/O buffers, as src/conn_timer.rs
    /// does for HTTP/1.1). `Err` when one was, and no stream of the connection was polled for
    /// that long either: the connection is to be closed. Otherwise the next instant to look
    /// again, if any body is owed.
    pub fn check(
        &self,
        now: Instant,
        t: &Timeouts,
        pressure: impl Fn() -> bool,
    ) -> Result<Option<Instant>, Stalled> {
        let mut next: Option<Instant> = None;
        // Asked once per check, and only if a body owes past `write_under_pressure`.
        let pressed = Cell::new(None);
        let pressed_now = || match pressed.get() {
            Some(p) => p,
            None => {
                let p = pressure();
                pressed.set(Some(p));
                p
            }
        };
        let mut stalled = 0usize;
        let mut limit = t.write;
        for w in self.list.borrow().iter().filter_map(Weak::upgrade) {
            let Some(since) = w.owed_since.get() else {
                continue;
            };
            // The same rule as a blocked HTTP/1.1 write's (src/conn_timer.rs).
            let this_limit = match write_wait(since, pressed_now, t, now) {
                Ok(at) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    continue;
                }
                Err(Expiry::WriteUnderPressure) => t.write_under_pressure,
                Err(_) => t.write,
            };
            // Dropped here, outside any poll of it (the watchdog is another task).
            if let Ok(mut body) = w.body.try_borrow_mut() {
                *body = None;
                w.owed_since.set(None);
                stalled += 1;
                limit = limit.min(this_limit);
            }
        }
        if stalled > 0 && now >= self.progress.get() + limit {
            return Err(Stalled(stalled));
        }
        Ok(next)
    }
}

/// Streams of a connection that took nothing for the write timeout, on a connection that made
/// no progress on any: it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled(pub usize);

struct WatchedBody {
    w: Rc<Watched>,
    streams: Rc<Streams>,
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let now = Instant::now();
        this.streams.progress.set(now);
        this.w.owed_since.set(None);
        let mut body = this.w.body.borrow_mut();
        let Some(inner) = body.as_mut() else {
            // hyper resets the stream on this error.
            return Poll::Ready(Some(Err(io::Error::other(
                "the client took nothing of this stream for the write timeout",
            ))));
        };
        let polled = inner.as_mut().poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled
            && f.is_data()
        {
            this.w.owed_since.set(Some(now));
            this.streams.owes_since(now);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.w
            .body
            .try_borrow()
            .is_ok_and(|b| b.as_ref().is_some_and(|b| b.is_end_stream()))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.w.body.try_borrow() {
            Ok(b) => b
                .as_ref()
                .map_or_else(http_body::SizeHint::default, |b| b.size_hint()),
            Err(_) => http_body::SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(n: usize) -> Body {
        let s = futures_util::stream::iter((0..n).map(|_| Ok(Bytes::from_static(b"abcd"))));
        stream(s)
    }

    /// A body from a stream of chunks (the data plane's `body::stream`).
    fn stream(s: impl futures_util::Stream<Item = io::Result<Bytes>> + 'static) -> Body {
        use futures_util::StreamExt;
        Box::pin(http_body_util::StreamBody::new(
            s.map(|r| r.map(Frame::data)),
        ))
    }

    fn poll(b: &mut Body) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let waker = futures_util::task::noop_waker();
        b.as_mut().poll_frame(&mut Context::from_waker(&waker))
    }

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        write: Duration::from_secs(2),
        write_under_pressure: Duration::from_secs(1),
    };

    #[tokio::test(start_paused = true)]
    async fn a_body_never_polled_is_dropped_and_its_connection_closed() {
        let s = Streams::new(&T);
        let mut b = s.watch(chunks(3));
        let t0 = Instant::now();
        let no = || false;
        assert_eq!(s.check(t0, &T, no), Ok(Some(t0 + T.write_under_pressure)));
        let t1 = t0 + T.write_under_pressure;
        assert_eq!(s.check(t1, &T, no), Ok(Some(t1 + PRESSURE_RECHECK)));
        assert_eq!(s.check(t0 + T.write, &T, no), Err(Stalled(1)));
        // Polled at last: the stream is reset.
        assert!(matches!(poll(&mut b), Poll::Ready(Some(Err(_)))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_beside_one_that_progresses_is_reset_alone() {
        let s = Streams::new(&T);
        let mut stalled = s.watch(chunks(3));
        let mut moving = s.watch(chunks(1000));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(matches!(poll(&mut moving), Poll::Ready(Some(Ok(_)))));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(matches!(poll(&mut moving), Poll::Ready(Some(Ok(_)))));
        // The stalled one is past its limit; the connection made progress: not closed.
        let next = s.check(Instant::now(), &T, || false).unwrap();
        assert!(next.is_some(), "the moving stream is owed again");
        assert!(matches!(poll(&mut stalled), Poll::Ready(Some(Err(_)))));
        assert!(matches!(poll(&mut moving), Poll::Ready(Some(Ok(_)))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_waiting_on_its_own_source_is_not_owed() {
        let s = Streams::new(&T);
        let (_tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(1);
        let mut b = s.watch(stream(receiver(rx)));
        assert!(poll(&mut b).is_pending());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(s.check(Instant::now(), &T, || true), Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn under_pressure_a_stalled_body_goes_at_the_shorter_timeout() {
        let s = Streams::new(&T);
        let _b = s.watch(chunks(3));
        let t1 = Instant::now() + T.write_under_pressure;
        assert_eq!(s.check(t1, &T, || true), Err(Stalled(1)));
    }

    fn receiver(
        mut rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    ) -> impl futures_util::Stream<Item = io::Result<Bytes>> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
