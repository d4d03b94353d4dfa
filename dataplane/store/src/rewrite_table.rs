//! The table of in-place header rewrites in progress that the [`Store`](crate::Store) holds; how
//! rewrites and the readers that overlap them use it is `rewrite`'s.

use std::collections::HashSet;

use crate::state::LocId;

/// The rewrites in progress, and a counter bumped at each begin and end.
#[derive(Debug, Default)]
pub(crate) struct Rewrites {
    pub(crate) counter: u64,
    pub(crate) in_progress: HashSet<LocId>,
}
