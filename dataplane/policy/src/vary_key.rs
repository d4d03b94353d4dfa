//! The secondary cache key (RFC 9111 4.1): what a response's Vary names ([`Vary`]) and the
//! normalized values a request carries for those fields ([`VaryKey`], [`normalize`]). A leaf
//! under [`super::stored`], which keeps a [`VaryKey`] in each stored response; [`super::vary`]
//! re-exports it and chooses among stored responses with it.

use http::HeaderMap;
use http::header::{ACCEPT, ACCEPT_CHARSET, ACCEPT_ENCODING, ACCEPT_LANGUAGE, HeaderName, VARY};

use super::syntax;

/// What a response's Vary says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vary {
    /// No Vary (or an empty one): every request for the URI matches.
    None,
    /// `Vary: *`: no later request matches (4.1).
    Any,
    /// The request fields the response was selected with, lowercased, deduplicated, in order.
    Fields(Vec<HeaderName>),
}

impl Vary {
    /// Read the Vary field lines of a response. Empty members, repeats and mixed case are
    /// tolerated; a `*` anywhere wins.
    pub fn of(headers: &HeaderMap) -> Self {
        let Some(value) = syntax::combined(headers, VARY) else {
            return Vary::None;
        };
        if syntax::split_list(&value).any(|m| m == "*") {
            return Vary::Any;
        }
        let names = syntax::field_names(&value);
        if names.is_empty() {
            Vary::None
        } else {
            Vary::Fields(names)
        }
    }
}

/// The normalized request values for a response's Vary fields: the secondary key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VaryKey(pub Vec<(HeaderName, Option<Vec<u8>>)>);

impl VaryKey {
    /// The values `request` carries for `names`.
    pub fn for_request(names: &[HeaderName], request: &HeaderMap) -> Self {
        VaryKey(
            names
                .iter()
                .map(|n| (n.clone(), normalize(n, request)))
                .collect(),
        )
    }

    /// True when `request` carries the same normalized values (4.1).
    pub fn matches(&self, request: &HeaderMap) -> bool {
        self.0
            .iter()
            .all(|(name, value)| normalize(name, request) == *value)
    }

    /// A compact byte form for indexing variants: `name:value\n` lines, `name!\n` for absent.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.0 {
            out.extend_from_slice(name.as_str().as_bytes());
            match value {
                Some(v) => {
                    out.push(b':');
                    out.extend_from_slice(v);
                }
                None => out.push(b'!'),
            }
            out.push(b'\n');
        }
        out
    }
}

fn case_insensitive_list(name: &HeaderName) -> bool {
    // (Accept-Encoding is compared by its bucket: `normalize` returns before this.)
    [ACCEPT, ACCEPT_CHARSET, ACCEPT_LANGUAGE].contains(name)
}

/// Normalize one request field for comparison, `None` when the request lacks it.
pub fn normalize(name: &HeaderName, request: &HeaderMap) -> Option<Vec<u8>> {
    if name == ACCEPT_ENCODING {
        // Its bucket, as fills send it ([`super::request::strip_for_fill`]); identity (the
        // field absent, empty, or naming no coding the cache knows) as absent.
        return match super::encoding::negotiate(request, &super::encoding::PREFERENCE) {
            super::encoding::Coding::Identity => None,
            c => Some(c.as_str().as_bytes().to_vec()),
        };
    }
    let mut lines = request.get_all(name).iter().peekable();
    lines.peek()?;
    if !case_insensitive_list(name) {
        // Unknown syntax: only combine lines and trim the ends (whitespace there is never
        // significant, RFC 9110 5.5).
        let mut out = Vec::new();
        for (i, v) in lines.enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(v.as_bytes().trim_ascii());
        }
        return Some(out);
    }
    let mut elements: Vec<String> = Vec::new();
    for v in lines {
        let text = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
        for element in syntax::split_list(&text) {
            // `OWS ";" OWS` around parameters and no whitespace around "=" (RFC 9110 5.6.6).
            let params: Vec<String> = element
                .split(';')
                .map(|p| {
                    let p = p.trim_matches([' ', '\t']);
                    match p.split_once('=') {
                        Some((k, v)) => format!(
                            "{}={}",
                            k.trim_matches([' ', '\t']),
                            v.trim_matches([' ', '\t'])
                        ),
                        None => p.to_string(),
                    }
                })
                .collect();
            elements.push(params.join(";"));
        }
    }
    Some(elements.join(",").into_bytes())
}
