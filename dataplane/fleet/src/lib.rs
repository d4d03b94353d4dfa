//! The nodes of one EdgeCache as a fleet, the pure pieces of sharding: the peer list and the
//! rendezvous hash that names each key's owner ([`ring`]), how often a key was asked for lately
//! ([`popularity`]), and the proof a hop from one node to another carries ([`peer_auth`]).
//! No I/O but reading the peer key's file; the data plane's `sharding` module reads and reloads
//! the peers file, keeps peer health and forwards misses with these.

pub mod peer_auth;
pub mod popularity;
pub mod ring;
