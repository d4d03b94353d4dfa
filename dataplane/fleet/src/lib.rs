//! The nodes of one EdgeCache as a fleet: the peer list and the rendezvous hash that names each
//! key's owner ([`ring`]), how often a key was asked for lately ([`popularity`]), and the proof a
//! hop from one node to another carries ([`peer_auth`]), all pure but for reading the peer key's
//! file; and [`sharding`], which holds them for every worker: it reads and reloads the peers
//! file, keeps peer health (probing down peers) and makes the client for the other nodes. The
//! data plane's request pipeline forwards misses with it.
//!
//! It takes its own settings ([`sharding::Settings`]), not the operator's config type, and the
//! metric handles it counts in are registered by the data plane and passed down
//! ([`sharding::ShardingMetrics`]).

pub mod peer_auth;
pub mod popularity;
pub mod ring;
pub mod sharding;
