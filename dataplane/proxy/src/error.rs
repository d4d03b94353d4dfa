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

    /// Classify an error of the pooled client.
    pub fn from_client(e: &hyper_util::client::legacy::Error) -> Self {
        let text = error_chain(e);
        if e.is_connect() {
            let timed_out = text.contains("timed out") || text.contains("timeout");
            let kind = if timed_out {
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
}
