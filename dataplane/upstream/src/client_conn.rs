//! What the data plane's server knows of a client request's connection, put into the request's
//! extensions in one insert: what the connection speaks (for the access log and the scheme),
//! the probe of its socket's send queue (stored bodies are paced by it), what TLS negotiated,
//! and the request's 1xx forwarder ([`crate::interim`]).
//!
//! One value rather than one extension each: `http::Extensions` boxes every value into a map
//! that starts with room for three and is rehashed at the fourth, and the router adds two more
//! (the authority and the site). Every request pays for each insert, its box and its drop.

use edgecache_edge::send_room::SendRoom;
use edgecache_edge::tls::TlsInfo;
use edgecache_observe::conn_info::ConnInfo;

use crate::interim::InterimForwarder;

/// A client request's connection, in its extensions (and its clones').
#[derive(Clone)]
pub struct ClientConn {
    /// Its protocol and TLS version.
    pub info: ConnInfo,
    /// Its socket's send queue.
    pub room: SendRoom,
    /// What its TLS handshake negotiated; `None` for plain TCP.
    pub tls: Option<TlsInfo>,
    /// Where the origin's 1xx responses to this request go.
    pub interim: InterimForwarder,
}

impl ClientConn {
    /// The connection of a request head, when the server put one there.
    pub fn of(parts: &http::request::Parts) -> Option<&ClientConn> {
        parts.extensions.get::<ClientConn>()
    }
}
