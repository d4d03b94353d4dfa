//! Where clients meet the data plane, below the request pipeline: TLS termination on the
//! workers' sockets ([`tls`]: certificates chosen by SNI and reloaded when their files change,
//! handshake caps), the table that maps a hostname to a site or a certificate ([`hosts`]),
//! connection caps per client address ([`client_caps`]), how many more bytes a client's
//! socket should be given now ([`send_room`]), and the timers that close a client connection
//! that is slow or silent ([`conn_timer`]). HTTP/1.1 and HTTP/2 connections are still in the
//! data plane's binary (they reach into the request pipeline).
//!
//! It takes its own settings ([`tls::Settings`], [`conn_timer::Timeouts`]), not the operator's
//! config type.

pub mod client_caps;
pub mod conn_timer;
pub mod hosts;
pub mod send_room;
pub mod tls;
