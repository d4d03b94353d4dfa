//! Invalidation (RFC 9111 4.4): "A cache MUST invalidate the target URI when it receives a
//! non-error status code in response to an unsafe request method (including methods whose
//! safety is unknown)", and MAY invalidate the URIs in Location and Content-Location, but only
//! on the same origin ("a cache MUST NOT invalidate a URI ... if the host part ... differs").

use http::header::{CONTENT_LOCATION, LOCATION};
use http::{HeaderMap, StatusCode, Uri, request};

use super::key::CacheKey;
use super::request::is_safe;

/// The keys to invalidate after `req` got a response with `status` and `headers`. Empty for
/// safe methods and error statuses (4xx, 5xx) and 1xx.
pub fn targets(
    req: &request::Parts,
    status: StatusCode,
    headers: &HeaderMap,
    default_scheme: &str,
) -> Vec<CacheKey> {
    if is_safe(&req.method) || !(status.is_success() || status.is_redirection()) {
        return Vec::new();
    }
    let Ok(target) = CacheKey::from_parts(req, default_scheme) else {
        return Vec::new();
    };
    let mut keys = vec![target.clone()];
    for name in [LOCATION, CONTENT_LOCATION] {
        let Some(reference) = headers.get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let Some(key) = resolve(target.as_str(), reference.trim())
            .and_then(|s| s.parse::<Uri>().ok())
            .and_then(|u| CacheKey::from_uri(&u).ok())
        else {
            continue;
        };
        if key.origin() == target.origin() && !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Resolve a URI reference against an absolute base URI (RFC 3986 5.2.2), without the fragment.
pub fn resolve(base: &str, reference: &str) -> Option<String> {
    let reference = reference.split('#').next().unwrap_or("");
    let (base_scheme, base_rest) = base.split_once("://")?;
    let (base_authority, base_path_query) = match base_rest.find('/') {
        Some(i) => base_rest.split_at(i),
        None => (base_rest, "/"),
    };
    let base_path = base_path_query.split('?').next().unwrap_or("/");
    let has_scheme = reference.split_once(':').is_some_and(|(s, _)| {
        !s.is_empty()
            && s.as_bytes()[0].is_ascii_alphabetic()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    let out = if has_scheme {
        reference.to_string()
    } else if let Some(rest) = reference.strip_prefix("//") {
        format!("{base_scheme}://{rest}")
    } else if reference.starts_with('/') {
        let (path, query) = split_query(reference);
        format!(
            "{base_scheme}://{base_authority}{}{query}",
            remove_dot_segments(path)
        )
    } else if reference.is_empty() {
        base.to_string()
    } else if reference.starts_with('?') {
        format!("{base_scheme}://{base_authority}{base_path}{reference}")
    } else {
        let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
        let (path, query) = split_query(reference);
        format!(
            "{base_scheme}://{base_authority}{}{query}",
            remove_dot_segments(&format!("{dir}{path}"))
        )
    };
    Some(out)
}

fn split_query(s: &str) -> (&str, &str) {
    match s.find('?') {
        Some(i) => s.split_at(i),
        None => (s, ""),
    }
}

/// RFC 3986 5.2.4, for absolute paths.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing_slash = false;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => trailing_slash = i == last,
            ".." => {
                out.pop();
                trailing_slash = i == last;
            }
            s => {
                out.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut s = String::from("/");
    s.push_str(&out.join("/"));
    if trailing_slash && !s.ends_with('/') {
        s.push('/');
    }
    s
}
