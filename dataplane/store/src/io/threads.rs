//! The thread-pool engine: `pread`/`pwrite` on a pool of std threads (nginx's `aio threads`).
//!
//! The pool is shared by all workers (one per store). Each operation is a job sent over a std
//! channel; the answer comes back on a tokio oneshot, so a worker awaits it like any future and
//! the engine works inside any tokio runtime (current-thread included). The buffer travels with
//! the job and comes back with the result, exactly like the io_uring engine.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use tokio::sync::oneshot;

use super::file::SegFile;
use super::{AlignedBuf, FileId, IoEngine, READ_PIECE};

/// Pool size. Blocking disk calls need in-flight depth; 16 threads reached the disk's limit for
/// 4 KiB random reads on the 2-vCPU test machine (recipes §6: the pread pool was competitive).
pub const POOL_THREADS: usize = 16;

enum Op {
    Read,
    Write,
}

struct Job {
    op: Op,
    file: FileId,
    buf: AlignedBuf,
    off: u64,
    /// Bytes to read (reads only).
    len: usize,
    reply: oneshot::Sender<(io::Result<usize>, AlignedBuf)>,
}

/// The shared pool. Dropping it closes the channel; the threads then exit.
pub struct ThreadPool {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    handles: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl ThreadPool {
    pub(crate) fn start(files: Arc<Vec<SegFile>>, threads: usize) -> io::Result<Arc<ThreadPool>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            let files = Arc::clone(&files);
            let h = thread::Builder::new()
                .name(format!("ec-io-{i}"))
                .spawn(move || run(&rx, &files))?;
            handles.push(h);
        }
        Ok(Arc::new(ThreadPool {
            tx: Mutex::new(Some(tx)),
            handles: Mutex::new(handles),
        }))
    }

    fn submit(&self, job: Job) -> Result<(), Job> {
        let guard = match self.tx.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match guard.as_ref() {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
        if let Ok(mut hs) = self.handles.lock() {
            for h in hs.drain(..) {
                let _ = h.join();
            }
        }
    }
}

fn run(rx: &Mutex<mpsc::Receiver<Job>>, files: &[SegFile]) {
    loop {
        let job = {
            let Ok(rx) = rx.lock() else { return };
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        let Job {
            op,
            file,
            mut buf,
            off,
            len,
            reply,
        } = job;
        let res = match files.get(file.seg as usize) {
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such segment")),
            Some(f) => {
                let f = f.get(file.direct);
                match op {
                    Op::Read => {
                        let len = len.min(buf.capacity());
                        let r = read_in_pieces(f, &mut buf.full_mut()[..len], off);
                        if let Ok(n) = r {
                            buf.set_len(n);
                        }
                        r
                    }
                    Op::Write => f.write_at(buf.as_slice(), off),
                }
            }
        };
        let _ = reply.send((res, buf));
    }
}

/// Fill `dst` from `off` with reads of at most [`READ_PIECE`] bytes, one after another; returns
/// the count read, short only at the end of the file.
fn read_in_pieces(f: &std::fs::File, dst: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < dst.len() {
        let want = (dst.len() - done).min(READ_PIECE);
        let n = match f.read_at(&mut dst[done..done + want], off + done as u64) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        done += n;
        if n < want {
            break;
        }
    }
    Ok(done)
}

/// A worker's handle on the shared pool.
#[derive(Clone)]
pub struct ThreadsEngine {
    pool: Arc<ThreadPool>,
}

impl ThreadsEngine {
    pub fn new(pool: Arc<ThreadPool>) -> ThreadsEngine {
        ThreadsEngine { pool }
    }

    async fn run(
        &self,
        op: Op,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        let (reply, rx) = oneshot::channel();
        let job = Job {
            op,
            file,
            buf,
            off,
            len,
            reply,
        };
        if let Err(job) = self.pool.submit(job) {
            return (
                Err(io::Error::other("I/O thread pool is shut down")),
                job.buf,
            );
        }
        match rx.await {
            Ok(r) => r,
            // The thread panicked or exited with the job; the buffer is gone with it.
            Err(_) => (
                Err(io::Error::other("I/O thread lost the request")),
                AlignedBuf::new(0),
            ),
        }
    }
}

impl IoEngine for ThreadsEngine {
    async fn read_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        self.run(Op::Read, file, buf, off, len).await
    }

    async fn write_at(
        &self,
        file: FileId,
        buf: AlignedBuf,
        off: u64,
    ) -> (io::Result<usize>, AlignedBuf) {
        self.run(Op::Write, file, buf, off, 0).await
    }
}
