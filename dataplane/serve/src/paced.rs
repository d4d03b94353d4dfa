//! Stored bodies sent no faster than the client's socket takes them.
//!
//! A large disk hit is read in chunks from the worker's I/O budget. Handed whole to hyper, a
//! chunk would stay in hyper's write buffer for as long as its client does not read, so
//! readers that stall hold the budget and fresh clients' hits wait for them. Here a chunk goes
//! to hyper whole only when the socket has room for all of it ([`SendRoom`]); otherwise what the
//! socket takes now goes (a slice of the chunk; a copy when the least piece, [`MIN_PIECE`], is
//! more than the room), and the chunk, with the store's
//! stream and its read-ahead, is kept here. While requests on the worker wait for buffer memory,
//! the worker's [`Keepers`] sweep gives back what a stream keeps whose client took nothing for
//! twice [`RELEASE_AFTER`] (no piece sent, and the socket's unsent bytes went down by less than
//! [`DRAINED_MIN`]: a client that reads keeps its chunk, so nothing is read twice for it); such
//! a stream opens
//! its object again when its client reads (the
//! same record, by its location: if it was evicted meanwhile, the stream fails and the caller's
//! repair finishes the response from the origin).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use tokio::sync::Notify;

use crate::send_room::SendRoom;

/// A stream of body chunks, as the store yields them.
pub type Chunks = Pin<Box<dyn Stream<Item = io::Result<Bytes>>>>;

/// The least sent to a socket without room: a stream always progresses, and what hyper holds
/// of a stalled connection is at most this copy.
pub const MIN_PIECE: u64 = 4 << 10;

/// A stream that made no progress for this long gives its chunk back while others wait for
/// buffer memory.
pub const RELEASE_AFTER: Duration = Duration::from_millis(50);

/// What a client must take from its socket within [`RELEASE_AFTER`] to count as reading (about
/// 1.3 MB/s); less, and under buffer pressure its chunk goes back. A stalled client's socket
/// may still trickle a few KiB (its receive queue compacted), which is not reading.
pub const DRAINED_MIN: u64 = 64 << 10;

/// How often the sweep looks while streams keep chunks.
const SWEEP_EVERY: Duration = Duration::from_millis(10);

/// A stream whose socket has no room looks again after this, doubling up to [`NAP_MAX`].
const NAP_MIN: Duration = Duration::from_millis(2);
const NAP_MAX: Duration = Duration::from_millis(64);

/// What a room-limited stream keeps between its pieces.
#[derive(Default)]
struct Kept {
    /// The unsent rest of the current chunk.
    data: Option<Bytes>,
    /// The store's stream (its read-ahead in it).
    inner: Option<Chunks>,
    /// The last piece sent (or the start).
    since: Option<Instant>,
    /// The sweep took `data` and `inner`: open again at the stream's position.
    released: bool,
    /// In the worker's [`Keepers`] (until the stream ends or is released).
    listed: bool,
    /// The connection, and its unsent bytes when the sweep last looked: a client that drained
    /// some since is slow, not stalled, and keeps its chunk.
    room: Option<SendRoom>,
    unsent_seen: Option<u64>,
}

/// The streams of a worker that keep chunks for clients without room.
#[derive(Default)]
pub struct Keepers {
    kept: RefCell<Vec<Weak<RefCell<Kept>>>>,
    added: Notify,
}

impl Keepers {
    fn add(&self, k: &Rc<RefCell<Kept>>) {
        self.kept.borrow_mut().push(Rc::downgrade(k));
        self.added.notify_one();
    }

    /// Give back what streams without progress since `now - RELEASE_AFTER` keep; how many
    /// did. Streams that ended are forgotten.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut released = 0;
        self.kept.borrow_mut().retain(|w| {
            let Some(k) = w.upgrade() else {
                return false;
            };
            // Never borrowed across an await, so free whenever this runs.
            let Ok(mut k) = k.try_borrow_mut() else {
                return true;
            };
            let stale = k
                .since
                .is_some_and(|t| now.saturating_duration_since(t) >= RELEASE_AFTER);
            if !stale || (k.data.is_none() && k.inner.is_none()) {
                return true;
            }
            // No piece sent for RELEASE_AFTER: released only if its client took less than
            // DRAINED_MIN in the last RELEASE_AFTER too (its unsent bytes barely went down).
            let unsent = k.room.as_ref().and_then(SendRoom::unsent);
            let drained = match (k.unsent_seen, unsent) {
                (Some(before), Some(after)) => after + DRAINED_MIN <= before,
                _ => true,
            };
            if drained {
                k.unsent_seen = unsent;
                k.since = Some(now);
                return true;
            }
            k.data = None;
            k.inner = None;
            k.released = true;
            k.listed = false;
            released += 1;
            false
        });
        released
    }

    /// Sweep while `pressure()` says requests wait for buffer memory, every [`SWEEP_EVERY`]
    /// while some stream is listed; `released` counts what went back. Runs for the worker's
    /// life.
    pub async fn run(self: Rc<Self>, pressure: impl Fn() -> bool, released: impl Fn(usize)) {
        loop {
            if self.kept.borrow().is_empty() {
                self.added.notified().await;
            }
            tokio::time::sleep(SWEEP_EVERY).await;
            if pressure() {
                let n = self.sweep(Instant::now());
                if n > 0 {
                    released(n);
                }
            } else {
                self.kept.borrow_mut().retain(|w| w.strong_count() > 0);
            }
        }
    }
}

/// Opens the body again from a position: `range` of the same record.
pub type Reopen = Rc<dyn Fn(Range<u64>) -> Pin<Box<dyn Future<Output = io::Result<Chunks>>>>>;

struct State {
    kept: Rc<RefCell<Kept>>,
    /// The body offset of the next byte to send, and the end of the range.
    pos: u64,
    end: u64,
    room: SendRoom,
    keepers: Rc<Keepers>,
    reopen: Reopen,
}

/// `inner`, the body bytes `range` of a stored object, paced by `room` (see the module doc).
pub fn paced(
    inner: Chunks,
    range: Range<u64>,
    room: SendRoom,
    keepers: Rc<Keepers>,
    reopen: Reopen,
) -> impl Stream<Item = io::Result<Bytes>> + 'static {
    let st = State {
        kept: Rc::new(RefCell::new(Kept {
            inner: Some(inner),
            since: Some(Instant::now()),
            room: Some(room.clone()),
            ..Kept::default()
        })),
        pos: range.start,
        end: range.end,
        room,
        keepers,
        reopen,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        match next(&mut st).await {
            Ok(Some(b)) => Some((Ok(b), st)),
            Ok(None) => None,
            Err(e) => {
                st.pos = st.end;
                Some((Err(e), st))
            }
        }
    })
}

async fn next(st: &mut State) -> io::Result<Option<Bytes>> {
    if st.pos >= st.end {
        return Ok(None);
    }
    // No room: wait, the chunk in the cell (the sweep may take it meanwhile), and read nothing
    // more for a client that does not read. hyper polls again only once it wrote what it has,
    // so what it holds of a stalled connection is the last piece.
    let mut nap = NAP_MIN;
    let room = loop {
        match st.room.room() {
            Some(0) => {
                // To the connection's watchdog, a blocked write (with its timeouts).
                st.room.set_waiting(true);
                list(st);
            }
            Some(r) => break r,
            None => break u64::MAX,
        }
        tokio::time::sleep(nap).await;
        nap = (nap * 2).min(NAP_MAX);
    };
    st.room.set_waiting(false);
    // Take what is kept out of the cell: the sweep must not take it while this runs.
    let (data, inner, released) = {
        let mut k = st.kept.borrow_mut();
        let released = std::mem::take(&mut k.released);
        (k.data.take(), k.inner.take(), released)
    };
    // An empty rest still holds its chunk's buffer: drop it before waiting for the next.
    let (mut data, inner) = match data.filter(|d| !d.is_empty()) {
        Some(d) => (d, inner),
        None => {
            let mut inner = match inner {
                Some(i) if !released => i,
                _ => (st.reopen)(st.pos..st.end).await?,
            };
            match inner.next().await {
                Some(Ok(b)) => (b, Some(inner)),
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "stored body ended early",
                    ));
                }
            }
        }
    };
    let left = st.end - st.pos;
    if data.len() as u64 > left {
        data.truncate(left as usize);
    }
    let n = data.len() as u64;
    if room >= n {
        st.pos += n;
        let mut k = st.kept.borrow_mut();
        k.inner = inner;
        k.since = Some(Instant::now());
        k.unsent_seen = None;
        return Ok(Some(data));
    }
    // Only what the socket takes now goes; the chunk stays here. Within the room the socket
    // takes the piece at once, so hyper drops it at once: a slice of the chunk, no copy. The
    // least piece may be more than the room: hyper could hold it while the client stalls, so
    // it is a copy and the sweep can still give the chunk back.
    let take = room.max(MIN_PIECE).min(n) as usize;
    let piece = if take as u64 <= room {
        data.split_to(take)
    } else {
        let piece = Bytes::copy_from_slice(&data[..take]);
        data.advance(take);
        piece
    };
    st.pos += take as u64;
    {
        let mut k = st.kept.borrow_mut();
        k.data = Some(data);
        k.inner = inner;
        k.since = Some(Instant::now());
        k.unsent_seen = None;
    }
    list(st);
    Ok(Some(piece))
}

/// Put the stream in the worker's [`Keepers`], if it is not.
fn list(st: &State) {
    let new = !std::mem::replace(&mut st.kept.borrow_mut().listed, true);
    if new {
        st.keepers.add(&st.kept);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::cell::{Cell, RefCell};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use super::*;

    /// Body byte `i` of the test object.
    fn byte(i: u64) -> u8 {
        (i * 7 % 251) as u8
    }

    /// The test object's `range` in chunks of `chunk` bytes; `opened` counts the opens.
    fn chunks(range: Range<u64>, chunk: u64, opened: &Rc<Cell<u32>>) -> Chunks {
        opened.set(opened.get() + 1);
        let starts: Vec<u64> = range.clone().step_by(chunk as usize).collect();
        let end = range.end;
        Box::pin(futures_util::stream::iter(starts.into_iter().map(
            move |s| {
                Ok(Bytes::from(
                    (s..(s + chunk).min(end)).map(byte).collect::<Vec<u8>>(),
                ))
            },
        )))
    }

    /// A connected pair: the server side (non-blocking, probed) and a client with a 256 KiB
    /// receive buffer (smaller ones drain slowly on loopback: its window would open by less
    /// than the 64 KiB segment size, and the receiver holds back such updates).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        socket2::SockRef::from(&client)
            .set_recv_buffer_size(256 << 10)
            .unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        // As the data plane's client sockets: no Nagle wait for the small segments a 4 KiB
        // window makes.
        server.set_nodelay(true).unwrap();
        (server, client)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_socket_without_room_gets_pieces_and_its_chunk_goes_back_and_is_read_again() {
        let (mut server, mut client) = pair();
        let (room, _guard) = SendRoom::new(server.as_raw_fd());
        let opened = Rc::new(Cell::new(0));
        let len = 8u64 << 20;
        let chunk = 256u64 << 10;
        let keepers = Rc::new(Keepers::default());
        let o = opened.clone();
        let reopen: Reopen = Rc::new(move |r| {
            let c = chunks(r, chunk, &o);
            Box::pin(async move { Ok(c) })
        });
        let mut body = Box::pin(paced(
            chunks(0..len, chunk, &opened),
            0..len,
            room,
            keepers.clone(),
            reopen,
        ));
        rt().block_on(async {
            // Pull as hyper would: again only once the socket took all of the last piece.
            // Once the socket has no room, the stream waits, its chunk kept.
            let mut pending = Vec::new();
            let mut pulled = 0u64;
            while pending.is_empty() {
                let Ok(b) = tokio::time::timeout(RELEASE_AFTER, body.next()).await else {
                    break;
                };
                let b = b.unwrap().unwrap();
                pulled += b.len() as u64;
                let mut n = 0;
                while let Ok(k @ 1..) = server.write(&b[n..]) {
                    n += k;
                    if n == b.len() {
                        break;
                    }
                }
                pending.extend_from_slice(&b[n..]);
            }
            assert!(pulled < len, "the socket took it all");
            // No piece for RELEASE_AFTER: the sweep looks at the socket; nothing drained in
            // another RELEASE_AFTER: it gives the chunk back.
            tokio::time::sleep(RELEASE_AFTER * 2).await;
            assert_eq!(keepers.sweep(Instant::now()), 0, "first look");
            tokio::time::sleep(RELEASE_AFTER * 2).await;
            assert_eq!(keepers.sweep(Instant::now()), 1);
            assert_eq!(opened.get(), 1);
            // The client reads; the rest comes from a second open, every byte in order.
            let reader = std::thread::spawn(move || {
                let mut all = vec![0u8; len as usize];
                client.read_exact(&mut all).unwrap();
                all
            });
            server.set_nonblocking(false).unwrap();
            server.write_all(&pending).unwrap();
            while let Some(b) = body.next().await {
                server.write_all(&b.unwrap()).unwrap();
            }
            let all = reader.join().unwrap();
            assert!(all.iter().enumerate().all(|(i, &x)| x == byte(i as u64)));
            assert_eq!(opened.get(), 2, "opened again after the release");
        });
    }

    /// A piece the socket has room for is a slice of its chunk, not a copy; every byte still
    /// comes in order.
    #[test]
    fn pieces_within_the_room_are_slices_of_their_chunk() {
        let (mut server, mut client) = pair();
        let (room, _guard) = SendRoom::new(server.as_raw_fd());
        let (len, chunk) = (8u64 << 20, 256u64 << 10);
        let made = Rc::new(RefCell::new(Vec::<Bytes>::new()));
        let m = made.clone();
        let src: Chunks = Box::pin(chunks(0..len, chunk, &Rc::new(Cell::new(0))).map(move |c| {
            let c = c.unwrap();
            m.borrow_mut().push(c.clone());
            Ok(c)
        }));
        let never: Reopen = Rc::new(|_| Box::pin(async { Err(io::Error::other("no reopen")) }));
        let mut body = Box::pin(paced(src, 0..len, room, Rc::new(Keepers::default()), never));
        let inside = |p: &Bytes| {
            made.borrow().iter().any(|c| {
                let (start, end) = (c.as_ptr() as usize, c.as_ptr() as usize + c.len());
                (start..end).contains(&(p.as_ptr() as usize))
            })
        };
        rt().block_on(async {
            let (mut got, mut sliced) = (Vec::new(), 0);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let b = match tokio::time::timeout(RELEASE_AFTER, body.next()).await {
                    Ok(None) => break,
                    Ok(Some(b)) => b.unwrap(),
                    Err(_) => {
                        // No room: the client reads some of what is queued.
                        let n = client.read(&mut buf).unwrap();
                        got.extend_from_slice(&buf[..n]);
                        continue;
                    }
                };
                if (b.len() as u64) < chunk && b.len() as u64 > MIN_PIECE {
                    assert!(inside(&b), "a piece within the room was copied");
                    sliced += 1;
                }
                let mut n = 0;
                while n < b.len() {
                    match server.write(&b[n..]) {
                        Ok(k) => n += k,
                        Err(_) => {
                            let r = client.read(&mut buf).unwrap();
                            got.extend_from_slice(&buf[..r]);
                        }
                    }
                }
            }
            server.set_nonblocking(false).unwrap();
            drop(server);
            client.read_to_end(&mut got).unwrap();
            assert_eq!(got.len() as u64, len);
            assert!(got.iter().enumerate().all(|(i, &x)| x == byte(i as u64)));
            assert!(sliced > 0, "no piece was smaller than a chunk");
        });
    }

    #[test]
    fn with_room_chunks_pass_whole() {
        let (server, mut client) = pair();
        socket2::SockRef::from(&client)
            .set_recv_buffer_size(4 << 20)
            .unwrap();
        let (room, _guard) = SendRoom::new(server.as_raw_fd());
        let opened = Rc::new(Cell::new(0));
        let never: Reopen = Rc::new(|_| Box::pin(async { Err(io::Error::other("no reopen")) }));
        let chunk = 8u64 << 10;
        let mut body = Box::pin(paced(
            chunks(0..64 << 10, chunk, &opened),
            0..64 << 10,
            room,
            Rc::new(Keepers::default()),
            never,
        ));
        rt().block_on(async {
            let mut n = 0;
            while let Some(b) = body.next().await {
                assert_eq!(b.unwrap().len() as u64, chunk);
                n += 1;
            }
            assert_eq!(n, 8);
        });
        drop(client.write(b"x"));
    }
}
