//! How a worker's connections hand its io_uring's finished disk reads to their tasks: every
//! connection future (and every HTTP/2 stream task) is polled through [`reaping`].

/// Connection polls between two dispatches of the worker ring's completions (see [`reaping`]).
/// Lab, one worker, wrk -c256, alternating 12 s rounds: every 8 polls cost 100 KiB uniform a
/// fifth of its throughput; every 64 kept it (and 4 KiB within the rounds' spread) and cut the
/// 100 KiB zipf p99 as much; a busy worker makes 64 polls in about 2 ms, a pass over its
/// queue takes about 9.
pub const REAP_EVERY_POLLS: u32 = 64;

thread_local! {
    static POLLS_SINCE_REAP: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Poll `conn`, and before every [`REAP_EVERY_POLLS`]th connection poll of this worker hand the
/// ring's finished disk reads to their tasks. tokio-uring does that from one task that waits its
/// turn in the worker's FIFO queue behind every ready connection, so on a busy worker a disk
/// hit waited two or three passes over the queue where a RAM hit waits one (100 KiB zipf p99 17-19
/// ms against 27-28 in the lab; `third_party/tokio-uring/PATCHES.md`).
pub(crate) async fn reaping<F: std::future::Future>(conn: F) -> F::Output {
    let mut conn = std::pin::pin!(conn);
    std::future::poll_fn(|cx| {
        let n = POLLS_SINCE_REAP.get() + 1;
        if n >= REAP_EVERY_POLLS {
            tokio_uring::dispatch_completions();
            POLLS_SINCE_REAP.set(0);
        } else {
            POLLS_SINCE_REAP.set(n);
        }
        conn.as_mut().poll(cx)
    })
    .await
}
