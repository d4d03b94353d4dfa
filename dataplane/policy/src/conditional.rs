//! Clients' conditional requests answered from storage (RFC 9111 4.3.2; RFC 9110 13.1, 13.2).
//!
//! A cache evaluates If-None-Match and If-Modified-Since against the stored response it selected;
//! If-None-Match takes precedence. If-Match and If-Unmodified-Since "are not applicable to a
//! cache" (4.3.2): [`super::serve::decide`] forwards requests that carry them.

use std::time::SystemTime;

use http::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, Method};

use super::stored::StoredResponse;
use super::syntax::{self, EntityTag};

/// The result of evaluating a client's preconditions against a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Send 304 Not Modified (with [`super::headers::not_modified`]).
    NotModified,
    /// No precondition applies or it is false for a GET: send the stored response.
    Serve,
}

impl Precondition {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Precondition::NotModified => "not-modified",
            Precondition::Serve => "serve",
        }
    }
}

/// Evaluate If-None-Match, else If-Modified-Since (RFC 9110 13.2.2 steps 3 and 4), for a GET or
/// HEAD answered with `stored`.
pub fn evaluate(method: &Method, request: &HeaderMap, stored: &StoredResponse) -> Precondition {
    if *method != Method::GET && *method != Method::HEAD {
        return Precondition::Serve;
    }
    if request.contains_key(IF_NONE_MATCH) {
        return if none_match_fails(request, stored.headers()) {
            Precondition::NotModified
        } else {
            Precondition::Serve
        };
    }
    // RFC 9110 13.1.3: ignore an invalid date or a field with several members.
    let mut lines = request.get_all(IF_MODIFIED_SINCE).iter();
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return Precondition::Serve;
    };
    let Some(since) = line.to_str().ok().and_then(syntax::http_date) else {
        return Precondition::Serve;
    };
    if last_modified(stored) <= since {
        Precondition::NotModified
    } else {
        Precondition::Serve
    }
}

/// True when If-None-Match's condition is false: `*`, or a listed tag that matches the stored
/// entity tag by weak comparison (RFC 9110 13.1.2).
fn none_match_fails(request: &HeaderMap, stored: &HeaderMap) -> bool {
    let stored_tag = stored
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .and_then(EntityTag::parse);
    for line in request.get_all(IF_NONE_MATCH) {
        let Ok(line) = line.to_str() else { continue };
        for member in syntax::split_list(line) {
            if member == "*" {
                return true;
            }
            if let (Some(tag), Some(stored)) = (EntityTag::parse(member), &stored_tag)
                && tag.weak_eq(stored)
            {
                return true;
            }
        }
    }
    false
}

/// The stored response's modification time for If-Modified-Since (4.3.2): Last-Modified, else
/// Date, else the time it was received.
fn last_modified(stored: &StoredResponse) -> SystemTime {
    stored
        .basis()
        .last_modified
        .unwrap_or_else(|| stored.date_value())
}
