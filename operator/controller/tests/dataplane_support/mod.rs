//! Shared by the tests that run real `edgecache-dataplane` processes (tests/purge_dataplane.rs,
//! tests/dashboard_prometheus.rs): the binary, a process started with a node name and its log
//! in a file, and the wait until its admin endpoint says it is ready.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test support

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use edgecache_operator::pod_admin;

/// What a test prints when the binary is not there.
pub const NOT_BUILT: &str = "edgecache-dataplane not built (cargo build -p edgecache-dataplane, \
                             or set EDGECACHE_DATAPLANE_BIN)";

/// `EDGECACHE_DATAPLANE_BIN`, or the binary built next to this test's.
pub fn dataplane_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("EDGECACHE_DATAPLANE_BIN") {
        return Some(PathBuf::from(p));
    }
    // target/debug/deps/TEST-HASH -> target/debug/edgecache-dataplane
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("edgecache-dataplane");
    bin.is_file().then_some(bin)
}

/// Start `bin` with `args` as node `node`, its output appended to `log`.
pub fn spawn(bin: &Path, args: &[String], node: &str, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(bin)
        .args(args)
        .env("EDGECACHE_NODE_NAME", node)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("spawn edgecache-dataplane")
}

/// Until `/readyz` on `admin` answers 200; panics with the log if the process exits first or
/// it takes more than 15 s.
pub async fn wait_ready(child: &mut Child, admin: SocketAddr, log: &Path) {
    for _ in 0..300 {
        if let Ok((200, _)) =
            pod_admin::call("GET", admin, "/readyz", None, Duration::from_secs(1)).await
        {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the data plane exited: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the data plane is not ready: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// The arguments of a small data plane caching `origin` in `dir/cache`: one worker on the
/// thread-pool engine, no steering, a 64 MiB store, a 512 MiB memory limit, and the admin
/// token file `dir/token` (written here) holding `token`.
pub fn serve_args(
    origin: SocketAddr,
    listen: SocketAddr,
    admin: SocketAddr,
    dir: &Path,
    token: &str,
) -> Vec<String> {
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).unwrap();
    [
        "serve",
        "--origin",
        &format!("http://{origin}"),
        "--listen",
        &listen.to_string(),
        "--admin",
        &admin.to_string(),
        "--admin-token-file",
        &token_file.display().to_string(),
        "--cache-dir",
        &dir.join("cache").display().to_string(),
        "--cache-size",
        "64MiB",
        "--io-engine",
        "threads",
        "--workers",
        "1",
        "--steering",
        "off",
        "--memory-limit",
        "512MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Killed {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Killed {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}
