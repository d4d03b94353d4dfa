//! A fill runs at the origin's speed into the store whatever its client does: a client that
//! stops reading the response it caused holds back neither the store write nor the requests
//! coalesced on the same fetch; those waiters stream a large object from the store while it is
//! written instead of waiting for the fill to end.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// A connection that sends `GET path` and never reads (a tiny receive buffer, so the server's
/// writes stall at once).
fn stalled_get(dp: &Dataplane, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(dp.listen).unwrap();
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(4096)
        .unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test.example\r\n\r\n").unwrap();
    s
}

/// `GET path`, giving up after `within` (a stalled fill would hold it for the write timeout).
fn get_within(dp: &Dataplane, path: &str, within: Duration) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(dp.listen)?;
    s.set_read_timeout(Some(within))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
    )?;
    read_response(&mut BufReader::new(s), false)
}

/// Wait until the origin has been asked for `path`.
fn wait_for_the_fill(o: &OriginHandle, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while o.requests_for(path) == 0 {
        assert!(Instant::now() < deadline, "the fill never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The response on a stalled connection, read now.
fn read_late(stalled: TcpStream) -> Resp {
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // A 4 KiB window would make the read itself take minutes.
    socket2::SockRef::from(&stalled)
        .set_recv_buffer_size(1 << 20)
        .unwrap();
    read_response(&mut BufReader::new(stalled), false).unwrap()
}

fn start(o: &OriginHandle, dir: &std::path::Path) -> Dataplane {
    // The default write timeout (30 s): a stalled client is not dropped during the test.
    // Slicing off: these objects (8 to 24 MiB) test the fill of an object stored whole, the
    // path of every object up to storage.sliceSize (tests/serve_slices.rs covers larger ones).
    Dataplane::start_with_yaml(
        &o.url(),
        dir,
        "clients:\n  writeTimeout: 30s\nstorage:\n  sliceSize: 0\n",
        1,
        &[],
    )
}

/// The stalled client caused the fill; requests for the same object while it runs, and after,
/// are served whole, from one origin fetch, long before the stalled client is dropped.
fn others_are_served_while_the_filling_client_stalls(size: u64, name: &str) {
    // 64 KiB origin chunks (a pause of 1 ms between them), so the chunks the server may queue
    // for the stalled client hold less than the object.
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    let path = format!("/obj/{size}/{name}?slow_ms=1");
    let stalled = stalled_get(&dp, &path);
    wait_for_the_fill(&o, &path);
    // Coalesced on the stalled client's fetch (or a hit once it is stored).
    let r = get_within(&dp, &path, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("a second client of {path} got nothing in 10 s: {e}"));
    assert_eq!(r.status, 200);
    assert!(!r.truncated);
    check_body(size, name, &r.body).unwrap();
    // The fill finished and was stored while the first client still stalls.
    let r = get_within(&dp, &path, Duration::from_secs(10)).unwrap();
    assert!(r.is_hit(), "{}", r.cache_status());
    check_body(size, name, &r.body).unwrap();
    assert_eq!(o.requests_for(&path), 1, "one origin fetch");
    // The stalled client fell behind and was switched to a kept copy; reading now, it gets
    // the whole body.
    assert!(dp.metric("edgecache_dataplane_fill_clients_switched_total") >= 1.0);
    let r = read_late(stalled);
    assert!(!r.truncated);
    check_body(size, name, &r.body).unwrap();
}

#[test]
fn a_stalled_client_does_not_hold_a_small_fill_or_its_waiters() {
    // 8 MiB: replayed to waiters from memory.
    others_are_served_while_the_filling_client_stalls(8 << 20, "stall-small");
}

#[test]
fn a_stalled_client_does_not_hold_a_large_fill_or_its_waiters() {
    // 24 MiB: too large to replay from memory; waiters read the store as it is written (the
    // test store's segments are 32 MiB).
    others_are_served_while_the_filling_client_stalls(24 << 20, "stall-large");
}

#[test]
fn a_waiter_on_a_large_fill_streams_it_before_the_fill_ends() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    // 16 MiB at 64 KiB per 20 ms: the fill takes about 5 s.
    let path = "/obj/16m/slowfill?slow_ms=20";
    let leader = {
        let addr = dp.listen;
        std::thread::spawn(move || get(addr, path, &[]).unwrap())
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while o.in_flight() == 0 {
        assert!(Instant::now() < deadline, "the fill never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut s = TcpStream::connect(dp.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // The waiter's first MiB arrives while the origin is still sending the body.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while got.len() < (2 << 20) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the waiter's response ended early");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        o.in_flight(),
        1,
        "the waiter had its first bytes only after the fill ended"
    );
    s.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got[..got.len().min(4096)]).into_owned();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.to_ascii_lowercase().contains("collapsed"), "{text}");
    check_body(16 << 20, "slowfill", &got[head_end..]).unwrap();
    let r = leader.join().unwrap();
    check_body(16 << 20, "slowfill", &r.body).unwrap();
    assert_eq!(o.requests_for(path), 1, "one origin fetch");
}

#[test]
fn a_client_behind_a_chunked_fill_past_the_tail_limit_still_gets_all_of_it() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path());
    // No length, 12 MiB: the client falls behind and reads from the coalescing tail, which
    // stops keeping chunks at 8 MiB; the fill then feeds the client again from there.
    let path = "/obj/12m/chunky?chunked=1&slow_ms=1";
    let stalled = stalled_get(&dp, path);
    wait_for_the_fill(&o, path);
    std::thread::sleep(Duration::from_secs(2));
    let r = read_late(stalled);
    assert!(!r.truncated);
    check_body(12 << 20, "chunky", &r.body).unwrap();
    assert!(dp.metric("edgecache_dataplane_fill_clients_switched_total") >= 1.0);
}

/// An ext4 file system on a loop device, mounted on a new directory (unmounted on drop).
struct LoopDisk {
    dir: tempfile::TempDir,
    image: std::path::PathBuf,
}

impl LoopDisk {
    fn mount(size: &str) -> LoopDisk {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().with_extension("img");
        let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
            let ok = std::process::Command::new(cmd)
                .args(args)
                .status()
                .unwrap_or_else(|e| panic!("{cmd}: {e}"))
                .success();
            assert!(ok, "{cmd} {args:?} failed");
        };
        run("truncate", &["-s".as_ref(), size.as_ref(), image.as_ref()]);
        run("mkfs.ext4", &["-q".as_ref(), "-F".as_ref(), image.as_ref()]);
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_ref(),
                dir.path().as_ref(),
            ],
        );
        LoopDisk { dir, image }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// The file system at `dir` frozen (`fsfreeze`): every write to it blocks until it is thawed,
/// on drop.
struct Frozen(std::path::PathBuf);

impl Frozen {
    fn freeze(dir: &std::path::Path) -> Frozen {
        let ok = std::process::Command::new("fsfreeze")
            .arg("-f")
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "fsfreeze -f {}", dir.display());
        Frozen(dir.to_path_buf())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.0)
            .status();
    }
}

/// The objects filled while the disk's writes hang: (size, name), at `/obj/{size}/{name}`.
/// Written whole at the end (4 KiB, 100 KiB), and in stage-sized pieces as it arrives (1 MiB).
const STUCK: [(u64, &str); 3] = [
    (4096, "stuck-4k"),
    (100 << 10, "stuck-100k"),
    (1 << 20, "stuck-1m"),
];

/// A miss is answered from what the origin sent, not after its store write lands: with the
/// disk's writes stuck (a frozen file system), the client still gets the whole object. A
/// request for it while the write is pending waits for that write and is a hit: never a second
/// origin fetch, never an unstored copy.
#[test]
fn a_miss_is_answered_while_its_store_write_is_stuck() {
    if needs_root(
        "a_miss_is_answered_while_its_store_write_is_stuck",
        "mounting a loop file system and freezing it (a disk whose writes hang)",
    ) {
        return;
    }
    let path = |(size, name): (u64, &str)| format!("/obj/{size}/{name}");
    let o = origin();
    let disk = LoopDisk::mount("256M");
    let cache = disk.dir.path().join("cache");
    let url = o.url();
    let mut opts = Opts::new(&url, &cache);
    opts.size = "64MiB";
    let dp = Dataplane::start(opts);
    let before = get_within(&dp, "/obj/4096/before", Duration::from_secs(10)).unwrap();
    assert!(!before.is_hit(), "{}", before.cache_status());
    let frozen = Frozen::freeze(disk.dir.path());
    for (size, name) in STUCK {
        let path = path((size, name));
        let r = get_within(&dp, &path, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{path}: no answer while the disk's writes hang: {e}"));
        assert_eq!(r.status, 200);
        assert!(!r.truncated);
        check_body(size, name, &r.body).unwrap();
    }
    // What was stored before is served while the writes hang (reads do not).
    let r = get_within(&dp, "/obj/4096/before", Duration::from_secs(10)).unwrap();
    assert!(r.is_hit(), "{}", r.cache_status());
    // Requests while the write is pending wait for it, then are hits.
    let waiting: Vec<_> = STUCK
        .into_iter()
        .map(|object| {
            let (addr, p) = (dp.listen, path(object));
            std::thread::spawn(move || get(addr, &p, &[]).unwrap())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(frozen);
    for (w, (size, name)) in waiting.into_iter().zip(STUCK) {
        let r = w.join().unwrap();
        assert!(r.is_hit(), "{name}: {}", r.cache_status());
        check_body(size, name, &r.body).unwrap();
        assert_eq!(
            o.requests_for(&path((size, name))),
            1,
            "{name}: one origin fetch"
        );
    }
}
