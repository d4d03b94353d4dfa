//! How much of the memory plan's index reserve the store's index may use, and what goes back
//! to the RAM tier. The plan keeps half of what is left after the fixed parts for the index and
//! the connections, whatever the disk; the index of a store never needs more than
//! `index::bytes_for(capacity / 4 KiB)` (a record takes at least one 4 KiB block), so with a
//! small disk in a large pod most of that half would sit unused while the RAM tier is short.
//! A planned RAM tier also pays for the store's side tables (the admission filter and the
//! reinsertion bits, `edgecache_store::side_table_bytes`), fixed at open.

use edgecache_store::index;

/// The index's bound and the RAM tier's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub index_bytes: u64,
    pub ram_tier: u64,
    /// Bytes of the reserve the index cannot use, given to the RAM tier.
    pub given_back: u64,
    /// Bytes the planned RAM tier gave up for the store's side tables.
    pub side_tables: u64,
}

/// Split the plan's `index_reserve` (a quarter of it is the connections'; see
/// `edgecache_host::connections_per_worker`) for a store of `capacity` bytes. Only a RAM tier the
/// plan sized (`ram_planned`, not one set in the config) gets what the index cannot use; with
/// no reserve (no memory limit) the store bounds its index itself. A planned RAM tier then gives
/// up `side_tables` bytes (see the module doc).
pub fn split(
    index_reserve: u64,
    ram_tier: u64,
    ram_planned: bool,
    capacity: u64,
    side_tables: u64,
) -> Split {
    let for_index = index_reserve - index_reserve / 4;
    let need = index::bytes_for(capacity / 4096);
    let (index_bytes, given_back) = if index_reserve == 0 || !ram_planned || need >= for_index {
        (for_index, 0)
    } else {
        (need, for_index - need)
    };
    let ram_tier = ram_tier + given_back;
    let side_tables = if ram_planned {
        side_tables.min(ram_tier)
    } else {
        0
    };
    Split {
        index_bytes,
        ram_tier: ram_tier - side_tables,
        given_back,
        side_tables,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn a_small_disk_gives_the_unused_reserve_to_the_ram_tier() {
        // A 256 MiB pod's plan keeps 48 MiB; a 1 GiB store's index needs about 4 MiB of it.
        let s = split(48 * MIB, 48 * MIB, true, GIB, 0);
        assert_eq!(s.index_bytes, index::bytes_for(GIB / 4096));
        assert!(s.index_bytes < 5 * MIB, "{s:?}");
        assert_eq!(s.ram_tier + s.index_bytes, 48 * MIB + 36 * MIB);
        assert_eq!(s.given_back, 36 * MIB - s.index_bytes);
    }

    #[test]
    fn a_disk_whose_index_needs_it_all_keeps_it_all() {
        // 400 GiB of 4 KiB records (100 million) need more than a 1 GiB reserve holds.
        let s = split(GIB, 2 * GIB, true, 400 * GIB, 0);
        assert_eq!(
            (s.index_bytes, s.ram_tier, s.given_back),
            (GIB - GIB / 4, 2 * GIB, 0)
        );
    }

    #[test]
    fn a_configured_ram_tier_or_no_limit_is_left_alone() {
        assert_eq!(
            split(48 * MIB, 10 * MIB, false, GIB, MIB).ram_tier,
            10 * MIB
        );
        let none = split(0, 64 * MIB, true, GIB, 0);
        assert_eq!((none.index_bytes, none.ram_tier), (0, 64 * MIB));
    }

    #[test]
    fn a_planned_ram_tier_pays_for_the_side_tables() {
        let side =
            edgecache_store::side_table_bytes(2 * GIB, edgecache_store::Admission::SecondHit, true);
        let s = split(48 * MIB, 48 * MIB, true, 2 * GIB, side);
        let without = split(48 * MIB, 48 * MIB, true, 2 * GIB, 0);
        assert_eq!(s.side_tables, side);
        assert_eq!(s.ram_tier + side, without.ram_tier);
        assert_eq!(s.index_bytes, without.index_bytes);
        // Never more than the tier has.
        assert_eq!(split(0, MIB, true, GIB, 4 * MIB).ram_tier, 0);
    }
}
