//! The cache's own compression (issue 33 §1) through the server: a text response the origin
//! sends uncompressed is compressed once per Accept-Encoding bucket, stored, and served as a
//! hit; its fields and validators are the compressed representation's (RFC 9110 8.4, 8.8.3);
//! Range, HEAD, conditional requests, revalidation and purges agree with it; what may not be
//! compressed is sent as it came.

#![allow(clippy::unwrap_used)]

mod common;
mod rfc_support;

use std::io::Read;

use rfc_support::*;

/// A script of JavaScript, about 30 KB: compressible several times over.
fn script() -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..600 {
        v.extend_from_slice(
            format!("export function handler{i}(event) {{ return event.value * {i}; }}\n")
                .as_bytes(),
        );
    }
    v
}

/// An origin of `script()` as `content_type`, with `extra` fields, ETag `"v1"` and `max-age`;
/// it answers `If-None-Match: "v1"` with a 304.
fn text_origin(
    content_type: &'static str,
    max_age: u32,
    extra: &'static [(&str, &str)],
) -> Scripted {
    Scripted::start(move |req, _| {
        let cc = format!("max-age={max_age}");
        let mut h = vec![
            ("Content-Type", content_type),
            ("ETag", "\"v1\""),
            ("Cache-Control", cc.as_str()),
        ];
        h.extend_from_slice(extra);
        if req.header("if-none-match") == Some("\"v1\"") {
            return resp("304 Not Modified", &h, b"");
        }
        resp("200 OK", &h, &script())
    })
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => out = zstd::stream::decode_all(data).unwrap(),
        "" => out = data.to_vec(),
        other => panic!("unknown coding {other}"),
    }
    out
}

fn varies_on_accept_encoding(r: &common::Resp) -> bool {
    r.header("vary")
        .split(',')
        .any(|f| f.trim().eq_ignore_ascii_case("accept-encoding"))
}

#[test]
fn each_bucket_gets_its_coding_compressed_once_and_then_served_as_a_hit() {
    let o = text_origin("application/javascript; charset=utf-8", 600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let want = script();
    for (accept, coding) in [
        ("gzip, deflate", "gzip"),
        ("gzip, deflate, br", "br"),
        ("gzip, deflate, br, zstd", "zstd"),
    ] {
        let before = o.count();
        let ae = [("Accept-Encoding", accept)];
        let miss = dp.request("GET", "/app.js", &ae);
        assert_eq!(miss.status, 200);
        assert!(!miss.is_hit(), "{}", miss.cache_status());
        assert_eq!(miss.header("content-encoding"), coding);
        assert!(varies_on_accept_encoding(&miss), "{:?}", miss.headers);
        assert_eq!(miss.header("etag"), format!("\"v1-{coding}\""));
        assert_eq!(
            miss.header("edgecache-coded"),
            "",
            "the mark is the cache's own"
        );
        assert_eq!(decode(coding, &miss.body), want, "{coding} miss");
        assert!(
            miss.body.len() * 4 < want.len(),
            "{coding}: {} bytes",
            miss.body.len()
        );
        assert_eq!(o.count(), before + 1);
        // The origin was asked for the bucket, and sent identity.
        let asked = o
            .requests()
            .last()
            .unwrap()
            .header("accept-encoding")
            .map(str::to_owned);
        assert_eq!(asked.as_deref(), Some(coding));

        let hit = dp.request("GET", "/app.js", &ae);
        assert!(hit.is_hit(), "{coding}: {}", hit.cache_status());
        assert_eq!(hit.header("content-encoding"), coding);
        assert_eq!(
            hit.body, miss.body,
            "{coding}: the stored copy is what the miss sent"
        );
        assert_eq!(hit.header("content-length"), hit.body.len().to_string());
        assert_eq!(hit.header("etag"), format!("\"v1-{coding}\""));
        assert!(varies_on_accept_encoding(&hit));
        assert_eq!(hit.header("edgecache-coded"), "");

        // HEAD agrees with GET.
        let head = dp.request("HEAD", "/app.js", &ae);
        assert!(head.is_hit(), "{}", head.cache_status());
        assert_eq!(head.header("content-encoding"), coding);
        assert_eq!(head.header("content-length"), hit.header("content-length"));
        assert_eq!(head.header("etag"), hit.header("etag"));

        // A Range applies to the compressed representation.
        let range = dp.request("GET", "/app.js", &[ae[0], ("Range", "bytes=10-109")]);
        assert_eq!(range.status, 206, "{}", range.cache_status());
        assert_eq!(range.body, hit.body[10..110]);
        assert_eq!(range.header("content-encoding"), coding);

        // The compressed representation's validator selects it, the identity one's does not.
        let inm = format!("\"v1-{coding}\"");
        let r = dp.request("GET", "/app.js", &[ae[0], ("If-None-Match", &inm)]);
        assert_eq!(r.status, 304, "{}", r.cache_status());
        let r = dp.request("GET", "/app.js", &[ae[0], ("If-None-Match", "\"v1\"")]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), coding);
        assert_eq!(o.count(), before + 1, "{coding}: one fetch for all of that");
    }
    let m = dp.metrics();
    for coding in ["gzip", "br", "zstd"] {
        assert!(
            m.contains(&format!(
                "edgecache_dataplane_compressed_responses_total{{coding=\"{coding}\"}} 1"
            )),
            "{coding} counted once: {m}"
        );
    }

    // A client without Accept-Encoding gets identity, which varies on it too.
    let before = o.count();
    let plain = dp.get("/app.js");
    assert_eq!(plain.header("content-encoding"), "");
    assert_eq!(plain.body, want);
    assert_eq!(plain.header("etag"), "\"v1\"");
    assert!(varies_on_accept_encoding(&plain), "{:?}", plain.headers);
    assert!(dp.get("/app.js").is_hit());
    assert_eq!(o.count(), before + 1);
    // And a gzip client still gets its compressed copy as a hit.
    let gz = dp.request("GET", "/app.js", &[("Accept-Encoding", "gzip")]);
    assert!(gz.is_hit(), "{}", gz.cache_status());
    assert_eq!(gz.header("content-encoding"), "gzip");

    // A purge of the URL removes every variant.
    let p = common::request(dp.admin, "PURGE", "/app.js", &[], b"").unwrap();
    assert_eq!(p.status, 200, "{}", String::from_utf8_lossy(&p.body));
    for accept in ["gzip", "br", "zstd", "identity"] {
        let r = dp.request("GET", "/app.js", &[("Accept-Encoding", accept)]);
        assert!(
            !r.is_hit(),
            "{accept} after the purge: {}",
            r.cache_status()
        );
    }
}

#[test]
fn a_stale_compressed_copy_is_revalidated_with_the_origins_own_etag() {
    let o = text_origin("text/css", 10, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let ae = [("Accept-Encoding", "gzip")];
    let first = dp.request("GET", "/site.css", &ae);
    assert_eq!(first.header("content-encoding"), "gzip");
    advance(&dp, 30);
    let r = dp.request("GET", "/site.css", &ae);
    assert_eq!(r.status, 200, "{}", r.cache_status());
    assert_eq!(o.count(), 2);
    let sent = o.requests().last().unwrap().clone();
    assert_eq!(
        sent.header("if-none-match"),
        Some("\"v1\""),
        "the origin never saw the cache's ETag"
    );
    // The 304 freshened the compressed copy: served from it, with its own validator and fields.
    assert!(
        r.cache_status().contains("fwd=stale"),
        "{}",
        r.cache_status()
    );
    assert_eq!(r.header("content-encoding"), "gzip");
    assert_eq!(r.header("etag"), "\"v1-gzip\"");
    assert!(varies_on_accept_encoding(&r));
    assert_eq!(r.body, first.body);
    let hit = dp.request("GET", "/site.css", &ae);
    assert!(hit.is_hit(), "{}", hit.cache_status());
    assert_eq!(hit.header("etag"), "\"v1-gzip\"");
    assert_eq!(decode("gzip", &hit.body), script());
}

#[test]
fn what_may_not_be_compressed_is_sent_as_the_origin_sent_it() {
    let dir = tempfile::tempdir().unwrap();
    let ae = [("Accept-Encoding", "gzip, br")];
    // Cache-Control: no-transform.
    let o = text_origin("text/html", 600, &[("Cache-Control", "no-transform")]);
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.request("GET", "/nt", &ae);
    assert_eq!(r.header("content-encoding"), "");
    assert_eq!(r.body, script());
    drop(dp);
    // A type that is not compressible.
    let o = text_origin("image/png", 600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.request("GET", "/img", &ae);
    assert_eq!(r.header("content-encoding"), "");
    assert!(!varies_on_accept_encoding(&r), "{:?}", r.headers);
    drop(dp);
    // Smaller than the minimum.
    let o = Scripted::start(|_, _| {
        resp(
            "200 OK",
            &[
                ("Content-Type", "text/plain"),
                ("Cache-Control", "max-age=600"),
            ],
            b"short",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.request("GET", "/small", &ae);
    assert_eq!(r.header("content-encoding"), "");
    assert_eq!(r.body, b"short");
    drop(dp);
    // The origin's own gzip is stored as it is, never compressed twice.
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, &script()).unwrap();
        e.finish().unwrap()
    };
    let o = Scripted::start(move |_, _| {
        resp(
            "200 OK",
            &[
                ("Content-Type", "text/plain"),
                ("Content-Encoding", "gzip"),
                ("Vary", "Accept-Encoding"),
                ("Cache-Control", "max-age=600"),
            ],
            &gz,
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &[]);
    let r = dp.request("GET", "/pre", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), "gzip");
    assert_eq!(decode("gzip", &r.body), script());
    assert!(
        dp.request("GET", "/pre", &[("Accept-Encoding", "gzip")])
            .is_hit()
    );
    drop(dp);
    // Turned off on the command line.
    let o = text_origin("text/html", 600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(&o.url(), dir.path(), &["--compression", "off"]);
    let r = dp.request("GET", "/off", &ae);
    assert_eq!(r.header("content-encoding"), "");
    assert!(!varies_on_accept_encoding(&r), "{:?}", r.headers);
    assert!(
        !dp.metrics()
            .contains("edgecache_dataplane_compressed_responses_total{")
    );
}

#[test]
fn a_site_turns_compression_off_for_itself_and_sets_its_levels() {
    let o = text_origin("application/json", 600, &[]);
    let url = o.url();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "sites:\n- hosts: [plain.test]\n  origins: [\"{url}\"]\n  compression:\n    enabled: false\n\
         - hosts: [packed.test]\n  origins: [\"{url}\"]\n  compression:\n    levels: {{gzip: 9}}\n"
    );
    let config = dir.path().join("dp.yaml");
    std::fs::write(&config, &yaml).unwrap();
    let cache = dir.path().join("cache");
    let mut opts = common::Opts::new("", &cache);
    opts.extra = vec!["--config".into(), config.display().to_string()];
    let dp = common::Dataplane::start(opts);
    let plain = dp.request(
        "GET",
        "/data.json",
        &[("Host", "plain.test"), ("Accept-Encoding", "gzip")],
    );
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), "");
    let packed = dp.request(
        "GET",
        "/data.json",
        &[("Host", "packed.test"), ("Accept-Encoding", "gzip")],
    );
    assert_eq!(packed.header("content-encoding"), "gzip");
    assert_eq!(decode("gzip", &packed.body), script());

    // A level out of range is a clear error, with its path.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "origin:\n  url: http://o\ncompression:\n  levels:\n    br: 12\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgecache-dataplane"))
        .arg("check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("compression.levels.br: must be from 0 to 11"),
        "{err}"
    );
}

#[test]
fn an_encoder_whose_state_the_memory_plan_cannot_hold_falls_back_to_gzip_or_identity() {
    // 256 MiB plans 8 MiB for encoders; brotli at level 9 needs about 39 MiB per stream.
    let o = text_origin("application/javascript", 600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dp = start(
        &o.url(),
        dir.path(),
        &["--memory-limit", "256MiB", "--compression-levels", "br=9"],
    );
    let m = dp.metrics();
    assert!(
        m.contains("edgecache_dataplane_memory_bound_bytes{part=\"encoders\"} 8388608"),
        "{m}"
    );
    // A client that takes gzip too gets gzip; not stored for its bucket (`br`), whose other
    // clients may not take gzip.
    let ae = [("Accept-Encoding", "gzip, br")];
    for _ in 0..2 {
        let r = dp.request("GET", "/fallback.js", &ae);
        assert_eq!(r.header("content-encoding"), "gzip");
        assert_eq!(decode("gzip", &r.body), script());
        assert!(
            r.cache_status().contains("compress-busy"),
            "{}",
            r.cache_status()
        );
    }
    // And a gzip client's own bucket is compressed and stored as usual.
    let gz = [("Accept-Encoding", "gzip")];
    dp.request("GET", "/fallback.js", &gz);
    let hit = dp.request("GET", "/fallback.js", &gz);
    assert!(hit.is_hit(), "{}", hit.cache_status());
    assert_eq!(hit.header("content-encoding"), "gzip");
    // A brotli-only client gets identity, not stored: the next one tries again.
    let br = [("Accept-Encoding", "br")];
    for _ in 0..2 {
        let r = dp.request("GET", "/br-only.js", &br);
        assert_eq!(r.header("content-encoding"), "");
        assert_eq!(r.body, script());
        assert!(
            r.cache_status().contains("compress-busy"),
            "{}",
            r.cache_status()
        );
        assert!(varies_on_accept_encoding(&r));
    }
    let m = dp.metrics();
    assert!(
        m.contains("edgecache_dataplane_compress_busy_total 2"),
        "{m}"
    );
    assert!(
        m.contains("edgecache_dataplane_memory_bytes{part=\"encoders\"} 0"),
        "every encoder's state is given back: {m}"
    );
}
