//! The request pipeline of the data plane, between the connections that take a request
//! (edgecache-edge, the binary's `connection.rs`) and the lower crates it asks: one authority,
//! the route, the key, the policy, coalescing ([`coalesce`]), the fill and what it sends to
//! waiting clients, slices ([`slices`]), repair of a body cut short ([`handler`]), disk streams
//! paced to a client's socket ([`paced`]) under per-address slots ([`stream_slots`],
//! [`slot_grants`]), the response body type ([`body`]), fills answered while their store write
//! lands ([`landing`]), the cache's own compression ([`compress`]), and what every worker
//! shares ([`shared`], with its clock, [`clock`], and its metric handles, [`metrics`]).
//!
//! It knows nothing of the binary above: the binary builds [`shared::Shared`] and each
//! worker's [`handler::Ctx`] (with the policy it maps from the operator contract), registers the
//! metric handles in its registry, and calls [`handler::handle`] for every request.

pub mod body;
pub mod clock;
pub mod coalesce;
pub mod compress;
pub mod handler;
pub mod landing;
pub mod metrics;
pub mod paced;
pub mod shared;
pub mod slices;
pub mod slot_grants;
pub mod stream_slots;

// Modules of the lower crates, under the paths the pipeline's files name them by (as the
// binary did when they were its own).
use edgecache_edge::{client_caps, send_room};
use edgecache_fleet::{peer_auth, ring, sharding};
use edgecache_observe::request_log;
use edgecache_purge::purges;
use edgecache_upstream::{client_conn, error, origin, sites};
