//! The origin side of the data plane, below the request pipeline: the sites a request's Host
//! picks and their origin pools and query rules ([`sites`]), the pooled origin client with its
//! timeouts, retries and request rewriting ([`origin`]), how it reaches the origins (plain or
//! TLS, HTTP/1.1 or HTTP/2: [`transport`]), the hop-by-hop fields never forwarded
//! ([`hop_by_hop`]), the forwarding of the origin's 1xx responses to the client ([`interim`]),
//! a routed request's cache key ([`key`]) and the errors of a fetch, with whose fault they are
//! ([`error`]).
//!
//! It knows nothing of the layers above: its settings are its own ([`sites::Settings`],
//! [`origin::Settings`]), not the operator's config type, and the metric handles it counts in
//! are registered by the data plane and passed down ([`interim::InterimMetrics`]).

pub mod client_conn;
pub mod error;
pub mod hop_by_hop;
pub mod interim;
pub mod key;
pub mod origin;
pub mod sites;
pub mod transport;
