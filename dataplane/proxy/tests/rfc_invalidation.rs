//! RFC 9111 4.4 (invalidating stored responses) through the server: a successful unsafe method
//! invalidates the target URI and the same-origin Location / Content-Location URIs.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use common::*;
use rfc_support::*;

/// GETs are cacheable and count per path; unsafe methods answer what their query asks for.
fn origin_for_invalidation() -> Scripted {
    Scripted::start(|req, n| {
        if req.method == "GET" {
            return resp(
                "200 OK",
                &[("Cache-Control", "max-age=600")],
                format!("{}-{n}", req.target).as_bytes(),
            );
        }
        let (_, q) = req.target.split_once('?').unwrap_or(("", ""));
        let mut status = "200 OK".to_string();
        let mut h: Vec<(String, String)> = Vec::new();
        for kv in q.split('&') {
            match kv.split_once('=') {
                Some(("status", s)) => status = format!("{s} X"),
                Some(("loc", l)) => h.push(("Location".into(), l.replace("%3A", ":"))),
                Some(("cloc", l)) => h.push(("Content-Location".into(), l.replace("%3A", ":"))),
                _ => {}
            }
        }
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        resp(&status, &h, b"done")
    })
}

fn fill(dp: &Dataplane, paths: &[&str]) {
    for p in paths {
        dp.get(p);
        assert!(dp.get(p).is_hit(), "{p}");
    }
}

#[test]
fn rfc9111_4_4_a_successful_post_invalidates_the_uri_and_same_origin_location() {
    let o = origin_for_invalidation();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    fill(&dp, &["/a", "/b", "/c", "/d"]);
    // POST to /a (no query in the stored key, so post to /a itself) with Location /b and an
    // absolute same-origin Content-Location /c.
    let r = request(dp.listen, "POST", "/a", &[], b"payload").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"done");
    assert!(!dp.get("/a").is_hit(), "the target URI is invalidated");
    assert!(dp.get("/b").is_hit());
    assert_eq!(o.requests_for("/a").len(), 3);
    assert_eq!(o.requests_for("/a")[1].body, b"payload");

    let r = dp.request(
        "PUT",
        "/x?status=201&loc=/b&cloc=http%3A//test.example/c",
        &[],
    );
    assert_eq!(r.status, 201);
    assert!(!dp.get("/b").is_hit(), "same-origin Location invalidated");
    assert!(
        !dp.get("/c").is_hit(),
        "same-origin Content-Location invalidated"
    );
    assert!(dp.get("/d").is_hit());

    // Another origin's URI is left alone.
    fill(&dp, &["/b"]);
    dp.request("DELETE", "/y?status=204&loc=http%3A//other.example/b", &[]);
    assert!(
        dp.get("/b").is_hit(),
        "cross-origin Location is not invalidated"
    );
}

#[test]
fn rfc9111_4_4_errors_do_not_invalidate_and_delete_patch_do() {
    let o = origin_for_invalidation();
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    fill(&dp, &["/e?status=500", "/f?status=204", "/g?status=200"]);
    let r = dp.request("POST", "/e?status=500", &[]);
    assert_eq!(r.status, 500);
    assert!(
        dp.get("/e?status=500").is_hit(),
        "a 5xx does not invalidate"
    );
    dp.request("DELETE", "/f?status=204", &[]);
    assert!(!dp.get("/f?status=204").is_hit());
    dp.request("PATCH", "/g?status=200", &[]);
    assert!(!dp.get("/g?status=200").is_hit());
}

#[test]
fn rfc9111_4_4_invalidation_removes_every_variant() {
    let o = Scripted::start(|req, n| {
        if req.method == "GET" {
            resp(
                "200 OK",
                &[
                    ("Cache-Control", "max-age=600"),
                    ("Vary", "Accept-Language"),
                ],
                format!("{n}").as_bytes(),
            )
        } else {
            resp("200 OK", &[], b"")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let en = [("Accept-Language", "en")];
    let fr = [("Accept-Language", "fr")];
    dp.request("GET", "/v", &en);
    dp.request("GET", "/v", &fr);
    assert!(dp.request("GET", "/v", &en).is_hit());
    assert!(dp.request("GET", "/v", &fr).is_hit());
    dp.request("POST", "/v", &[]);
    assert!(!dp.request("GET", "/v", &en).is_hit());
    assert!(!dp.request("GET", "/v", &fr).is_hit());
}

#[test]
fn rfc9111_4_4_a_fill_in_flight_during_a_post_is_not_stored() {
    // The GET's response is generated before the POST changes the resource, and arrives after
    // the POST's response: storing it would keep the old state past the invalidation.
    let o = Scripted::start(|req, n| {
        if req.method == "GET" {
            let body = format!("state-{n}");
            std::thread::sleep(std::time::Duration::from_millis(600));
            resp(
                "200 OK",
                &[("Cache-Control", "max-age=600")],
                body.as_bytes(),
            )
        } else {
            resp("204 No Content", &[], b"")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let listen = dp.listen;
    let slow = std::thread::spawn(move || get(listen, "/race", &[]).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(dp.request("POST", "/race", &[]).status, 204);
    assert_eq!(slow.join().unwrap().body, b"state-0");
    let r = dp.get("/race");
    assert!(!r.is_hit(), "{}", r.cache_status());
    assert_eq!(r.body, b"state-2");
    assert!(dp.get("/race").is_hit());
}
