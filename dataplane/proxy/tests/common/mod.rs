//! Test support: run the real `edgecache-dataplane` binary against an in-process origin, and a
//! small blocking HTTP/1.1 client that reports exactly what arrived (so truncation is visible).
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use edgecache_origin::{OriginHandle, OriginOptions, check_body, expected_body};

pub mod cgroup;
pub mod frames;
pub mod h2;

pub const BIN: &str = env!("CARGO_BIN_EXE_edgecache-dataplane");

/// Whether we run as root. As root (CI) every test runs; as another user the tests run on the
/// thread-pool engine ([`default_engine`]) and only the few that need root skip ([`needs_root`]).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A free loopback port, never one this process was given before. The data plane binds its
/// listeners with SO_REUSEPORT, so two data planes given one port (two tests picking at once, or
/// a restart onto a port that another test took while it was down) would both bind it without
/// an error and split each other's connections.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// `args` with the values of `--listen` and `--admin` set to `listen` and `admin`.
fn with_ports(mut args: Vec<String>, listen: SocketAddr, admin: SocketAddr) -> Vec<String> {
    for i in 1..args.len() {
        match args[i - 1].as_str() {
            "--listen" => args[i] = listen.to_string(),
            "--admin" => args[i] = admin.to_string(),
            _ => {}
        }
    }
    args
}

fn fresh_loopback_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

pub fn origin() -> OriginHandle {
    origin_with(OriginOptions::default())
}

pub fn origin_with(opts: OriginOptions) -> OriginHandle {
    OriginHandle::start("127.0.0.1:0".parse().expect("addr"), opts).expect("origin starts")
}

/// A running data plane; killed on drop.
pub struct Dataplane {
    pub child: Child,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub dir: PathBuf,
    pub log: PathBuf,
    pub args: Vec<String>,
}

pub struct Opts<'a> {
    pub origin: &'a str,
    pub dir: &'a Path,
    pub size: &'a str,
    pub engine: &'a str,
    pub workers: u32,
    pub extra: Vec<String>,
}

impl<'a> Opts<'a> {
    pub fn new(origin: &'a str, dir: &'a Path) -> Self {
        Self {
            origin,
            dir,
            size: "256MiB",
            engine: default_engine(),
            workers: 2,
            extra: Vec::new(),
        }
    }
}

impl Dataplane {
    /// Start with the YAML config `yaml` (written to `dir/dp.yaml`), the cache in `dir/cache`,
    /// `workers` workers and `extra` flags.
    pub fn start_with_yaml(
        origin_url: &str,
        dir: &Path,
        yaml: &str,
        workers: u32,
        extra: &[String],
    ) -> Dataplane {
        Self::start_sized_with_yaml(origin_url, dir, "256MiB", yaml, workers, extra)
    }

    /// [`Dataplane::start_with_yaml`] with a store of `size` (`--cache-size`).
    pub fn start_sized_with_yaml(
        origin_url: &str,
        dir: &Path,
        size: &str,
        yaml: &str,
        workers: u32,
        extra: &[String],
    ) -> Dataplane {
        let cfg = dir.join("dp.yaml");
        std::fs::write(&cfg, yaml).expect("write the config");
        let cache = dir.join("cache");
        let mut opts = Opts::new(origin_url, &cache);
        opts.size = size;
        opts.workers = workers;
        opts.extra = vec!["--config".into(), cfg.display().to_string()];
        opts.extra.extend(extra.iter().cloned());
        Dataplane::start(opts)
    }

    pub fn start(o: Opts<'_>) -> Dataplane {
        Self::start_with(o, |_| {})
    }

    /// Start with a hook to adjust the command (e.g. a pre_exec seccomp filter). The ports are
    /// picked free, but another test may take one before the child binds it: the child then
    /// exits with "Address already in use" and it is started again on new ports.
    pub fn start_with(o: Opts<'_>, adjust: impl Fn(&mut Command)) -> Dataplane {
        let mut attempt = 1;
        loop {
            let (listen, admin) = (fresh_loopback_addr(), fresh_loopback_addr());
            let mut args: Vec<String> = vec![
                "serve".into(),
                "--origin".into(),
                o.origin.into(),
                "--listen".into(),
                listen.to_string(),
                "--admin".into(),
                admin.to_string(),
                "--cache-dir".into(),
                o.dir.display().to_string(),
                "--cache-size".into(),
                o.size.into(),
                "--io-engine".into(),
                o.engine.into(),
                "--workers".into(),
                o.workers.to_string(),
            ];
            args.extend(o.extra.iter().cloned());
            match Self::spawn(args, listen, admin, o.dir.to_path_buf(), &adjust) {
                Ok(dp) => return dp,
                Err(log) if attempt < 5 && log.contains("Address already in use") => attempt += 1,
                Err(log) => panic!("data plane exited before it was ready; log:\n{log}"),
            }
        }
    }

    /// Spawn and wait until ready; `Err(log)` when the process exits first.
    fn spawn(
        args: Vec<String>,
        listen: SocketAddr,
        admin: SocketAddr,
        dir: PathBuf,
        adjust: impl FnOnce(&mut Command),
    ) -> Result<Dataplane, String> {
        let log = std::env::temp_dir().join(format!(
            "edgecache-dp-{}-{}.log",
            std::process::id(),
            listen.port()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(BIN);
        cmd.args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file);
        adjust(&mut cmd);
        let child = cmd.spawn().expect("spawn edgecache-dataplane");
        let mut dp = Dataplane {
            child,
            listen,
            admin,
            dir,
            log,
            args,
        };
        dp.wait_ready()?;
        Ok(dp)
    }

    /// Start again with the same arguments (a restart on the same cache dir and ports). A port
    /// that something else bound while this one was down is replaced by a fresh one, as in
    /// [`Dataplane::start_with`]: read `listen` and `admin` after a restart.
    pub fn restart(self) -> Dataplane {
        self.restart_after(|| {})
    }

    /// [`Dataplane::restart`], running `between` after the old process has exited.
    pub fn restart_after(mut self, between: impl FnOnce()) -> Dataplane {
        self.stop();
        between();
        let mut args = std::mem::take(&mut self.args);
        let (mut listen, mut admin, dir) = (self.listen, self.admin, self.dir.clone());
        // The new process logs to the same path: this one's drop must not remove it.
        let _ = std::fs::remove_file(&self.log);
        self.log = PathBuf::new();
        let mut attempt = 1;
        loop {
            match Self::spawn(args.clone(), listen, admin, dir.clone(), |_| {}) {
                Ok(dp) => return dp,
                Err(log) if attempt < 5 && log.contains("Address already in use") => {
                    attempt += 1;
                    (listen, admin) = (fresh_loopback_addr(), fresh_loopback_addr());
                    args = with_ports(args, listen, admin);
                }
                Err(log) => panic!("data plane exited before it was ready; log:\n{log}"),
            }
        }
    }

    /// Wait until `/readyz` answers 200; `Err(log)` if the process exits first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Err(self.log_text());
            }
            if ready(self.admin) {
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!("data plane not ready in 30s; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[])
    }

    /// One request to the data plane: over HTTP/1.1, or over HTTP/2 in a run with
    /// `EDGECACHE_TEST_HTTP2=1` (src: common/h2.rs).
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
        let sent = if h2::on() {
            h2::request(self.listen, method, path, headers, b"")
        } else {
            request(self.listen, method, path, headers, b"")
        };
        sent.unwrap_or_else(|e| panic!("{method} {path}: {e}\nlog:\n{}", self.log_text()))
    }

    pub fn metrics(&self) -> String {
        get(self.admin, "/metrics", &[])
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .unwrap_or_default()
    }

    /// Wait (at most `secs`) until the metrics text satisfies `ok`; panics with it and the log.
    pub fn wait_for_metrics(&self, what: &str, secs: u64, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let m = self.metrics();
            if ok(&m) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {secs} s\n{m}\nlog:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The value of one metric line (exact name with labels), 0 when absent.
    pub fn metric(&self, name: &str) -> f64 {
        metric_value(&self.metrics(), name)
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

pub fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// What the client received.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// The body ended before its declared length (or chunked framing broke): a truncated response.
    pub truncated: bool,
}

impl Resp {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .unwrap_or("")
    }
    pub fn cache_status(&self) -> &str {
        self.header("cache-status")
    }
    pub fn is_hit(&self) -> bool {
        let cs = self.cache_status();
        cs.contains("; hit") && !cs.contains("fwd=")
    }
}

pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Resp> {
    request(addr, "GET", path, headers, b"")
}

/// One request on a fresh connection (`Connection: close`).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str("Host: test.example\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    read_response(&mut BufReader::new(s), method == "HEAD")
}

/// Whether `/readyz` on `admin` answers 200 within a second (a port that something else holds
/// may accept and never answer).
fn ready(admin: SocketAddr) -> bool {
    let probe = || -> std::io::Result<u16> {
        let mut s = TcpStream::connect(admin)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n")?;
        Ok(read_response(&mut BufReader::new(s), false)?.status)
    };
    probe().is_ok_and(|status| status == 200)
}

/// Send raw bytes and return what came back (for malformed requests).
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(bytes)?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Ok(String::from_utf8_lossy(&out).into_owned())
}

pub fn read_response(r: &mut impl BufRead, head_only: bool) -> std::io::Result<Resp> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().to_string();
            headers
                .entry(k)
                .and_modify(|old: &mut String| {
                    old.push_str(", ");
                    old.push_str(&v);
                })
                .or_insert(v);
        }
    }
    let mut body = Vec::new();
    let mut truncated = false;
    if head_only || status == 304 || status == 204 || (100..200).contains(&status) {
        return Ok(Resp {
            status,
            headers,
            body,
            truncated,
        });
    }
    if let Some(len) = headers
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        let _ = r.take(len as u64).read_to_end(&mut body);
        truncated = body.len() < len;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            let mut size_line = String::new();
            if r.read_line(&mut size_line).unwrap_or(0) == 0 {
                truncated = true;
                break;
            }
            let Ok(n) = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
            else {
                truncated = true;
                break;
            };
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n];
            if r.read_exact(&mut chunk).is_err() {
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
            let mut crlf = [0u8; 2];
            if r.read_exact(&mut crlf).is_err() {
                truncated = true;
                break;
            }
        }
    } else {
        let _ = r.read_to_end(&mut body);
    }
    Ok(Resp {
        status,
        headers,
        body,
        truncated,
    })
}

/// Run `serve` on `cache_dir` with `extra` flags where it must refuse to start (ports 0, admin on
/// 127.0.0.2, so no port another test took can fail it for the wrong reason); its stderr.
pub fn serve_refused(cache_dir: &Path, extra: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--origin",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin", "127.0.0.2:0", "--cache-size", "64MiB"])
        .arg("--cache-dir")
        .arg(cache_dir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run edgecache-dataplane");
    assert!(!out.status.success(), "the data plane started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Find `needle` in the files under `dir`: (path, offset).
pub fn find_in_files(dir: &Path, needle: &[u8]) -> Option<(PathBuf, u64)> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(hit) = find_in_files(&p, needle) {
                return Some(hit);
            }
            continue;
        }
        let data = std::fs::read(&p).ok()?;
        if let Some(pos) = data.windows(needle.len()).position(|w| w == needle) {
            return Some((p, pos as u64));
        }
    }
    None
}

/// Corrupt a stored body on disk (the data plane stopped): flip one bit of the byte `skip`
/// bytes after where `probe` (bytes of the body) is found in the files under `dir`.
pub fn flip_stored_byte(dir: &Path, probe: &[u8], skip: u64) {
    use std::os::unix::fs::FileExt;
    let (file, off) = find_in_files(dir, probe).expect("the body is on disk");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_at(&mut b, off + skip).unwrap();
    b[0] ^= 0x40;
    f.write_at(&b, off + skip).unwrap();
    f.sync_all().unwrap();
}

/// The I/O engine of a test's data plane unless the test picks one: `auto` as root (io_uring
/// where the kernel allows it, as in production), `threads` otherwise. Unprivileged io_uring may
/// be disabled (`kernel.io_uring_disabled`), denied by a container's seccomp profile or, before
/// Linux 5.12, short of RLIMIT_MEMLOCK; the thread pool needs none of that.
pub fn default_engine() -> &'static str {
    if is_root() { "auto" } else { "threads" }
}

/// For a test that cannot run without root: as another user, print a visible skip line
/// (`SKIPPED: <test>: needs root for <reason>`) and tell the caller to return.
pub fn needs_root(test: &str, reason: &str) -> bool {
    if is_root() {
        return false;
    }
    println!("SKIPPED: {test}: needs root for {reason}");
    true
}

/// For a test about io_uring: it runs as root, and as another user where this process can set
/// up an io_uring; elsewhere it prints a visible skip line and tells the caller to return.
pub fn needs_io_uring(test: &str) -> bool {
    if is_root() {
        return false;
    }
    match edgecache_store::probe_uring() {
        Ok(()) => false,
        Err(e) => {
            println!("SKIPPED: {test}: needs root for io_uring (unprivileged io_uring_setup: {e})");
            true
        }
    }
}

/// A `Range` value `bytes=a-b` or `bytes=a-` over a representation of `len` bytes, as the
/// inclusive range a test origin answers with; `None` for anything else or unsatisfiable.
pub fn byte_range(v: &str, len: usize) -> Option<(usize, usize)> {
    let (a, b) = v.strip_prefix("bytes=")?.split_once('-')?;
    let a: usize = a.parse().ok()?;
    let b = if b.is_empty() {
        len - 1
    } else {
        b.parse::<usize>().ok()?.min(len - 1)
    };
    (a <= b && a < len).then_some((a, b))
}

/// Percent-encode all but the unreserved characters and `/` (a query parameter's value).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
