//! Per-connection timeouts, so a slow or silent client holds nothing for long:
//!
//! * header: a request head must arrive whole within `header` of its first byte (slowloris);
//! * idle: a keep-alive connection with no request in flight is closed after `idle`;
//! * write progress: a response whose bytes the client stops taking for `write` is dropped;
//!   sooner, after `write_under_pressure`, while requests on the worker wait for I/O buffer
//!   memory: a stalled reader holds its response's buffers, and those who would use them
//!   should not wait the full `write` for it.
//!
//! [`TimedIo`] wraps the connection's socket and records reads and blocked writes in a
//! [`ConnClock`]; the service marks requests in flight ([`ConnClock::begin_request`], and a
//! [`RequestGuard`] carried by the response body); [`watch`] sleeps until the next deadline the
//! clock allows and says which one expired. The rule itself, [`check`], is pure.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio::time::Instant;

use crate::send_room::SendRoom;

pub mod h2_stall;

/// The limits.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    pub write: Duration,
    pub write_under_pressure: Duration,
}

/// How often a blocked connection past `write_under_pressure` looks at the pressure again.
pub const PRESSURE_RECHECK: Duration = Duration::from_millis(250);

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No request in flight and no byte of the next one, since this instant.
    Idle(Instant),
    /// The first byte of a request head arrived at this instant; the head is not complete.
    Head(Instant),
    /// A request is being answered.
    Busy,
}

/// Which limit a connection ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Header,
    Idle,
    Write,
    WriteUnderPressure,
}

impl Expiry {
    /// For logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Idle => "idle_timeout",
            Expiry::Write => "write_timeout",
            Expiry::WriteUnderPressure => "write_timeout_under_pressure",
        }
    }
}

/// What has expired at `now`, or the next instant something could. A blocked write counts in
/// every phase (a pipelined client may stop reading while its next head is being parsed);
/// `pressure` says whether requests on the worker wait for I/O buffer memory, asked only of a
/// write blocked past `write_under_pressure`.
pub fn check(
    phase: Phase,
    write_blocked_since: Option<Instant>,
    pressure: impl FnOnce() -> bool,
    t: &Timeouts,
    now: Instant,
) -> Result<Instant, Expiry> {
    let mut next = now + t.write;
    if let Some(since) = write_blocked_since {
        next = next.min(write_wait(since, pressure, t, now)?);
    }
    let (at, expiry) = match phase {
        Phase::Idle(since) => (since + t.idle, Expiry::Idle),
        Phase::Head(since) => (since + t.header, Expiry::Header),
        Phase::Busy => return Ok(next),
    };
    if now >= at {
        return Err(expiry);
    }
    Ok(next.min(at))
}

/// The write-progress rule for bytes a client has taken nothing of since `since` (a blocked
/// socket write, or an HTTP/2 stream's body hyper does not poll, [`h2_stall`]): expired
/// after `write`, or after `write_under_pressure` when `pressure()` says others wait; otherwise
/// the next instant it could expire (looked at again every [`PRESSURE_RECHECK`] past
/// `write_under_pressure`).
pub fn write_wait(
    since: Instant,
    pressure: impl FnOnce() -> bool,
    t: &Timeouts,
    now: Instant,
) -> Result<Instant, Expiry> {
    let at = since + t.write;
    if now >= at {
        return Err(Expiry::Write);
    }
    let soon = since + t.write_under_pressure;
    if now < soon {
        Ok(at.min(soon))
    } else if pressure() {
        Err(Expiry::WriteUnderPressure)
    } else {
        Ok(at.min(now + PRESSURE_RECHECK))
    }
}

/// One connection's activity, shared by its socket wrapper, its service and its watchdog (all
/// on the worker's thread).
#[derive(Debug)]
pub struct ConnClock {
    phase: Cell<Phase>,
    in_flight: Cell<u32>,
    /// HTTP/2: frames arrive at any time, so a read does not start a request head.
    multiplexed: bool,
    write_blocked_since: Cell<Option<Instant>>,
    /// Wakes the watchdog when the phase changes to one whose deadline is earlier.
    changed: tokio::sync::Notify,
    /// When the watchdog looks next (set by [`watch`] before it sleeps), and the header and
    /// idle timeouts it applies: a phase change wakes it only when its own deadline is earlier.
    /// A later one is seen when the watchdog wakes at the earlier.
    armed: Cell<Option<Armed>>,
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    next: Instant,
    header: Duration,
    idle: Duration,
}

impl ConnClock {
    pub fn new() -> Rc<Self> {
        Self::with(false)
    }

    /// The clock of an HTTP/2 connection: idle while no stream is open, whatever it reads.
    pub fn multiplexed() -> Rc<Self> {
        Self::with(true)
    }

    fn with(multiplexed: bool) -> Rc<Self> {
        Rc::new(Self {
            phase: Cell::new(Phase::Idle(Instant::now())),
            in_flight: Cell::new(0),
            multiplexed,
            write_blocked_since: Cell::new(None),
            changed: tokio::sync::Notify::new(),
            armed: Cell::new(None),
        })
    }

    /// A request head is complete: the connection is busy until its response is done.
    pub fn begin_request(self: &Rc<Self>) -> RequestGuard {
        self.in_flight.set(self.in_flight.get() + 1);
        self.set_phase(Phase::Busy);
        RequestGuard(self.clone())
    }

    fn read_bytes(&self) {
        if self.multiplexed {
            return;
        }
        if let Phase::Idle(_) = self.phase.get() {
            self.set_phase(Phase::Head(Instant::now()));
        }
    }

    fn write_result(&self, progressed: bool) {
        if progressed {
            self.write_blocked_since.set(None);
        } else if self.write_blocked_since.get().is_none() {
            self.write_blocked_since.set(Some(Instant::now()));
            // The watchdog's next deadline may now be earlier (`write_under_pressure`).
            self.changed.notify_one();
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.phase.set(phase);
        let Some(armed) = self.armed.get() else {
            self.changed.notify_one();
            return;
        };
        // What the new phase may expire at ([`check`]); busy, only a blocked write (which
        // wakes the watchdog itself, `write_result`).
        let due = match phase {
            Phase::Idle(since) => since + armed.idle,
            Phase::Head(since) => since + armed.header,
            Phase::Busy => return,
        };
        if due < armed.next {
            self.changed.notify_one();
        }
    }

    fn state(&self) -> (Phase, Option<Instant>) {
        (self.phase.get(), self.write_blocked_since.get())
    }
}

/// Held by a response (its body) until it is done; the last one makes the connection idle.
#[derive(Debug)]
pub struct RequestGuard(Rc<ConnClock>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let n = self.0.in_flight.get().saturating_sub(1);
        self.0.in_flight.set(n);
        if n == 0 {
            self.0.set_phase(Phase::Idle(Instant::now()));
        }
    }
}

/// Resolve when a limit expires (the connection is then to be dropped); `pressure` says
/// whether requests on the worker wait for I/O buffer memory. A body that waits for room in
/// the socket (`paced`, the data plane's src/paced.rs) is a blocked write too. An HTTP/2
/// connection's `streams` ([`h2_stall`]) that its client takes nothing of are reset at the
/// write timeout, and the connection closed when none made progress.
pub async fn watch(
    clock: Rc<ConnClock>,
    t: Timeouts,
    pressure: impl Fn() -> bool,
    paced: SendRoom,
    streams: Option<Rc<h2_stall::Streams>>,
) -> Expiry {
    loop {
        let stalls = match &streams {
            Some(s) => match s.check(Instant::now(), &t, &pressure) {
                Ok(next) => next,
                Err(_) => return Expiry::Write,
            },
            None => None,
        };
        let (phase, blocked) = clock.state();
        let blocked = match (blocked, paced.waiting_since().map(Instant::from_std)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match check(phase, blocked, &pressure, &t, Instant::now()) {
            Err(e) => return e,
            Ok(next) => {
                let next = stalls.map_or(next, |s| next.min(s));
                // Never asleep longer than a head or an idle spell may last: a phase that
                // starts later ends later than this, so it has no need to wake the watchdog
                // (`set_phase`), which then looks about once a header timeout on a busy
                // keep-alive connection instead of on every request.
                let next = next.min(Instant::now() + t.header.min(t.idle));
                if let Some(s) = &streams {
                    s.sleeping_until(next);
                }
                clock.armed.set(Some(Armed {
                    next,
                    header: t.header,
                    idle: t.idle,
                }));
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = clock.changed.notified() => {}
                    _ = paced.wait_began() => {}
                    _ = stream_owes(&streams) => {}
                }
            }
        }
    }
}

/// Resolves when an HTTP/2 connection has a body the watchdog should look at sooner; never for
/// HTTP/1.1.
async fn stream_owes(streams: &Option<Rc<h2_stall::Streams>>) {
    match streams {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// A socket that reports to a [`ConnClock`].
pub struct TimedIo<T> {
    inner: T,
    clock: Rc<ConnClock>,
}

impl<T> TimedIo<T> {
    pub fn new(inner: T, clock: Rc<ConnClock>) -> Self {
        Self { inner, clock }
    }
}

impl<T: Read + Unpin> Read for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A ready read is bytes or the end of the stream; at the end hyper closes the
        // connection itself, so counting it as the start of a head is harmless.
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &res {
            this.clock.read_bytes();
        }
        res
    }
}

impl<T: Write + Unpin> Write for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.clock.write_result(!matches!(res, Poll::Pending));
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.clock.write_result(!matches!(res, Poll::Pending));
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_flush(cx);
        this.clock.write_result(!matches!(res, Poll::Pending));
        res
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        write: Duration::from_secs(30),
        write_under_pressure: Duration::from_secs(5),
    };

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn each_phase_has_its_limit() {
        let t0 = Instant::now();
        // Idle: closed after `idle`, and not before.
        assert_eq!(
            check(Phase::Idle(t0), None, || false, &T, t0 + s(59)),
            Ok(t0 + s(60))
        );
        assert_eq!(
            check(Phase::Idle(t0), None, || false, &T, t0 + s(60)),
            Err(Expiry::Idle)
        );
        // A head must be whole `header` after its first byte, however slowly it trickles.
        assert_eq!(
            check(Phase::Head(t0), None, || false, &T, t0 + s(9)),
            Ok(t0 + s(10))
        );
        assert_eq!(
            check(Phase::Head(t0), None, || false, &T, t0 + s(10)),
            Err(Expiry::Header)
        );
        // Busy: no phase limit, only write progress; the watchdog looks again later.
        assert_eq!(
            check(Phase::Busy, None, || false, &T, t0 + s(500)),
            Ok(t0 + s(530))
        );
    }

    #[test]
    fn a_blocked_write_expires_in_any_phase() {
        let t0 = Instant::now();
        for phase in [Phase::Busy, Phase::Idle(t0), Phase::Head(t0)] {
            assert_eq!(
                check(phase, Some(t0), || false, &T, t0 + s(30)),
                Err(Expiry::Write),
                "{phase:?}"
            );
        }
        // Not yet expired; looked at again soon for the pressure, and at `write` at the latest.
        assert_eq!(
            check(Phase::Busy, Some(t0), || false, &T, t0 + s(29)),
            Ok(t0 + s(29) + PRESSURE_RECHECK)
        );
        assert_eq!(
            check(
                Phase::Busy,
                Some(t0),
                || false,
                &T,
                t0 + s(29) + Duration::from_millis(900)
            ),
            Ok(t0 + s(30))
        );
        // The earliest deadline wins: here the look at the pressure, then the head's.
        assert_eq!(
            check(Phase::Head(t0), Some(t0), || false, &T, t0 + s(1)),
            Ok(t0 + s(5))
        );
        assert_eq!(
            check(Phase::Head(t0), Some(t0 + s(8)), || false, &T, t0 + s(9)),
            Ok(t0 + s(10))
        );
    }

    #[test]
    fn under_pressure_a_blocked_write_expires_sooner() {
        let t0 = Instant::now();
        // Before `write_under_pressure`, the pressure is not even asked.
        assert_eq!(
            check(Phase::Busy, Some(t0), || unreachable!(), &T, t0 + s(4)),
            Ok(t0 + s(5))
        );
        assert_eq!(
            check(Phase::Busy, Some(t0), || true, &T, t0 + s(4)),
            Ok(t0 + s(5))
        );
        assert_eq!(
            check(Phase::Busy, Some(t0), || true, &T, t0 + s(5)),
            Err(Expiry::WriteUnderPressure)
        );
        // Without pressure the connection keeps its full write timeout, looked at again soon.
        assert_eq!(
            check(Phase::Busy, Some(t0), || false, &T, t0 + s(6)),
            Ok(t0 + s(6) + PRESSURE_RECHECK)
        );
        // A connection whose writes progress is never dropped for pressure.
        assert_eq!(
            check(Phase::Busy, None, || true, &T, t0 + s(100)),
            Ok(t0 + s(130))
        );
    }

    #[test]
    fn the_last_response_done_makes_the_connection_idle() {
        let clock = ConnClock::new();
        clock.read_bytes();
        assert!(matches!(clock.state().0, Phase::Head(_)));
        let a = clock.begin_request();
        let b = clock.begin_request();
        assert_eq!(clock.state().0, Phase::Busy);
        // Bytes of a pipelined head while busy do not start a head timer.
        clock.read_bytes();
        drop(a);
        assert_eq!(clock.state().0, Phase::Busy);
        drop(b);
        assert!(matches!(clock.state().0, Phase::Idle(_)));
        clock.write_result(false);
        let blocked = clock.state().1;
        assert!(blocked.is_some());
        clock.write_result(false);
        assert_eq!(
            clock.state().1,
            blocked,
            "blocked since the first pending write"
        );
        clock.write_result(true);
        assert_eq!(clock.state().1, None);
    }

    /// Run `dog` for `d` of (paused) time: its expiry if it ended.
    async fn run_for(
        dog: &mut Pin<&mut impl std::future::Future<Output = Expiry>>,
        d: Duration,
    ) -> Option<Expiry> {
        tokio::select! {
            e = dog.as_mut() => Some(e),
            _ = tokio::time::sleep(d) => None,
        }
    }

    /// The watchdog is woken only by a phase whose deadline is earlier than the one it sleeps
    /// until; a later one is seen when it wakes. No deadline moves: a head that starts while
    /// the watchdog sleeps until an earlier head's deadline still expires `header` after its
    /// first byte, and an idle connection `idle` after its last request.
    #[tokio::test(start_paused = true)]
    async fn phases_that_do_not_wake_the_watchdog_still_expire_on_time() {
        use std::os::fd::AsRawFd;
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (room, _room_guard) = SendRoom::new(a.as_raw_fd());
        let clock = ConnClock::new();
        let t0 = Instant::now();
        let dog = watch(clock.clone(), T, || false, room.clone(), None);
        tokio::pin!(dog);
        assert_eq!(run_for(&mut dog, s(1)).await, None);
        // A request: its head (the watchdog now sleeps until t0 + 11), then busy, then idle.
        clock.read_bytes();
        let request = clock.begin_request();
        assert_eq!(run_for(&mut dog, s(1)).await, None);
        drop(request);
        // A second head at t0 + 3: its deadline (t0 + 13) is later than the first's.
        assert_eq!(run_for(&mut dog, s(1)).await, None);
        clock.read_bytes();
        assert_eq!(run_for(&mut dog, s(60)).await, Some(Expiry::Header));
        assert_eq!(Instant::now(), t0 + s(13));

        // Idle after a request: closed `idle` after it ended, not at an earlier deadline.
        let clock = ConnClock::new();
        let t0 = Instant::now();
        let dog = watch(clock.clone(), T, || false, room, None);
        tokio::pin!(dog);
        assert_eq!(run_for(&mut dog, s(1)).await, None);
        clock.read_bytes();
        let request = clock.begin_request();
        assert_eq!(run_for(&mut dog, s(5)).await, None);
        drop(request);
        assert_eq!(run_for(&mut dog, s(120)).await, Some(Expiry::Idle));
        assert_eq!(Instant::now(), t0 + s(66));
    }
}
