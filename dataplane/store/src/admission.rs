//! Admission: which fills are written to the disk (issue 15 item 4, "kind to the flash").
//!
//! With [`Admission::SecondHit`] a fill is written only when its key was missed recently, or
//! while the store has room (it holds less than its capacity less two segments: a write then
//! evicts nothing that was asked for). Once the store is full the first miss of a key is
//! served (and coalesced) but not written, so one-hit wonders, which a CDN trace is full of,
//! stop reaching the flash. Admitting everything while there is room added 2.0 points of byte
//! hit ratio at 2 GiB and 0.5 at 512 MiB on the replayed workload (`bench/BENCHMARKS.md`). "Recently" is a doorkeeper: a Bloom filter of the
//! keys missed since it was last cleared (3 hashes, 10 bits per key: about 1% false positives
//! when full), cleared once it has recorded a window of keys, like the doorkeeper of
//! `bench/workload/simulate.py` (whose figures chose the window). The window is twice the
//! store's object capacity: its capacity over the mean record size of what it holds (16 KiB
//! until it holds something), taken again at every clear, so a key is admitted when it comes
//! back within about two cache lifetimes of misses. While the store holds less than 7/8 of its
//! capacity the window goes on instead of ending (up to the keys the filter was sized for):
//! there, admitting a key that came back evicts little, and a 2 GiB store replaying
//! `bench/BENCHMARKS.md`'s trace otherwise never filled. (A first version took twice the objects
//! held now: while the store filled, that window was so short that the replay of
//! `bench/BENCHMARKS.md` admitted 5.6% of the missed bytes and never filled a 2 GiB store.)
//!
//! The filter's bits are sized once from the store's capacity over 4 KiB records (the most
//! objects it can hold), within [`MAX_FILTER_BYTES`]: a 2 GiB store takes 1.25 MiB, 10 GiB
//! 6.25 MiB, and from 27 GiB on the filter stays at 16 MiB (windows past 13 million keys then
//! see more false positives, which admit a little more, never less).
//!
//! A key that has a stored variant is always admitted (a refetch of an expired or revalidated
//! object, a new variant): it has proved it comes back.

use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

/// Which misses the store writes (`storage.admission`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admission {
    /// Every storable miss.
    All,
    /// While the store has room, every storable miss; once it is full, a miss whose key was
    /// missed recently (see the module doc): one-hit wonders stay off the disk, at the cost of
    /// one more miss for every key that does come back.
    #[default]
    SecondHit,
}

impl Admission {
    pub fn as_str(self) -> &'static str {
        match self {
            Admission::All => "all",
            Admission::SecondHit => "second-hit",
        }
    }
}

/// Bits per key of the window (about 1% false positives with 3 hashes).
const BITS_PER_KEY: u64 = 10;
const HASHES: u64 = 3;
/// The filter never takes more than this.
pub const MAX_FILTER_BYTES: u64 = 16 << 20;
/// The mean record size assumed until the store holds something.
const FIRST_MEAN_RECORD: u64 = 16 << 10;
/// Nor is it ever below this.
const MIN_WINDOW: u64 = 1024;

/// Bytes of the doorkeeper's filter for a store of `capacity` bytes (see the module doc).
pub fn filter_bytes(capacity: u64) -> u64 {
    let bits = 2u64
        .saturating_mul(capacity / 4096)
        .saturating_mul(BITS_PER_KEY)
        .clamp(1 << 16, MAX_FILTER_BYTES * 8);
    bits.div_ceil(64) * 8
}

/// The doorkeeper: a Bloom filter of recently missed keys, cleared every window.
#[derive(Debug)]
pub(crate) struct Doorkeeper {
    inner: Mutex<Filter>,
    capacity: u64,
}

#[derive(Debug)]
struct Filter {
    words: Vec<u64>,
    /// Keys recorded since the last clear.
    added: u64,
    /// Keys to record before the next clear.
    window: u64,
    clears: u64,
}

impl Doorkeeper {
    /// A doorkeeper for a store of `capacity` bytes.
    pub fn new(capacity: u64) -> Doorkeeper {
        let mut f = Filter {
            words: vec![0; (filter_bytes(capacity) / 8) as usize],
            added: 0,
            window: 0,
            clears: 0,
        };
        f.window = Self::window_for(capacity, (0, 0), f.bits());
        Doorkeeper {
            inner: Mutex::new(f),
            capacity,
        }
    }

    /// Twice the object capacity, from the store's (bytes used, objects) now.
    fn window_for(capacity: u64, (used, objects): (u64, u64), bits: u64) -> u64 {
        let mean = if objects > 0 && used > 0 {
            used / objects
        } else {
            FIRST_MEAN_RECORD
        };
        (2 * capacity / mean.max(1))
            .max(MIN_WINDOW)
            .min(bits / BITS_PER_KEY)
    }

    /// Whether `key` was recorded since the last clear; records it if not. `usage` gives the
    /// store's (bytes used, objects), asked at a clear to size the next window.
    pub fn seen_or_add(&self, key: &[u8], usage: impl FnOnce() -> (u64, u64)) -> bool {
        let (h1, h2) = hashes(key);
        let mut f = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let m = f.bits();
        let pos = |i: u64| h1.wrapping_add(i.wrapping_mul(h2)) % m;
        if (0..HASHES).all(|i| f.get(pos(i))) {
            return true;
        }
        for i in 0..HASHES {
            f.set(pos(i));
        }
        f.added += 1;
        if f.added >= f.window {
            let usage = usage();
            let next = Self::window_for(self.capacity, usage, m);
            // While the store has room, admitting a key that came back evicts little: the
            // window goes on (as far as the filter was sized for) instead of forgetting.
            let room = usage.0 < self.capacity / 8 * 7;
            if room && f.added + next <= m / BITS_PER_KEY {
                f.window = f.added + next;
            } else {
                f.words.iter_mut().for_each(|w| *w = 0);
                f.added = 0;
                f.clears += 1;
                f.window = next;
            }
        }
        false
    }

    /// RAM bytes of the filter.
    pub fn bytes(&self) -> u64 {
        filter_bytes(self.capacity)
    }

    /// Bytes of the filter, and the window now.
    #[cfg(test)]
    pub fn size(&self) -> (u64, u64) {
        let f = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        (f.words.len() as u64 * 8, f.window)
    }
}

impl Filter {
    fn bits(&self) -> u64 {
        self.words.len() as u64 * 64
    }
    fn get(&self, p: u64) -> bool {
        self.words[(p / 64) as usize] & (1 << (p % 64)) != 0
    }
    fn set(&mut self, p: u64) {
        self.words[(p / 64) as usize] |= 1 << (p % 64);
    }
}

/// Two independent 64-bit hashes of `key` for double hashing (the second odd).
fn hashes(key: &[u8]) -> (u64, u64) {
    // Fixed keys: the same key hashes the same in every worker and every run.
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write(key);
    let h1 = h.finish();
    (h1, splitmix64(h1) | 1)
}

fn splitmix64(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The doorkeeper's key for a fill: primary and variant.
pub(crate) fn fill_key(primary: &[u8], variant: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(primary.len() + variant.len() + 1);
    k.extend_from_slice(primary);
    k.push(0xff);
    k.extend_from_slice(variant);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_sight_is_seen_and_the_window_forgets() {
        // 64 MiB: bits for 32,768 keys; the first window is 2 * 64 MiB / 16 KiB.
        let dk = Doorkeeper::new(64 << 20);
        assert_eq!(dk.size().1, 8192);
        assert!(!dk.seen_or_add(b"a", || (0, 0)));
        assert!(dk.seen_or_add(b"a", || (0, 0)));
        // New keys fill the window (8191 more, plus the few false positives, which are not
        // recorded) and clear it: `a` is forgotten.
        let mut i = 0u32;
        // A store 7/8 full: the window ends.
        let held = || (56 << 20, (56 << 20) / (20 << 10));
        while dk.size().1 == 8192 {
            dk.seen_or_add(format!("k{i}").as_bytes(), held);
            i += 1;
        }
        assert!((8191..8191 + 100).contains(&i), "{i}");
        assert!(
            !dk.seen_or_add(b"a", held),
            "cleared after a window of keys"
        );
        // The next window is twice the capacity over the mean record held (20 KiB).
        assert_eq!(dk.size().1, 6553);
    }

    #[test]
    fn while_the_store_has_room_the_window_goes_on() {
        let dk = Doorkeeper::new(64 << 20);
        assert!(!dk.seen_or_add(b"a", || (0, 0)));
        // A window of keys (8192) goes by while the store is half full: `a` is remembered.
        let half = || (32 << 20, (32 << 20) / (16 << 10));
        for i in 0..9000u32 {
            dk.seen_or_add(format!("k{i}").as_bytes(), half);
        }
        assert!(dk.size().1 > 9000, "the window went on: {:?}", dk.size());
        assert!(dk.seen_or_add(b"a", half), "remembered past one window");
        // Only as far as the filter was sized for (2 * 64 MiB / 4 KiB keys): then it forgets.
        for i in 9000..40_000u32 {
            dk.seen_or_add(format!("k{i}").as_bytes(), half);
        }
        assert!(
            !dk.seen_or_add(b"a", half),
            "forgotten once the filter is full"
        );
    }

    #[test]
    fn the_filter_is_bounded() {
        assert_eq!(Doorkeeper::new(2 << 30).size().0, 1310720);
        assert_eq!(Doorkeeper::new(1 << 40).size().0, MAX_FILTER_BYTES);
        assert_eq!(Doorkeeper::new(0).size().0, 8192);
    }
}
