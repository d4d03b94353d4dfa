//! A log's one writer: a thread that takes formatted lines from a queue bounded in bytes and
//! writes them to its own duplicate of a descriptor, several lines to a `write`. Workers only
//! ever [`Queue::push`], which never waits: a line that does not fit in the queue (the output
//! is slower than the lines come, or a pipe nobody reads is full) is dropped and counted. The
//! access log (stdout, src/request_log.rs) and the tracing log (stderr, [`MakeQueueWriter`])
//! each have one.
//!
//! Each `write` is at most [`PIPE_BUF`] bytes and ends at a line's end, so on a pipe (a
//! container's stdout) it is atomic: another writer of the same pipe cannot land inside a
//! line. The writer does not take std's stdout or stderr lock.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tracing::warn;

/// Lines waiting for the writer, in bytes, at most (about 3,000 lines of 350 bytes).
pub const QUEUE_BYTES: usize = 1 << 20;

/// How long the writer waits for more lines after the first one into an empty queue.
pub const LINGER: Duration = Duration::from_millis(2);

/// The most a pipe writes atomically (Linux).
pub const PIPE_BUF: usize = 4096;

enum Msg {
    Line(String),
    /// Answered once every line queued before it was written (or given up on).
    Flush(mpsc::SyncSender<()>),
}

/// What the writer counts.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Lines written.
    pub lines: Counter,
    /// Lines dropped because the queue was full.
    pub queue_full: Counter,
    /// Lines lost to a failed write (the output closed, ...).
    pub write_errors: Counter,
}

/// The workers' end of the queue.
#[derive(Debug)]
pub struct Queue {
    tx: mpsc::Sender<Msg>,
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
    counters: Counters,
}

impl Queue {
    /// Start the writer thread of the log `name` (`access-log`, `log`) on `out`.
    pub fn start(
        name: &'static str,
        out: File,
        max_bytes: usize,
        counters: Counters,
    ) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let writer = Writer {
            name,
            out,
            queued: queued.clone(),
            counters: counters.clone(),
            warned: false,
        };
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || writer.run(rx))?;
        Ok(Self {
            tx,
            queued,
            max_bytes,
            counters,
        })
    }

    /// Queue `line` (one or more whole lines), or drop and count it when the queue is full.
    pub fn push(&self, line: String) {
        let n = line.len();
        if self.queued.fetch_add(n, Ordering::AcqRel) + n > self.max_bytes {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            self.counters.queue_full.inc();
            return;
        }
        if self.tx.send(Msg::Line(line)).is_err() {
            // The writer is gone (it never ends on its own): nothing can be written.
            self.queued.fetch_sub(n, Ordering::AcqRel);
            self.counters.write_errors.inc();
        }
    }

    /// Wait (at most `timeout`) until the lines queued so far are written.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = mpsc::sync_channel(1);
        self.tx.send(Msg::Flush(done)).is_ok() && wait.recv_timeout(timeout).is_ok()
    }
}

/// The tracing log's writer: each event, formatted whole, becomes one queued line.
#[derive(Debug, Clone)]
pub struct MakeQueueWriter(pub Arc<Queue>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MakeQueueWriter {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            queue: self.0.clone(),
            buf: Vec::new(),
        }
    }
}

/// One event's bytes, queued when it is dropped.
pub struct EventWriter {
    queue: Arc<Queue>,
    buf: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let bytes = std::mem::take(&mut self.buf);
            let line = String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            self.queue.push(line);
        }
    }
}

struct Writer {
    name: &'static str,
    out: File,
    queued: Arc<AtomicUsize>,
    counters: Counters,
    warned: bool,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut buf = Vec::with_capacity(PIPE_BUF);
        let mut next: Option<Msg> = None;
        loop {
            let msg = match next.take() {
                Some(m) => m,
                None => match rx.recv() {
                    Ok(m) => {
                        // Woken from an empty queue: let a batch gather, so a busy server
                        // costs a wake-up and a write per batch of lines, not per line.
                        std::thread::sleep(LINGER);
                        m
                    }
                    Err(_) => return,
                },
            };
            let line = match msg {
                Msg::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
                Msg::Line(l) => l,
            };
            // Gather what is already queued, up to one atomic write.
            buf.clear();
            buf.extend_from_slice(line.as_bytes());
            let mut lines = 1;
            while buf.len() < PIPE_BUF {
                match rx.try_recv() {
                    Ok(Msg::Line(l)) if buf.len() + l.len() <= PIPE_BUF => {
                        buf.extend_from_slice(l.as_bytes());
                        lines += 1;
                    }
                    Ok(m) => {
                        next = Some(m);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.write(&buf, lines);
            self.queued.fetch_sub(buf.len(), Ordering::AcqRel);
        }
    }

    fn write(&mut self, mut buf: &[u8], lines: u64) {
        while !buf.is_empty() {
            match self.out.write(buf) {
                Ok(0) => return self.failed(lines, &io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A non-blocking output (someone set O_NONBLOCK on the pipe): wait for room.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return self.failed(lines, &e),
            }
        }
        self.counters.lines.inc_by(lines);
    }

    fn failed(&mut self, lines: u64, e: &io::Error) {
        self.counters.write_errors.inc_by(lines);
        if !self.warned {
            self.warned = true;
            // The tracing log's own failure goes into its queue, and is dropped there too.
            warn!(
                "{}: cannot write ({e}); lines are dropped and counted",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn lines_arrive_whole_and_in_order() {
        let (mut r, w) = std::io::pipe().unwrap();
        let c = Counters::default();
        let q = Queue::start(
            "test",
            File::from(std::os::fd::OwnedFd::from(w)),
            QUEUE_BYTES,
            c.clone(),
        )
        .unwrap();
        let lines: Vec<String> = (0..2000)
            .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 300)))
            .collect();
        let want = lines.concat();
        let len = want.len();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0; len];
            r.read_exact(&mut got).unwrap();
            got
        });
        for line in lines {
            q.push(line);
        }
        assert!(q.flush(Duration::from_secs(10)));
        assert_eq!(c.lines.get(), 2000);
        assert_eq!(c.queue_full.get(), 0);
        let got = reader.join().unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
    }

    #[test]
    fn a_full_pipe_drops_lines_without_blocking_the_pusher() {
        // Nobody reads `_r`: the pipe fills, then the queue.
        let (_r, w) = std::io::pipe().unwrap();
        let c = Counters::default();
        let q = Queue::start(
            "test",
            File::from(std::os::fd::OwnedFd::from(w)),
            64 << 10,
            c.clone(),
        )
        .unwrap();
        let t = std::time::Instant::now();
        for _ in 0..20_000 {
            q.push(format!("{}\n", "y".repeat(200)));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(c.queue_full.get() > 10_000, "{}", c.queue_full.get());
        assert!(q.queued.load(Ordering::Acquire) <= 64 << 10);
    }
}
