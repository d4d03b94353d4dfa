//! Interim 1xx responses from the origin (RFC 9110 15.2): forwarded or dropped, never stored
//! ([`super::storable::storable`] refuses them, RFC 9111 3: "the response status code is final").

use http::{StatusCode, Version};

/// What the proxy does with a 1xx from the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterimAction {
    /// Send it to the client, then keep waiting for the final response.
    Forward,
    /// Swallow it and keep waiting for the final response.
    Drop,
}

impl InterimAction {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            InterimAction::Forward => "forward",
            InterimAction::Drop => "drop",
        }
    }
}

/// Decide for one interim response. `client_expects_continue` is whether the client itself sent
/// `Expect: 100-continue`.
///
/// * Never to an HTTP/1.0 client (15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0
///   client").
/// * 100 Continue only when the client asked for it; otherwise the proxy asked (15.2: "unless the
///   proxy itself requested the generation of the 1xx response").
/// * 101 Switching Protocols is not a hop this proxy can forward: upgrades bypass the cache.
/// * Any other 1xx (102, 103 Early Hints, unknown ones) is forwarded (15.2: "A proxy MUST forward
///   1xx responses").
pub fn action(status: StatusCode, client: Version, client_expects_continue: bool) -> InterimAction {
    if !status.is_informational() || client < Version::HTTP_11 {
        return InterimAction::Drop;
    }
    match status {
        StatusCode::CONTINUE if client_expects_continue => InterimAction::Forward,
        StatusCode::CONTINUE | StatusCode::SWITCHING_PROTOCOLS => InterimAction::Drop,
        _ => InterimAction::Forward,
    }
}
