//! Where clients meet the data plane, below the request pipeline: TLS termination on the
//! workers' sockets ([`tls`]: certificates chosen by SNI and reloaded when their files change,
//! handshake caps), the table that maps a hostname to a site or a certificate ([`hosts`]),
//! connection caps per client address ([`client_caps`]), and how many more bytes a client's
//! socket should be given now ([`send_room`]). HTTP/1.1 and HTTP/2 connections and their timers
//! are still in the data plane's binary (they reach into the request pipeline).
//!
//! It takes its own settings ([`tls::Settings`]), not the operator's config type.

pub mod client_caps;
pub mod hosts;
pub mod send_room;
pub mod tls;
