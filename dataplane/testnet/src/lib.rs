//! Test support for the steering tests: two network namespaces joined by a veth pair with 4 TX
//! and 4 RX queues per end, created by the test (root, `ip` from iproute2) and removed on drop,
//! also when the test panics. On the receiving end `skb->queue_mapping` is the queue the sender
//! picked by flow hash, which is what `queue` steering reads.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The two namespaces and the veth pair between them: the server end (`vsrv`, address
/// `server_ip`/24) in `srv`, the client end (the next address) in `cli`.
pub struct VethPair {
    pub srv: String,
    pub cli: String,
    pub vsrv: String,
    pub server_ip: String,
}

/// Run `ip` with `args`; panics with its stderr when it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (package iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl VethPair {
    /// A pair on 10.251.`subnet`.0/24 (server .1, client .2). `tag`, one letter, keeps the names
    /// of different test binaries apart (they run at the same time); the process id and a
    /// counter keep this binary's pairs apart.
    pub fn new(tag: char, subnet: u8) -> VethPair {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{tag}{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let pair = VethPair {
            srv: format!("ecsrv-{id}"),
            cli: format!("eccli-{id}"),
            vsrv: format!("ecs{id}"),
            server_ip: format!("10.251.{subnet}.1"),
        };
        let vcli = format!("ecc{id}");
        assert!(pair.vsrv.len() <= 15 && vcli.len() <= 15, "interface names");
        ip(&["netns", "add", &pair.srv]);
        ip(&["netns", "add", &pair.cli]);
        let queues = ["numtxqueues", "4", "numrxqueues", "4"];
        let mut add = vec!["link", "add", pair.vsrv.as_str()];
        add.extend(queues);
        add.extend(["type", "veth", "peer", "name", vcli.as_str()]);
        add.extend(queues);
        ip(&add);
        ip(&["link", "set", &pair.vsrv, "netns", &pair.srv]);
        ip(&["link", "set", &vcli, "netns", &pair.cli]);
        let srv_addr = format!("{}/24", pair.server_ip);
        let cli_addr = format!("10.251.{subnet}.2/24");
        ip(&["-n", &pair.srv, "addr", "add", &srv_addr, "dev", &pair.vsrv]);
        ip(&["-n", &pair.cli, "addr", "add", &cli_addr, "dev", &vcli]);
        for (ns, dev) in [(&pair.srv, &pair.vsrv), (&pair.cli, &vcli)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        pair
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting the namespaces destroys the veth pair; the link delete covers a failure
        // before the ends were moved.
        for args in [
            ["netns", "del", self.srv.as_str()],
            ["netns", "del", self.cli.as_str()],
            ["link", "del", self.vsrv.as_str()],
        ] {
            let _ = Command::new("ip").args(args).output();
        }
    }
}

/// Move the calling thread into network namespace `name` (sockets it creates live there).
#[allow(unsafe_code)]
pub fn enter_netns(name: &str) {
    let f = File::open(format!("/run/netns/{name}")).expect("open the namespace");
    // SAFETY: setns only reads the fd, which `f` keeps open for the call; CLONE_NEWNET changes
    // only this thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {name}: {}", std::io::Error::last_os_error());
}
