//! Proxy errors record whose fault they are, and map in one place to a status code, a clear
//! body and a metric label.

use std::fmt;

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The origin failed, was unreachable or too slow.
    Upstream,
    /// The client sent something we cannot serve.
    Downstream,
    /// Our own fault (config, store).
    Internal,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    OriginConnect,
    OriginTimeout,
    OriginProtocol,
    BadRequest,
    Config,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OriginConnect => "connect",
            Self::OriginTimeout => "timeout",
            Self::OriginProtocol => "protocol",
            Self::BadRequest => "bad_request",
            Self::Config => "config",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProxyError {
    pub kind: Kind,
    pub blame: Blame,
    pub message: String,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for ProxyError {}

impl ProxyError {
    fn new(kind: Kind, blame: Blame, message: impl Into<String>) -> Self {
        Self {
            kind,
            blame,
            message: message.into(),
        }
    }
    pub fn config(m: impl Into<String>) -> Self {
        Self::new(Kind::Config, Blame::Internal, m)
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(Kind::BadRequest, Blame::Downstream, m)
    }
    pub fn origin_timeout(m: impl Into<String>) -> Self {
        Self::new(Kind::OriginTimeout, Blame::Upstream, m)
    }

    /// Classify an error of the pooled client by what its source chain holds, not by its text.
    pub fn from_client(e: &hyper_util::client::legacy::Error) -> Self {
        let text = error_chain(e);
        if e.is_connect() {
            let kind = if has_io_kind(e, std::io::ErrorKind::TimedOut) {
                Kind::OriginTimeout
            } else {
                Kind::OriginConnect
            };
            Self::new(
                kind,
                Blame::Upstream,
                format!("cannot connect to the origin: {text}"),
            )
        } else {
            Self::new(
                Kind::OriginProtocol,
                Blame::Upstream,
                format!("the origin failed: {text}"),
            )
        }
    }

    /// The short fixed text a client gets: never the error chain, which names internal
    /// addresses and library details (those go to the log).
    pub fn public_text(&self) -> &'static str {
        match self.kind {
            Kind::OriginConnect => "the origin cannot be reached",
            Kind::OriginTimeout => "the origin did not answer in time",
            Kind::OriginProtocol => "the origin sent a broken response",
            Kind::BadRequest => "the request cannot be forwarded",
            Kind::Config => "internal error",
        }
    }

    /// The status code the client sees.
    pub fn status(&self) -> http::StatusCode {
        match self.kind {
            Kind::OriginTimeout => http::StatusCode::GATEWAY_TIMEOUT,
            Kind::OriginConnect | Kind::OriginProtocol => http::StatusCode::BAD_GATEWAY,
            Kind::BadRequest => http::StatusCode::BAD_REQUEST,
            Kind::Config => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Whether an `io::Error` of `kind` is somewhere in the source chain of `e`.
fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_maps_to_its_status() {
        assert_eq!(ProxyError::origin_timeout("x").status(), 504);
        assert_eq!(ProxyError::bad_request("x").status(), 400);
        assert_eq!(ProxyError::config("x").status(), 500);
        assert_eq!(
            ProxyError::new(Kind::OriginConnect, Blame::Upstream, "x").status(),
            502
        );
    }

    #[derive(Debug)]
    struct Wrap(std::io::Error);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("tcp connect error")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn io_kinds_are_found_in_the_chain_whatever_the_text() {
        let timed_out = Wrap(std::io::Error::new(std::io::ErrorKind::TimedOut, "zzz"));
        assert!(has_io_kind(&timed_out, std::io::ErrorKind::TimedOut));
        // The words alone do not make a timeout.
        let refused = Wrap(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "timed out, says the text",
        ));
        assert!(!has_io_kind(&refused, std::io::ErrorKind::TimedOut));
    }

    #[test]
    fn public_texts_never_carry_the_message() {
        let e = ProxyError::origin_timeout("connect to 10.0.0.7:8080: secret detail");
        assert!(!e.public_text().contains("10.0.0.7"));
    }
}
