//! A raw HTTP/2 client that writes frames byte by byte, for the floods and stalls a well-behaved
//! client library would never send: prior knowledge (h2c), every header field an HPACK literal
//! without indexing (so header blocks are independent of each other).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;
pub const END_STREAM: u8 = 1;
pub const ACK: u8 = 1;
pub const END_HEADERS: u8 = 4;
/// SETTINGS identifiers.
pub const MAX_CONCURRENT_STREAMS: u16 = 3;
pub const INITIAL_WINDOW_SIZE: u16 = 4;
pub const MAX_HEADER_LIST_SIZE: u16 = 6;

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer of `prefix` bits, its first byte or-ed with `first` (RFC 7541 5.1).
fn integer(out: &mut Vec<u8>, first: u8, prefix: u32, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// A literal field without indexing whose name is the static table's entry `index`.
fn indexed_name(b: &mut Vec<u8>, index: usize, value: &str) {
    integer(b, 0, 4, index);
    integer(b, 0, 7, value.len());
    b.extend_from_slice(value.as_bytes());
}

/// A literal field without indexing with a new name.
pub fn literal(b: &mut Vec<u8>, name: &str, value: &[u8]) {
    b.push(0);
    integer(b, 0, 7, name.len());
    b.extend_from_slice(name.as_bytes());
    integer(b, 0, 7, value.len());
    b.extend_from_slice(value);
}

/// An HPACK header block for `method path` on `a.test`.
pub fn request_block(method: &str, path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    indexed_name(&mut b, 2, method); // :method
    indexed_name(&mut b, 6, "http"); // :scheme
    indexed_name(&mut b, 4, path); // :path
    indexed_name(&mut b, 1, "a.test"); // :authority
    b
}

/// [`request_block`] with padding fields that bring the header list, as HTTP/2 counts it (name,
/// value and 32 bytes per field), to about `size` bytes.
pub fn padded_request_block(method: &str, path: &str, size: usize) -> Vec<u8> {
    let mut b = request_block(method, path);
    let mut left = size.saturating_sub(4 * 32 + method.len() + path.len() + 40);
    let mut i = 0;
    while left > 64 {
        let value = vec![b'a' + (i % 26) as u8; (left - 40).min(4000)];
        let name = format!("x-pad-{i}");
        left = left.saturating_sub(name.len() + value.len() + 32);
        literal(&mut b, &name, &value);
        i += 1;
    }
    b
}

/// A raw prior-knowledge HTTP/2 connection, its frames read on a thread that notes a GOAWAY,
/// the end of the connection, the server's SETTINGS and the PINGs it sends (never answered).
pub struct Raw {
    pub s: TcpStream,
    goaway: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
    settings: Arc<Mutex<Vec<(u16, u32)>>>,
    pings: Arc<AtomicU32>,
}

impl Raw {
    pub fn open(addr: SocketAddr) -> Raw {
        Self::open_with(addr, &[])
    }

    /// A connection whose SETTINGS frame carries `settings` (identifier, value).
    pub fn open_with(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        Self::open_from(None, addr, settings)
    }

    /// [`Raw::open_with`] from the address `from` (another loopback address than 127.0.0.1,
    /// for a client whose address is not the other clients').
    pub fn open_from(from: Option<IpAddr>, addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        Self::try_open_from(from, addr, settings).unwrap()
    }

    /// [`Raw::open_from`], or why it could not connect.
    pub fn try_open_from(
        from: Option<IpAddr>,
        addr: SocketAddr,
        settings: &[(u16, u32)],
    ) -> std::io::Result<Raw> {
        let mut s = match from {
            None => TcpStream::connect(addr)?,
            Some(ip) => {
                let sock =
                    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
                sock.bind(&SocketAddr::new(ip, 0).into())?;
                sock.connect(&addr.into())?;
                sock.into()
            }
        };
        s.write_all(PREFACE)?;
        let payload: Vec<u8> = settings
            .iter()
            .flat_map(|(id, v)| id.to_be_bytes().into_iter().chain(v.to_be_bytes()))
            .collect();
        s.write_all(&frame(SETTINGS, 0, 0, &payload))?;
        let goaway = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let server_settings = Arc::new(Mutex::new(Vec::new()));
        let pings = Arc::new(AtomicU32::new(0));
        let mut r = s.try_clone()?;
        let (g, c, ss, p) = (
            goaway.clone(),
            closed.clone(),
            server_settings.clone(),
            pings.clone(),
        );
        std::thread::spawn(move || {
            let mut head = [0u8; 9];
            loop {
                if r.read_exact(&mut head).is_err() {
                    break;
                }
                let n = (usize::from(head[0]) << 16)
                    | (usize::from(head[1]) << 8)
                    | usize::from(head[2]);
                let mut payload = vec![0u8; n];
                if r.read_exact(&mut payload).is_err() {
                    break;
                }
                match head[3] {
                    GOAWAY => g.store(true, Ordering::SeqCst),
                    PING if head[4] & ACK == 0 => {
                        p.fetch_add(1, Ordering::SeqCst);
                    }
                    SETTINGS if head[4] & ACK == 0 => {
                        let mut got = ss.lock().unwrap();
                        for s in payload.chunks_exact(6) {
                            let id = u16::from_be_bytes([s[0], s[1]]);
                            got.push((id, u32::from_be_bytes([s[2], s[3], s[4], s[5]])));
                        }
                    }
                    _ => {}
                }
            }
            c.store(true, Ordering::SeqCst);
        });
        Ok(Raw {
            s,
            goaway,
            closed,
            settings: server_settings,
            pings,
        })
    }

    /// Write `bytes`; false once the server has cut the connection.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.s.write_all(bytes).is_ok()
    }

    pub fn ended(&self) -> bool {
        self.goaway.load(Ordering::SeqCst) || self.closed.load(Ordering::SeqCst)
    }

    pub fn wait_ended(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.ended() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The value of the server's setting `id`, once its SETTINGS arrived (within 5 s).
    pub fn server_setting(&self, id: u16) -> Option<u32> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = self.settings.lock().unwrap().clone();
            if !got.is_empty() || Instant::now() > deadline || self.ended() {
                return got.iter().rev().find(|(i, _)| *i == id).map(|(_, v)| *v);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// PINGs the server has sent (this client answers none).
    pub fn pings(&self) -> u32 {
        self.pings.load(Ordering::SeqCst)
    }
}

/// Run `flood` on a thread while `round(n)` runs again and again (n = 0, 1, ...) on this one,
/// until the flood is over and at least `min_rounds` rounds ran.
pub fn rounds_during(flood: impl FnOnce() + Send, min_rounds: usize, mut round: impl FnMut(usize)) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            flood();
            done.store(true, Ordering::SeqCst);
        });
        let mut n = 0;
        while !done.load(Ordering::SeqCst) || n < min_rounds {
            round(n);
            n += 1;
        }
    });
}
