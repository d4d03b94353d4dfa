//! What a request's connection is: the HTTP protocol it speaks and, over TLS, the negotiated
//! TLS version. The data plane's server makes one [`ConnInfo`] per connection and puts a copy
//! into every request's extensions (in edgecache-upstream's `ClientConn`); the handler hands it
//! to the access log (src/request_log.rs).

/// The HTTP protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// What the access log wants to know about a request's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    pub protocol: Protocol,
    /// The negotiated TLS version (`TLSv1.2`, `TLSv1.3`, as nginx's `$ssl_protocol` names
    /// them); `None` for plain TCP.
    pub tls_version: Option<&'static str>,
}

impl ConnInfo {
    /// A plain-TCP connection (no TLS).
    pub const fn plain(protocol: Protocol) -> Self {
        Self {
            protocol,
            tls_version: None,
        }
    }
}

/// The protocol of a request as the access log writes it: `HTTP/2` on an HTTP/2 connection,
/// else the request line's version (`HTTP/1.0`, `HTTP/1.1`).
pub fn protocol_name(conn: Option<&ConnInfo>, version: http::Version) -> &'static str {
    if conn.is_some_and(|c| c.protocol == Protocol::Http2) || version == http::Version::HTTP_2 {
        return "HTTP/2";
    }
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Version;

    #[test]
    fn protocol_names() {
        let h1 = ConnInfo::plain(Protocol::Http1);
        let h2 = ConnInfo::plain(Protocol::Http2);
        assert_eq!(protocol_name(Some(&h1), Version::HTTP_11), "HTTP/1.1");
        assert_eq!(protocol_name(Some(&h1), Version::HTTP_10), "HTTP/1.0");
        assert_eq!(protocol_name(Some(&h2), Version::HTTP_2), "HTTP/2");
        assert_eq!(protocol_name(None, Version::HTTP_2), "HTTP/2");
        assert_eq!(protocol_name(None, Version::HTTP_11), "HTTP/1.1");
    }
}
