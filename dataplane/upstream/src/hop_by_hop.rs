//! The hop-by-hop fields of a message (RFC 9110 7.6.1), which a proxy never forwards: stripped
//! from the requests sent to an origin, from its responses, and from the 1xx responses passed on
//! to clients (src/interim.rs).

use http::header::{self, HeaderMap, HeaderName};

/// The fields that are hop-by-hop whatever the Connection header says (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Hop-by-hop fields (RFC 9110 7.6.1), and every field the Connection header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none: one pass over the names instead of a removal (a hash and a
    // probe) per hop-by-hop name. A field the Connection header names is stripped only with it.
    if !headers.keys().any(|n| HOP_BY_HOP.contains(n)) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn hop_by_hop_and_connection_listed_fields_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn each_hop_by_hop_field_is_removed_on_its_own() {
        for name in [
            "connection",
            "keep-alive",
            "proxy-authenticate",
            "proxy-authorization",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static("x"));
            h.insert("x-kept", HeaderValue::from_static("yes"));
            strip_hop_by_hop(&mut h);
            assert!(!h.contains_key(name), "{name} removed");
            assert_eq!(h.len(), 1, "{name}: the rest kept");
        }
        // A field named by Connection is end-to-end without it.
        let mut h = HeaderMap::new();
        h.insert("x-secret", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
    }
}
