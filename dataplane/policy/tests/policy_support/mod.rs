//! Helpers shared by the policy test files (`mod policy_support;`).
#![allow(dead_code, clippy::unwrap_used)] // test fixtures: bad input is a bug in the test

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edgecache_policy::StoredResponse;
use http::{HeaderName, HeaderValue, Method, StatusCode, request, response};

/// 2023-11-14T22:13:20Z, a whole second.
pub const T0: u64 = 1_700_000_000;

/// `T0 + secs`.
pub fn at(secs: i64) -> SystemTime {
    let base = UNIX_EPOCH + Duration::from_secs(T0);
    if secs >= 0 {
        base + Duration::from_secs(secs as u64)
    } else {
        base - Duration::from_secs(secs.unsigned_abs())
    }
}

/// IMF-fixdate of `T0 + secs`.
pub fn date(secs: i64) -> String {
    httpdate::fmt_http_date(at(secs))
}

pub fn header_map(fields: &[(&str, &str)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (n, v) in fields {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

pub fn req_with(method: &str, uri: &str, fields: &[(&str, &str)]) -> request::Parts {
    let mut b = http::Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    for (n, v) in fields {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap().into_parts().0
}

pub fn get(fields: &[(&str, &str)]) -> request::Parts {
    req_with("GET", "/r", fields)
}

pub fn resp(status: u16, fields: &[(&str, &str)]) -> response::Parts {
    let mut b = http::Response::builder().status(StatusCode::from_u16(status).unwrap());
    for (n, v) in fields {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A 200 stored at T0 (request sent at T0) from a plain GET.
pub fn stored(fields: &[(&str, &str)]) -> StoredResponse {
    stored_status(200, fields)
}

pub fn stored_status(status: u16, fields: &[(&str, &str)]) -> StoredResponse {
    StoredResponse::new(&get(&[]), &resp(status, fields), at(0), at(0))
}

/// xorshift64*, so the tests need no dependency and are reproducible.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}
