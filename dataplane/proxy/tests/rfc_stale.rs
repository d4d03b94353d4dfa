//! RFC 5861 (stale-while-revalidate, stale-if-error) and RFC 9111 4.2.4 (serving stale)
//! through the server.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rfc_support::*;

#[test]
fn rfc5861_3_stale_while_revalidate_serves_stale_and_revalidates_once_in_the_background() {
    // No Date from this origin (the cache adds its receipt time), so the test clock alone
    // decides ages; the 304 is slow, to show that clients do not wait for it.
    let o = Scripted::start(|req, _| {
        if req.header("if-none-match") == Some("\"s1\"") {
            std::thread::sleep(Duration::from_millis(1200));
            resp(
                "304 Not Modified",
                &[
                    ("ETag", "\"s1\""),
                    ("Cache-Control", "max-age=10, stale-while-revalidate=600"),
                ],
                b"",
            )
        } else {
            resp(
                "200 OK",
                &[
                    ("ETag", "\"s1\""),
                    ("Cache-Control", "max-age=10, stale-while-revalidate=600"),
                ],
                b"stale-but-fine",
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    dp.get("/swr");
    advance(&dp, 30);
    // Several clients at once while stale: all served the stored copy at once.
    let listen = dp.listen;
    let clients: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let t = Instant::now();
                (get(listen, "/swr", &[]).unwrap(), t.elapsed())
            })
        })
        .collect();
    for c in clients {
        let (r, took) = c.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"stale-but-fine");
        assert!(r.is_hit(), "{}", r.cache_status());
        assert!(
            r.cache_status().contains("stale-while-revalidate"),
            "{}",
            r.cache_status()
        );
        assert!(
            took < Duration::from_millis(900),
            "served at once, took {took:?}"
        );
    }
    let conditionals = || {
        o.requests()
            .iter()
            .filter(|r| r.header("if-none-match").is_some())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while conditionals() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        conditionals(),
        1,
        "exactly one background conditional request"
    );
    assert_eq!(o.count(), 2);
    // The background 304 made it fresh again.
    let r = dp.get("/swr");
    assert!(r.is_hit(), "{}", r.cache_status());
    assert!(!r.cache_status().contains("stale"), "{}", r.cache_status());
    let age: u64 = r.header("age").parse().unwrap();
    assert!(age < 5, "Age {age}");
    assert_eq!(o.count(), 2);
}

#[test]
fn rfc5861_3_stale_while_revalidate_window_is_bounded() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let p = "/obj/4k/swr2?cc=max-age%3D10%2C%20stale-while-revalidate%3D20";
    dp.get(p);
    advance(&dp, 60); // 50 s stale, beyond the 20 s window
    let r = dp.get(p);
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert!(
        r.cache_status().contains("fwd-status=304"),
        "{}",
        r.cache_status()
    );
}

/// An origin whose status the test switches (200 with a max-age=10 response or an error).
fn switchable(cc: &'static str) -> (Scripted, Arc<AtomicU16>) {
    let status = Arc::new(AtomicU16::new(200));
    let s2 = status.clone();
    let o = Scripted::start(move |_, n| match s2.load(Ordering::SeqCst) {
        200 => resp(
            "200 OK",
            &[("Cache-Control", cc)],
            format!("good-{n}").as_bytes(),
        ),
        code => resp(&format!("{code} Oops"), &[], b"origin error"),
    });
    (o, status)
}

#[test]
fn rfc5861_4_stale_if_error_serves_stale_on_a_5xx_and_when_the_origin_is_down() {
    let (o, status) = switchable("max-age=10, stale-if-error=600");
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    assert_eq!(dp.get("/e").body, b"good-0");
    advance(&dp, 30);
    for code in [500, 502, 503, 504] {
        status.store(code, Ordering::SeqCst);
        let r = dp.get("/e");
        assert_eq!(r.status, 200, "{code}: {}", r.cache_status());
        assert_eq!(r.body, b"good-0");
        assert!(
            r.cache_status().contains("stale-if-error"),
            "{}",
            r.cache_status()
        );
    }
    // 404 is not an error for stale-if-error: relayed.
    status.store(404, Ordering::SeqCst);
    assert_eq!(dp.get("/e").status, 404);
    // Beyond the window: the error is relayed.
    status.store(500, Ordering::SeqCst);
    advance(&dp, 1000);
    assert_eq!(dp.get("/e").status, 500);

    // Origin unreachable (bench origin shut down).
    let b = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&b.url(), dir.path(), &[]);
    let p = "/obj/4k/down?cc=max-age%3D10%2C%20stale-if-error%3D600";
    dp.get(p);
    advance(&dp, 30);
    b.shutdown();
    let r = dp.get(p);
    assert_eq!(r.status, 200, "{}", r.cache_status());
    check_body(4096, "down", &r.body).unwrap();
    // A request's own stale-if-error works too (RFC 5861 4).
    let p2 = "/obj/4k/down2?cc=max-age%3D10";
    drop(dp);
    let b = origin();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&b.url(), dir.path(), &[]);
    dp.get(p2);
    advance(&dp, 30);
    b.shutdown();
    assert_ne!(dp.get(p2).status, 200);
    let r = dp.request("GET", p2, &[("Cache-Control", "stale-if-error=600")]);
    assert_eq!(r.status, 200, "{}", r.cache_status());
}

#[test]
fn rfc5861_4_no_stale_if_error_with_must_revalidate_or_no_cache() {
    for cc in [
        "max-age=10, must-revalidate, stale-if-error=600",
        "max-age=10, proxy-revalidate, stale-if-error=600",
        "no-cache, stale-if-error=600",
    ] {
        let (o, status) = switchable(cc);
        let dir = tempfile::tempdir().unwrap();
        let dp = start(&o.url(), dir.path(), &[]);
        dp.get("/m");
        advance(&dp, 30);
        status.store(503, Ordering::SeqCst);
        let r = dp.get("/m");
        assert_eq!(r.status, 503, "{cc}: {}", r.cache_status());
        assert_eq!(r.body, b"origin error");
    }
}
