//! Purges, below the request pipeline and beside the store: the rules a purge call adds (by URL,
//! prefix, tag or everything, soft or hard), the index a lookup checks a stored response against,
//! and the file in the cache directory that keeps them across restarts ([`purges`]).
//!
//! Not in `policy`, which is pure and does no I/O, nor in `store`, which never imports `policy`
//! (a rule is checked against a `policy::StoredResponse`): its own crate above `policy`. It takes
//! plain arguments (the cache directory, the most rules in force, the store's segment epochs),
//! not the operator's config type.

pub mod purges;
