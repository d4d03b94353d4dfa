//! How many more bytes a client connection should be given now: none while its socket is not
//! writable (poll without POLLOUT, the kernel's own test: free send buffer at least half of
//! what is queued); else what keeps the bytes queued and not yet sent (`SIOCOUTQNSD`) within
//! [`UNSENT_BOUND`]. Bytes in flight (sent, not yet acknowledged) do not count, so a fast client
//! far away is not slowed; a client that stops reading (a zero window) stops at the bound, the
//! idea of `TCP_NOTSENT_LOWAT`. Stored bodies are sent no faster than this (the data plane's
//! src/paced.rs), so a client that stops reading holds no I/O buffer of its worker.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::Notify;

/// The most a connection may have queued and not yet sent: two body chunks, so a client that
/// reads always has the next chunk queued while the one after is read from disk.
pub const UNSENT_BOUND: u64 = 512 << 10;

/// `SIOCOUTQNSD` (linux/sockios.h): the bytes of a TCP socket's send queue not yet sent.
const SIOCOUTQNSD: libc::Ioctl = 0x894B;

/// A probe of one connection's socket, handed to its requests (a request extension). It reads
/// the socket only while the connection is open: [`SendRoomGuard`] closes it when the
/// connection ends, before its file descriptor can be reused.
#[derive(Debug, Clone)]
pub struct SendRoom {
    fd: RawFd,
    open: Arc<AtomicBool>,
    /// Since when a body waits for room (nanoseconds past [`base`], plus one; 0: not waiting):
    /// to the connection's watchdog that is a blocked write, with its timeouts.
    waiting: Arc<AtomicU64>,
    /// Tells the watchdog that a wait began.
    began: Arc<Notify>,
}

/// The instant [`SendRoom`] wait times count from.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Closes its [`SendRoom`] when dropped (held by the connection).
#[derive(Debug)]
pub struct SendRoomGuard(Arc<AtomicBool>);

impl Drop for SendRoomGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl SendRoom {
    /// A probe of the socket `fd`, open until the guard is dropped: drop the guard before the
    /// socket is closed.
    pub fn new(fd: RawFd) -> (SendRoom, SendRoomGuard) {
        let open = Arc::new(AtomicBool::new(true));
        (
            SendRoom {
                fd,
                open: open.clone(),
                waiting: Arc::default(),
                began: Arc::default(),
            },
            SendRoomGuard(open),
        )
    }

    /// A body waits for room (`true`) or sent something (`false`).
    pub fn set_waiting(&self, waiting: bool) {
        if !waiting {
            self.waiting.store(0, Ordering::Relaxed);
            return;
        }
        let now = base().elapsed().as_nanos() as u64 + 1;
        if self
            .waiting
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.began.notify_one();
        }
    }

    /// Since when a body of the connection waits for room.
    pub fn waiting_since(&self) -> Option<Instant> {
        match self.waiting.load(Ordering::Relaxed) {
            0 => None,
            n => Some(base() + std::time::Duration::from_nanos(n - 1)),
        }
    }

    /// Resolves when a wait begins.
    pub async fn wait_began(&self) {
        self.began.notified().await;
    }

    /// The bytes to give the connection now (0: none); `None` when the connection is closed
    /// or the socket cannot say (then the caller does not pace). The workspace denies
    /// `unsafe_code`: the calls into the kernel here need it, and no maintained safe wrapper
    /// has `SIOCOUTQNSD`.
    #[allow(unsafe_code)]
    pub fn room(&self) -> Option<u64> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one live pollfd, a zero timeout; `fd` is the connection's socket, open while
        // `open` is set (the guard is dropped before the socket is closed, on this thread).
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        if r < 0 {
            return None;
        }
        if pfd.revents & libc::POLLOUT == 0 {
            return Some(0);
        }
        Some(UNSENT_BOUND.saturating_sub(self.unsent()?))
    }

    /// The bytes queued on the socket and not yet sent; `None` when the connection is closed
    /// or the socket cannot say.
    #[allow(unsafe_code)]
    pub fn unsent(&self) -> Option<u64> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut unsent: libc::c_int = 0;
        // SAFETY: SIOCOUTQNSD writes one c_int through a pointer to a live c_int; `fd` is the
        // connection's socket, open while `open` is set (see `room`).
        let r = unsafe { libc::ioctl(self.fd, SIOCOUTQNSD, &mut unsent) };
        u64::try_from(unsent).ok().filter(|_| r == 0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn a_socket_that_is_not_read_has_no_room_until_it_is() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // 256 KiB: a smaller receive buffer drains slowly on loopback (see the data plane's
        // src/paced.rs).
        socket2::SockRef::from(&reader)
            .set_recv_buffer_size(256 << 10)
            .unwrap();
        let (mut writer, _) = l.accept().unwrap();
        writer.set_nonblocking(true).unwrap();
        writer.set_nodelay(true).unwrap();
        let (probe, guard) = SendRoom::new(writer.as_raw_fd());
        assert_eq!(probe.room(), Some(UNSENT_BOUND), "nothing queued");
        // Fill the send queue: the reader reads nothing.
        let chunk = vec![7u8; 64 << 10];
        let mut sent = 0usize;
        while let Ok(n) = writer.write(&chunk) {
            sent += n;
        }
        let full = probe.room().unwrap();
        assert_eq!(full, 0, "no room after {sent} bytes");
        // The reader drains it all: the room comes back.
        let mut buf = vec![0u8; sent];
        reader.read_exact(&mut buf).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(probe.room(), Some(UNSENT_BOUND), "all sent");
        drop(guard);
        assert_eq!(probe.room(), None, "closed with its connection");
    }
}
