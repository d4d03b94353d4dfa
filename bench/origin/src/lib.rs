//! edgecache-origin: a fast loopback origin for demos, tests and benchmarks.
//!
//! `GET /obj/<size>/<id>` serves `<size>` bytes (`4096`, `4k`, `100k`, `1m`) of
//! deterministic content (see [`pattern`]); [`expected_body`] and
//! [`check_body`] let tests verify a body byte for byte.
//!
//! Query parameters on `/obj/...`:
//! - `cc=VALUE`: the whole `Cache-Control` value (percent-encoded); `cc=` or
//!   `cc=none` omits the header. Default `public, max-age=<max_age>`.
//! - `delay_ms=N`: wait before sending the head.
//! - `chunked=1`: no `Content-Length`, chunked body.
//! - `status=N`: respond with this status (and the body, except 204).
//! - `cut=N`: `Content-Length` of the full size, but the connection is closed
//!   after N body bytes.
//! - `slow_ms=N`: pause between 64 KiB body chunks.
//! - `hdr=Name:Value`: add a response header (repeatable, percent-encoded).
//! - `echo_host=1`: answer with `x-origin-host`, the Host header(s) the request carried.
//!
//! With `files_dir` (`--dir PATH`), `GET /files/<relative path>` serves that directory's files
//! (read into memory at start) uncompressed, with a Content-Type by extension, a strong ETag
//! and the same Cache-Control; counted like every request.
//!
//! POST, PUT and DELETE on `/obj/...` answer `200 accepted` (an unsafe method that succeeds).
//!
//! Conditional requests (`If-None-Match`, `If-Modified-Since`) get 304.
//! Every request except `/__*` is counted, per request target (path and
//! query as received). `GET /__stats` returns JSON counters
//! (`?path=/obj/4k/1` adds that target's count, `?paths=1` dumps all), and
//! `POST /__reset` resets them. `GET /__health` answers `ok`.
//!
//! In-process use:
//! ```no_run
//! # async fn t() -> std::io::Result<()> {
//! use edgecache_origin::{spawn, OriginOptions, expected_body};
//! let origin = spawn("127.0.0.1:0".parse().unwrap(), OriginOptions::default()).await?;
//! let url = format!("{}/obj/4k/7", origin.url());
//! // ... fetch url through the cache ...
//! assert_eq!(origin.requests_for("/obj/4k/7"), 1);
//! let _ = expected_body(4096, 7);
//! # Ok(()) }
//! ```

mod files;
pub mod pattern;
mod server;

pub use pattern::{BodyMismatch, Pattern, check_body, check_range, expected_body, parse_size};
pub use server::{OriginHandle, OriginOptions, spawn, spawn_blocking};
