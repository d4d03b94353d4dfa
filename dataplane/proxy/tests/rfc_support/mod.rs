//! Support for the `rfc_*` integration tests: start the data plane with a controllable clock,
//! and a tiny scripted origin (a std `TcpListener` thread answering with raw bytes) for the
//! cases the bench origin has no knob for (Vary, Location, 1xx, 304 with new fields, ...), which
//! can hold part of a response back until the test lets it go ([`GATE`]).
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

/// Start the data plane against `origin_url` with the debug clock enabled.
pub fn start(origin_url: &str, dir: &Path, extra: &[&str]) -> Dataplane {
    let mut opts = Opts::new(origin_url, dir);
    opts.extra = extra.iter().map(|s| s.to_string()).collect();
    Dataplane::start_with(opts, |cmd| {
        cmd.env("EDGECACHE_DEBUG_CLOCK", "1");
    })
}

/// Move the data plane's clock forward.
pub fn advance(dp: &Dataplane, secs: u64) {
    let r = request(
        dp.admin,
        "POST",
        &format!("/debug/clock?advance={secs}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// The bench origin's counters as text (`"not_modified":N` etc.).
pub fn stats(o: &OriginHandle) -> String {
    String::from_utf8_lossy(&get(o.addr(), "/__stats", &[]).unwrap().body).into_owned()
}

/// The value of one counter in the bench origin's `/__stats`.
pub fn stat(o: &OriginHandle, name: &str) -> u64 {
    let s = stats(o);
    let pat = format!("\"{name}\":");
    let i = s.find(&pat).unwrap_or_else(|| panic!("{name} in {s}")) + pat.len();
    s[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

/// A request as the scripted origin received it.
#[derive(Debug, Clone)]
pub struct RawReq {
    pub method: String,
    pub target: String,
    /// Lower-case names, values as received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawReq {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Script = dyn Fn(&RawReq, usize) -> Vec<u8> + Send + Sync;

/// A marker a script may put in its output: the origin writes (and flushes) the bytes before
/// it, then waits until the test calls [`Scripted::open_gate`] (at most 10 s) before writing
/// the rest. Each marker waits for one opening.
pub const GATE: &[u8] = b"\0edgecache-test-gate\0";

/// The openings of [`GATE`]s: how many were opened and how many were passed.
#[derive(Default)]
struct Gate {
    counts: Mutex<(usize, usize)>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        self.counts.lock().unwrap().0 += 1;
        self.opened.notify_all();
    }

    /// Wait for an opening not used yet (10 s at most).
    fn pass(&self) {
        let mut c = self.counts.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.0 <= c.1 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            c = self.opened.wait_timeout(c, left).unwrap().0;
        }
        c.1 += 1;
    }
}

/// Write `out`, stopping at each [`GATE`] until it opens.
fn write_gated(w: &mut TcpStream, out: &[u8], gate: &Gate) -> std::io::Result<()> {
    let mut rest = out;
    while let Some(i) = rest.windows(GATE.len()).position(|win| win == GATE) {
        w.write_all(&rest[..i])?;
        w.flush()?;
        gate.pass();
        rest = &rest[i + GATE.len()..];
    }
    w.write_all(rest)
}

/// An origin that answers every request with the bytes its script returns (the script gets the
/// request and how many requests came before it). Connections are kept alive unless the
/// response says `Connection: close`.
pub struct Scripted {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<RawReq>>>,
    gate: Arc<Gate>,
}

impl Scripted {
    pub fn start(script: impl Fn(&RawReq, usize) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<RawReq>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let gate: Arc<Gate> = Arc::default();
        let (s2, g2) = (seen.clone(), gate.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let (seen, script, gate) = (s2.clone(), script.clone(), g2.clone());
                std::thread::spawn(move || serve_conn(conn, &seen, &*script, &gate));
            }
        });
        Self { addr, seen, gate }
    }

    /// Let one waiting (or the next) [`GATE`] in a script's output pass.
    pub fn open_gate(&self) {
        self.gate.open();
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<RawReq> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Requests whose target is exactly `target`.
    pub fn requests_for(&self, target: &str) -> Vec<RawReq> {
        self.requests()
            .into_iter()
            .filter(|r| r.target == target)
            .collect()
    }
}

fn serve_conn(conn: TcpStream, seen: &Mutex<Vec<RawReq>>, script: &Script, gate: &Gate) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut it = line.split_whitespace();
        let (Some(method), Some(target)) = (it.next(), it.next()) else {
            return;
        };
        let (method, target) = (method.to_string(), target.to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let req = RawReq {
            method,
            target,
            headers,
            body,
        };
        let n = {
            let mut s = seen.lock().unwrap();
            s.push(req.clone());
            s.len() - 1
        };
        let out = script(&req, n);
        if write_gated(&mut w, &out, gate).is_err() {
            return;
        }
        let head = String::from_utf8_lossy(&out).to_ascii_lowercase();
        if head.contains("\r\nconnection: close") {
            return;
        }
    }
}

/// A raw response: status line `"200 OK"`, header fields, body. Content-Length is added
/// unless given or the status has no content.
pub fn resp(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut s = format!("HTTP/1.1 {status}\r\n");
    let code: u16 = status.split_whitespace().next().unwrap().parse().unwrap();
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    let framed = headers.iter().any(|(k, _)| {
        k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
    });
    if !framed && code != 304 && code != 204 && code >= 200 {
        s.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    s.push_str("\r\n");
    let mut out = s.into_bytes();
    out.extend_from_slice(body);
    out
}

/// The current time as an HTTP-date.
pub fn http_date_now() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}
