//! Slow and hostile clients against the real server: a head trickled byte by byte (slowloris)
//! is cut at the header timeout, an idle keep-alive connection at the idle timeout, a client
//! that stops reading a large response at the write-progress timeout; connections over the
//! per-address cap are refused at once. Meanwhile a fresh client from another address keeps its
//! hits.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// One worker, so every client of a test shares it.
fn start(o: &OriginHandle, dir: &std::path::Path, yaml: &str) -> Dataplane {
    Dataplane::start_with_yaml(&o.url(), dir, yaml, 1, &[])
}

/// A connection from `from` (another loopback address: a different client for the caps).
fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&local.into())?;
    s.connect(&to.into())?;
    Ok(s.into())
}

/// Raise this process's soft limit on open files to its hard limit (the data plane it starts
/// inherits it): a thousand connections need more than the 1024 a user's shell often starts with.
#[allow(unsafe_code)]
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) and setrlimit(2) with a pointer to a local `rlimit`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Whether the server closed `s` within `within` (EOF or reset), reading and dropping any bytes.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// `n` connections that ask for `path` and never read a byte (a 4 KiB receive buffer), from
/// `addresses` loopback addresses (127.0.1.1 and up) in turn.
fn stalled_readers(dp: &Dataplane, path: &str, n: usize, addresses: usize) -> Vec<TcpStream> {
    stalled_readers_of(dp, path, n, |i| {
        format!("127.0.1.{}", i % addresses.clamp(1, 250) + 1)
    })
}

/// [`stalled_readers`], the `i`th from `from(i)`.
fn stalled_readers_of(
    dp: &Dataplane,
    path: &str,
    n: usize,
    from: impl Fn(usize) -> String,
) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = connect_from(&from(i), dp.listen).unwrap();
            socket2::SockRef::from(&s)
                .set_recv_buffer_size(4096)
                .unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: test.example\r\n\r\n").unwrap();
            s
        })
        .collect()
}

/// A fresh client from `from` gets the stored `/obj/4m/fresh` whole, as a hit, within
/// `within`; how long it took.
fn fresh_4m_hit(from: &str, dp: &Dataplane, within: Duration) -> Duration {
    let (r, took) = get_from(from, dp, "/obj/4m/fresh", within);
    assert!(r.is_hit(), "{}", r.cache_status());
    assert!(!r.truncated, "{} of {} bytes", r.body.len(), 4 << 20);
    check_body(4 << 20, "fresh", &r.body).unwrap();
    took
}

/// A GET of `path` on a new connection from `from`, answered whole within `within`; how long
/// it took.
fn get_from(from: &str, dp: &Dataplane, path: &str, within: Duration) -> (Resp, Duration) {
    let t = Instant::now();
    let mut c = connect_from(from, dp.listen).unwrap();
    c.set_read_timeout(Some(within)).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(c), false)
        .unwrap_or_else(|e| panic!("GET {path}: {e} after {:?}", t.elapsed()));
    (r, t.elapsed())
}

/// One keep-alive GET on `s`, the response read whole.
fn get_on(s: &mut TcpStream, path: &str) -> Resp {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test.example\r\n\r\n").unwrap();
    read_response(&mut BufReader::new(s.try_clone().unwrap()), false).unwrap()
}

#[test]
fn a_head_trickled_byte_by_byte_is_cut_at_the_header_timeout() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(
        &o,
        dir.path(),
        "clients:\n  headerTimeout: 1s\n  idleTimeout: 30s\n",
    );
    let mut s = TcpStream::connect(dp.listen).unwrap();
    let t0 = Instant::now();
    s.write_all(b"GET /obj/4k/slow HTTP/1.1\r\nHost: test.example\r\n")
        .unwrap();
    // One byte of a header every 200 ms: each keeps the socket busy, none completes the head.
    let mut cut = false;
    for _ in 0..40 {
        if s.write_all(b"X").is_err() {
            cut = true;
            break;
        }
        if closed_within(&mut s, Duration::from_millis(200)) {
            cut = true;
            break;
        }
    }
    let took = t0.elapsed();
    assert!(cut, "the trickling connection was never closed");
    assert!(took < Duration::from_secs(4), "closed after {took:?}");
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_connections_closed_total{reason="header_timeout"}"#),
        1.0
    );
    assert_eq!(o.requests(), 0);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_and_not_before() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(
        &o,
        dir.path(),
        "clients:\n  headerTimeout: 5s\n  idleTimeout: 1500ms\n",
    );
    let mut s = TcpStream::connect(dp.listen).unwrap();
    assert_eq!(get_on(&mut s, "/obj/4k/idle").status, 200);
    // Idle for less than the timeout: still usable, and that request restarts the clock.
    std::thread::sleep(Duration::from_millis(800));
    assert!(get_on(&mut s, "/obj/4k/idle").is_hit());
    std::thread::sleep(Duration::from_millis(800));
    assert!(get_on(&mut s, "/obj/4k/idle").is_hit());
    // Then idle past it: closed by the server.
    assert!(closed_within(&mut s, Duration::from_secs(4)));
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_connections_closed_total{reason="idle_timeout"}"#),
        1.0
    );
}

#[test]
fn a_client_that_stops_reading_is_dropped_at_the_write_timeout() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "clients:\n  writeTimeout: 1s\n");
    // Stored first, so the stalled reads are hits from the store.
    let r = dp.get("/obj/8m/stall");
    assert_eq!(r.body.len(), 8 << 20);
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(dp.listen).unwrap();
        // A small receive buffer, never read: the server's writes block.
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(4096)
            .unwrap();
        write!(
            s,
            "GET /obj/8m/stall HTTP/1.1\r\nHost: test.example\r\n\r\n"
        )
        .unwrap();
        stalled.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let metric = r#"edgecache_dataplane_connections_closed_total{reason="write_timeout"}"#;
    while dp.metric(metric) < 8.0 {
        assert!(
            Instant::now() < deadline,
            "stalled readers still open: {}",
            dp.metrics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(dp.metric("edgecache_dataplane_active_connections"), 0.0);
    // A reader that keeps taking bytes, however slowly, is not dropped: the whole object.
    let r = dp.get("/obj/8m/stall");
    assert_eq!(r.body.len(), 8 << 20);
    assert!(!r.truncated);
}

#[test]
fn connections_over_the_per_address_cap_are_refused_and_others_are_served() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "clients:\n  maxConnectionsPerIp: 4\n");
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| connect_from("127.0.0.1", dp.listen).unwrap())
        .collect();
    for s in &mut held {
        assert_eq!(get_on(s, "/obj/4k/cap").status, 200);
    }
    let mut fifth = connect_from("127.0.0.1", dp.listen).unwrap();
    assert!(closed_within(&mut fifth, Duration::from_secs(3)), "refused");
    assert_eq!(
        dp.metric(r#"edgecache_dataplane_connections_refused_total{reason="per_ip"}"#),
        1.0
    );
    // The four keep being served, and another address has its own cap.
    for s in &mut held {
        assert!(get_on(s, "/obj/4k/cap").is_hit());
    }
    let mut other = connect_from("127.0.0.2", dp.listen).unwrap();
    assert!(get_on(&mut other, "/obj/4k/cap").is_hit());
    // Closing one frees a place.
    held.pop();
    std::thread::sleep(Duration::from_millis(200));
    let mut again = connect_from("127.0.0.1", dp.listen).unwrap();
    assert!(get_on(&mut again, "/obj/4k/cap").is_hit());
}

#[test]
fn a_thousand_slowloris_connections_do_not_cost_a_fresh_client_its_hits() {
    raise_open_files_limit();
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o, dir.path(), "clients:\n  headerTimeout: 10s\n");
    // 50 small objects stored on disk, and kept warm.
    let paths: Vec<String> = (0..50).map(|i| format!("/obj/4k/fresh{i}")).collect();
    for p in &paths {
        assert_eq!(dp.get(p).status, 200);
    }
    // 1,000 connections from the test, each with a head begun and never finished.
    let mut loris = Vec::new();
    for _ in 0..1000 {
        if let Ok(mut s) = connect_from("127.0.0.1", dp.listen) {
            let _ = s.write_all(b"GET /obj/4k/loris HTTP/1.1\r\nHost: test.example\r\nX-a: ");
            loris.push(s);
        }
    }
    // Keep trickling while the fresh client asks.
    let mut worst = Duration::ZERO;
    for p in &paths {
        for s in loris.iter_mut().take(300) {
            let _ = s.write_all(b"a");
        }
        let t = Instant::now();
        let mut c = connect_from("127.0.0.2", dp.listen).unwrap();
        let r = get_on(&mut c, p);
        worst = worst.max(t.elapsed());
        assert!(r.is_hit(), "{p}: {}", r.cache_status());
        check_body(4096, p.rsplit('/').next().unwrap(), &r.body).unwrap();
    }
    println!("slowloris x1000: the fresh client's slowest of 50 hits took {worst:?}");
    // The address cap (default 256) refused the rest of them at accept.
    let refused = dp.metric(r#"edgecache_dataplane_connections_refused_total{reason="per_ip"}"#);
    assert!(refused >= 700.0, "refused {refused}");
    assert!(dp.metric("edgecache_dataplane_active_connections") <= 256.0 + 1.0);
    assert_eq!(o.requests_for("/obj/4k/loris"), 0);
}

#[test]
fn stalled_readers_of_a_large_hit_do_not_freeze_other_clients_disk_hits() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    // One worker, no RAM tier: every hit is a disk read through the worker's I/O budget.
    let dp = start(
        &o,
        dir.path(),
        "memory:\n  ramTier: 0B\nclients:\n  maxConnectionsPerIp: 1000\n",
    );
    let big = "/obj/8m/big";
    assert_eq!(dp.get(big).body.len(), 8 << 20);
    let small: Vec<String> = (0..50).map(|i| format!("/obj/16k/s{i}")).collect();
    for p in &small {
        dp.get(p);
    }
    // 256 connections ask for the 8 MiB hit and never read a byte of it.
    let stalled = stalled_readers(&dp, big, 256, 1);
    std::thread::sleep(Duration::from_millis(500));
    // A fresh client's small hits from disk still come, each well within its 5 s timeout.
    let mut worst = Duration::ZERO;
    for p in &small {
        let t = Instant::now();
        let mut c = connect_from("127.0.0.2", dp.listen).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET {p} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let r = read_response(&mut BufReader::new(c), false)
            .unwrap_or_else(|e| panic!("{p}: {e} (stalled readers froze the worker)"));
        worst = worst.max(t.elapsed());
        assert!(r.is_hit(), "{p}: {}", r.cache_status());
        check_body(16 * 1024, p.rsplit('/').next().unwrap(), &r.body).unwrap();
    }
    println!("256 stalled 8 MiB readers: slowest of 50 fresh disk hits took {worst:?}");
    drop(stalled);
}

/// One worker, no RAM tier, `/obj/8m/big` and `/obj/4m/fresh` stored; `under_pressure` is
/// `clients.writeTimeoutUnderPressure` (the write timeout is 30 s).
fn with_large_hits(under_pressure: &str) -> (OriginHandle, tempfile::TempDir, Dataplane) {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "memory:\n  ramTier: 0B\nclients:\n  maxConnectionsPerIp: 1000\n  writeTimeout: 30s\n  writeTimeoutUnderPressure: {under_pressure}\n"
    );
    let dp = start(&o, dir.path(), &yaml);
    assert_eq!(dp.get("/obj/8m/big").body.len(), 8 << 20);
    assert_eq!(dp.get("/obj/4m/fresh").body.len(), 4 << 20);
    (o, dir, dp)
}

/// [`with_large_hits`], then 256 connections from `addresses` addresses stalled on the 8 MiB
/// hit.
fn stalled_on_a_large_hit(
    under_pressure: &str,
    addresses: usize,
) -> (OriginHandle, tempfile::TempDir, Dataplane, Vec<TcpStream>) {
    let (o, dir, dp) = with_large_hits(under_pressure);
    let stalled = stalled_readers(&dp, "/obj/8m/big", 256, addresses);
    std::thread::sleep(Duration::from_millis(500));
    (o, dir, dp, stalled)
}

#[test]
fn a_fresh_large_hit_never_waits_on_stalled_readers_of_many_addresses() {
    // Two from each of 128 addresses, so the per-address stream cap does not bind them, and
    // no write timeout comes to help within the test (both 30 s). Before the stored bodies were
    // paced by the socket (src/paced.rs), the stalled readers held the worker's I/O budget with
    // the chunks hyper could not write until they were dropped: with a 2 s pressure timeout
    // the fresh hit took 6-7 s, with these timeouts it timed out. Now a stalled reader is sent
    // only what its socket takes, and what was read for it goes back to the budget while
    // others wait (read again once its client reads).
    let (_o, _dir, dp, stalled) = stalled_on_a_large_hit("30s", 128);
    // One more, with a receive buffer that drains quickly once it reads (4 KiB ones drain at
    // a few KiB a second on loopback).
    let mut late = connect_from("127.0.0.3", dp.listen).unwrap();
    socket2::SockRef::from(&late)
        .set_recv_buffer_size(256 << 10)
        .unwrap();
    write!(
        late,
        "GET /obj/8m/big HTTP/1.1\r\nHost: test.example\r\n\r\n"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let took = fresh_4m_hit("127.0.0.2", &dp, Duration::from_secs(10));
    println!("256 stalled 8 MiB readers of 128 addresses: a fresh 4 MiB disk hit took {took:?}");
    let dropped = dp.metric(
        r#"edgecache_dataplane_connections_closed_total{reason="write_timeout_under_pressure"}"#,
    );
    assert_eq!(dropped, 0.0, "no stalled reader was dropped to make room");
    let released = dp.metric("edgecache_dataplane_paced_chunks_released_total");
    assert!(released >= 1.0, "{}", dp.metrics());
    // A stalled reader whose chunk went back gets its whole, correct body once it reads.
    late.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let r = read_response(&mut BufReader::new(late), false).unwrap();
    assert!(r.is_hit() && !r.truncated);
    check_body(8 << 20, "big", &r.body).unwrap();
    drop(stalled);
}

const DISK_STREAMS: &str = "edgecache_dataplane_disk_streams";
const DISK_STREAMS_WAITING: &str = "edgecache_dataplane_disk_streams_waiting";

/// The worker's I/O buffer budget in 256 KiB chunks (the test's one worker).
fn budget_chunks(dp: &Dataplane) -> usize {
    (dp.metric("edgecache_dataplane_io_buffer_capacity_bytes") as u64 / (256 << 10)) as usize
}

#[test]
fn one_address_stalling_many_large_hits_does_not_hold_back_another_addresss_large_hit() {
    // The pressure timeout as long as the write timeout: only the stream slots help (without
    // them the fresh hit timed out at 10 s). Nobody else wanted a slot while the 256 stalled
    // readers came, so their address took the whole pool (a stream for each chunk of the
    // budget), past its share; the other address still gets its hit at once.
    let (_o, _dir, dp, stalled) = stalled_on_a_large_hit("30s", 1);
    let pool = budget_chunks(&dp);
    dp.wait_for_metrics("the stalled readers hold the pool", 10, |m| {
        metric_value(m, DISK_STREAMS) as usize == pool
            && metric_value(m, DISK_STREAMS_WAITING) as usize == 256 - pool
    });
    let took = fresh_4m_hit("127.0.0.2", &dp, Duration::from_secs(10));
    println!(
        "256 stalled 8 MiB readers from one address: another address's 4 MiB disk hit took {took:?}"
    );
    assert_eq!(
        dp.metric(DISK_STREAMS_WAITING) as usize,
        256 - pool,
        "the stalled address got no slot the other freed"
    );
    drop(stalled);
}

#[test]
fn one_address_alone_streams_past_its_share_and_its_next_large_hit_does_not_wait() {
    // As many stalled readers from one address as the I/O budget holds at two chunks each:
    // twice the share an address is guaranteed (half the budget). Nobody else wants a slot, so
    // all of them stream at once, and the address's next large hit is served at once too.
    // Before, the address was held to its share: the stalled readers took it all and the next
    // hit waited for one of them to time out (30 s here).
    let (_o, _dir, dp) = with_large_hits("30s");
    let n = budget_chunks(&dp) / 2;
    let stalled = stalled_readers(&dp, "/obj/8m/big", n, 1);
    std::thread::sleep(Duration::from_millis(500));
    let took = fresh_4m_hit("127.0.1.1", &dp, Duration::from_secs(10));
    println!("{n} stalled 8 MiB readers of one address: its next 4 MiB disk hit took {took:?}");
    dp.wait_for_metrics("every stalled reader streams", 10, |m| {
        metric_value(m, DISK_STREAMS) as usize == n && metric_value(m, DISK_STREAMS_WAITING) == 0.0
    });
    drop(stalled);
}

#[test]
fn a_large_hit_that_waits_for_its_addresss_stream_slot_reads_its_record_once() {
    // One stream per address: 8 clients of one address take turns. Each hit of the 1 MiB
    // object reads its record once, in one read of header and body (4 KiB + 1 MiB). Before the
    // slot was taken ahead of the open, a client that had to wait read its first chunk twice;
    // before records up to 1 MiB + 64 KiB were read whole, a hit took five reads of 256 KiB
    // (1,114,112 bytes: the first chunk's body part was cut at a 64 KiB block and read again).
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(
        &o,
        dir.path(),
        "memory:\n  ramTier: 0B\nclients:\n  maxDiskStreamsPerIp: 1\n",
    );
    assert_eq!(dp.get("/obj/1m/turns").body.len(), 1 << 20);
    let read = "edgecache_dataplane_disk_read_bytes_total";
    let reads = "edgecache_dataplane_disk_reads_total";
    let (before, reads_before) = (dp.metric(read), dp.metric(reads));
    let listen = dp.listen;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = connect_from("127.0.0.2", listen).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                write!(
                    c,
                    "GET /obj/1m/turns HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                read_response(&mut BufReader::new(c), false).unwrap()
            })
        })
        .collect();
    for c in clients {
        let r = c.join().unwrap();
        assert!(r.is_hit() && !r.truncated, "{}", r.cache_status());
        check_body(1 << 20, "turns", &r.body).unwrap();
    }
    let per_hit = (dp.metric(read) - before) / 8.0;
    assert_eq!(per_hit, 1_052_672.0, "disk bytes read per hit");
    assert_eq!(
        (dp.metric(reads) - reads_before) / 8.0,
        1.0,
        "disk reads per hit"
    );
}

#[test]
fn a_large_hit_from_ram_takes_no_stream_slot_and_never_waits_for_one() {
    // One address stalls 256 disk hits of 8 MiB (too large for the RAM tier: over a 64th of
    // it): they hold every stream slot of the worker and the rest wait for one. The same
    // address's hit of a 1 MiB object from the RAM tier holds no I/O buffer, so it takes no
    // slot and is served at once. Before, every hit of a body over 256 KiB took one, and this
    // one queued behind the stalled streams until their write timeout (30 s).
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(
        &o,
        dir.path(),
        "memory:\n  ramTier: 128MiB\nclients:\n  maxConnectionsPerIp: 1000\n  writeTimeout: 30s\n",
    );
    let ram = r#"edgecache_dataplane_requests_total{cache="hit_ram"}"#;
    assert_eq!(dp.get("/obj/8m/big").body.len(), 8 << 20);
    // The miss stores it, the first disk hit copies it into the tier, the next is a RAM hit.
    for _ in 0..3 {
        assert_eq!(dp.get("/obj/1m/hot").body.len(), 1 << 20);
    }
    assert_eq!(dp.metric(ram), 1.0, "the 1 MiB object is in the RAM tier");
    let pool = budget_chunks(&dp);
    let stalled = stalled_readers(&dp, "/obj/8m/big", 256, 1);
    dp.wait_for_metrics("the stalled readers hold the pool", 10, |m| {
        metric_value(m, DISK_STREAMS) as usize == pool
            && metric_value(m, DISK_STREAMS_WAITING) as usize == 256 - pool
    });
    let (r, took) = get_from("127.0.1.1", &dp, "/obj/1m/hot", Duration::from_secs(10));
    println!("{pool} stalled disk streams of one address: its 1 MiB RAM hit took {took:?}");
    assert!(r.is_hit() && !r.truncated, "{}", r.cache_status());
    check_body(1 << 20, "hot", &r.body).unwrap();
    assert_eq!(dp.metric(ram), 2.0, "served from the RAM tier");
    assert_eq!(dp.metric(DISK_STREAMS) as usize, pool);
    assert_eq!(
        dp.metric(DISK_STREAMS_WAITING) as usize,
        256 - pool,
        "the RAM hit never waited for a slot"
    );
    drop(stalled);
}

/// Whether the server has sent `s` anything yet (never waits).
fn has_bytes(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let got = matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0);
    s.set_nonblocking(false).unwrap();
    got
}

#[test]
fn a_slot_freed_goes_to_the_waiting_address_holding_fewest_not_to_the_earliest_waiter() {
    // Address a takes the whole pool while alone, and 8 more of its streams wait. Address b
    // arrives: its share at once (past the pool), 4 more wait, after a's. When a's streams end,
    // the first slots freed only bring the pool back to its size; the next go to b, which
    // holds fewer than a, although a's waiters came first. A waiting stream has been sent
    // nothing (the slot is taken before the response head).
    let (_o, _dir, dp) = with_large_hits("30s");
    let pool = budget_chunks(&dp);
    let big = "/obj/8m/big";
    let mut a = stalled_readers_of(&dp, big, pool + 8, |_| "127.0.1.1".into());
    dp.wait_for_metrics("a holds the pool", 10, |m| {
        metric_value(m, DISK_STREAMS) as usize == pool
            && metric_value(m, DISK_STREAMS_WAITING) == 8.0
    });
    // b's share: what it gets at once on top of the pool (b asks for far more than any share).
    let b = stalled_readers_of(&dp, big, pool / 2, |_| "127.0.2.1".into());
    dp.wait_for_metrics("b's requests arrived", 10, |m| {
        metric_value(m, DISK_STREAMS_WAITING) as usize > 8
            && (metric_value(m, DISK_STREAMS) + metric_value(m, DISK_STREAMS_WAITING)) as usize
                == pool + 8 + pool / 2
    });
    let share = dp.metric(DISK_STREAMS) as usize - pool;
    assert!(
        share >= 4 && share < pool / 2,
        "b's share {share} of a pool of {pool}"
    );
    let b_waiting = pool / 2 - share;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.iter().filter(|s| has_bytes(s)).count(), share);
    // a ends share + 4 of its streams: the pool goes back to its size, then 4 slots are free.
    let mut ended = 0;
    a.retain(|s| {
        let end = ended < share + 4 && has_bytes(s);
        ended += usize::from(end);
        !end
    });
    assert_eq!(ended, share + 4);
    dp.wait_for_metrics("the 4 slots freed are taken", 10, |m| {
        metric_value(m, DISK_STREAMS) as usize == pool
            && metric_value(m, DISK_STREAMS_WAITING) as usize == 8 + b_waiting - 4
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        b.iter().filter(|s| has_bytes(s)).count(),
        share + 4,
        "the slots went to b, which held fewer"
    );
    assert_eq!(
        a.iter().filter(|s| !has_bytes(s)).count(),
        8,
        "a's waiters, though earlier, still wait"
    );
}
