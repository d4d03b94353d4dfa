//! The tracing log: the data plane's own lines (tracing's), to stderr, beside the access log on
//! stdout ([`crate::request_log`]).

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use crate::line_queue::{Counters, MakeQueueWriter, QUEUE_BYTES, Queue};

/// The tracing log's queue ([`crate::line_queue`]), once started.
static QUEUE: OnceLock<Arc<Queue>> = OnceLock::new();

/// What the tracing log's writer counts (when stderr is a pipe): `log_lines_total`,
/// `log_dropped_total`, `log_write_errors_total`.
pub static COUNTERS: LazyLock<Counters> = LazyLock::new(Counters::default);

/// The tracing log, to stderr (stdout is the access log's, [`crate::request_log`]). When
/// stderr is a pipe or a socket (a container's log, whose reader may stall), through a bounded
/// queue and a writer thread: a worker never waits for it, and a line that does not fit is
/// dropped and counted. A file or a terminal takes each line as it is written.
pub fn init(filter: &str) {
    use std::os::unix::fs::FileTypeExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: log files stay greppable.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_target(false);
    let stderr = std::os::fd::AsFd::as_fd(&std::io::stderr())
        .try_clone_to_owned()
        .map(std::fs::File::from);
    let piped = stderr.as_ref().is_ok_and(|f| {
        f.metadata().is_ok_and(|m| {
            let t = m.file_type();
            t.is_fifo() || t.is_socket()
        })
    });
    let queue = match stderr {
        Ok(f) if piped => Queue::start("log", f, QUEUE_BYTES, COUNTERS.clone())
            .map_err(|e| eprintln!("edgecache-dataplane: the log writes to stderr directly: {e}"))
            .ok(),
        _ => None,
    };
    let _ = match queue {
        Some(q) => {
            let q = Arc::new(q);
            let _ = QUEUE.set(q.clone());
            builder.with_writer(MakeQueueWriter(q)).try_init()
        }
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}

/// Wait (at most `timeout`) until the tracing lines queued so far are written: before exit.
pub fn flush(timeout: Duration) {
    if let Some(q) = QUEUE.get() {
        q.flush(timeout);
    }
}
