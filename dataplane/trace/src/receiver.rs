//! An OTLP/HTTP trace receiver for tests (feature `receiver`): it listens on a loopback port,
//! takes `POST /v1/traces` with `Content-Type: application/x-protobuf`, decodes each body with
//! the OpenTelemetry project's generated types (`opentelemetry-proto`, prost), answers 200 with
//! an empty `ExportTraceServiceResponse`, and keeps the spans for the test to read. A request
//! that is not that (another path or type, a body that does not decode) is answered 400 and
//! counted in [`Receiver::rejected`], so a test can assert there were none.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;

/// A span as the receiver decoded it; ids in lower-case hex, no parent as "".
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's numbers: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub start: u64,
    pub end: u64,
    pub attributes: HashMap<String, Attr>,
    /// The resource's attributes (`service.name`, ...).
    pub resource: HashMap<String, Attr>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Bool(bool),
    Other,
}

impl Received {
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.attributes.get(key) {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attributes.get(key) {
            Some(Attr::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn resource_str(&self, key: &str) -> Option<&str> {
        match self.resource.get(key) {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }
}

fn attr(v: Option<&AnyValue>) -> Attr {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Attr::Str(s.clone()),
        Some(any_value::Value::IntValue(i)) => Attr::Int(*i),
        Some(any_value::Value::BoolValue(b)) => Attr::Bool(*b),
        _ => Attr::Other,
    }
}

/// The receiver, listening until dropped (its thread ends with the test process).
pub struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    rejected: Arc<AtomicUsize>,
    posts: Arc<AtomicUsize>,
}

impl Receiver {
    /// Listen on 127.0.0.1, a free port.
    pub fn start() -> std::io::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let rejected = Arc::new(AtomicUsize::new(0));
        let posts = Arc::new(AtomicUsize::new(0));
        let (s, r, p) = (spans.clone(), rejected.clone(), posts.clone());
        std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let (s, r, p) = (s.clone(), r.clone(), p.clone());
                    std::thread::spawn(move || serve(conn, &s, &r, &p));
                }
            })?;
        Ok(Receiver {
            addr,
            spans,
            rejected,
            posts,
        })
    }

    /// The endpoint to configure: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Requests that were not a valid OTLP/HTTP protobuf export.
    pub fn rejected(&self) -> usize {
        self.rejected.load(Ordering::SeqCst)
    }

    /// Valid exports received.
    pub fn posts(&self) -> usize {
        self.posts.load(Ordering::SeqCst)
    }

    /// Wait (at most `timeout`) until `done` holds for the spans received; the spans then, or
    /// the last seen when it never did.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Result<Vec<Received>, Vec<Received>> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if Instant::now() >= deadline {
                return Err(spans);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(
    conn: TcpStream,
    spans: &Mutex<Vec<Received>>,
    rejected: &AtomicUsize,
    posts: &AtomicUsize,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let request_line = line.trim_end().to_string();
        let mut length = 0usize;
        let mut ctype = String::new();
        let mut close = false;
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let v = v.trim();
                match k.to_ascii_lowercase().as_str() {
                    "content-length" => length = v.parse().unwrap_or(0),
                    "content-type" => ctype = v.to_string(),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length.min(64 << 20)];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let ok = request_line.starts_with("POST /v1/traces ")
            && ctype == "application/x-protobuf"
            && match ExportTraceServiceRequest::decode(&body[..]) {
                Ok(req) => {
                    let mut got = Vec::new();
                    for rs in req.resource_spans {
                        let resource: HashMap<_, _> = rs
                            .resource
                            .iter()
                            .flat_map(|r| r.attributes.iter())
                            .map(|kv| (kv.key.clone(), attr(kv.value.as_ref())))
                            .collect();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                got.push(Received {
                                    trace_id: crate::span::hex(&s.trace_id),
                                    span_id: crate::span::hex(&s.span_id),
                                    parent_span_id: crate::span::hex(&s.parent_span_id),
                                    name: s.name,
                                    kind: s.kind,
                                    start: s.start_time_unix_nano,
                                    end: s.end_time_unix_nano,
                                    attributes: s
                                        .attributes
                                        .iter()
                                        .map(|kv| (kv.key.clone(), attr(kv.value.as_ref())))
                                        .collect(),
                                    resource: resource.clone(),
                                    status: s.status.map_or(0, |st| st.code),
                                });
                            }
                        }
                    }
                    if let Ok(mut all) = spans.lock() {
                        all.extend(got);
                    }
                    posts.fetch_add(1, Ordering::SeqCst);
                    true
                }
                Err(_) => false,
            };
        let answer: &[u8] = if ok {
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        } else {
            rejected.fetch_add(1, Ordering::SeqCst);
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
        };
        if out.write_all(answer).is_err() || close {
            return;
        }
    }
}
