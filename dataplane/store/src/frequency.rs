//! How often each object was asked for recently: the RAM tier's admission filter.
//!
//! A count-min sketch (four rows of small saturating counters, the minimum of an object's four
//! counters is its estimate) with periodic halving, as in TinyLFU (Einziger, Friedman and Manes,
//! "TinyLFU: A Highly Efficient Cache Admission Policy", 2017). Estimates may be too high
//! (collisions), never too low within a window. Counters stop at [`MAX_COUNT`]; after
//! `sample` increments every counter is halved, so the sketch forgets old popularity and an
//! object must stay popular to stay ahead.
//!
//! Pure data structure: no locking (the tier's lock covers it), no I/O, no clock.

use std::hash::Hasher;

/// A counter's ceiling (4 bits' worth).
pub const MAX_COUNT: u8 = 15;
const ROWS: usize = 4;

pub(crate) struct FrequencySketch {
    /// `ROWS` rows of `mask + 1` counters.
    counters: Vec<u8>,
    mask: usize,
    increments: u64,
}

/// The sketch's hash of a record key (primary, variant).
pub(crate) fn key_hash(primary: &[u8], variant: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(primary);
    h.write_u8(0xff);
    h.write(variant);
    h.finish()
}

impl FrequencySketch {
    /// A sketch sized for about `items` distinct objects in a window: each row has the next
    /// power of two at or above `4 * items` counters (at least 1024, at most 2^20).
    pub fn for_items(items: u64) -> FrequencySketch {
        let width = (items.saturating_mul(4).clamp(1 << 10, 1 << 20) as usize).next_power_of_two();
        FrequencySketch {
            counters: vec![0; ROWS * width],
            mask: width - 1,
            increments: 0,
        }
    }

    /// Heap bytes of the counters.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    fn slots(&self, hash: u64) -> [usize; ROWS] {
        // Double hashing: row i uses h1 + i * h2 (h2 odd, so the rows' slots differ).
        let h1 = hash as usize;
        let h2 = (hash.rotate_left(32).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1) as usize;
        let width = self.mask + 1;
        std::array::from_fn(|i| i * width + (h1.wrapping_add(i.wrapping_mul(h2)) & self.mask))
    }

    /// The estimated count of `hash` in the current window.
    pub fn estimate(&self, hash: u64) -> u8 {
        self.slots(hash)
            .iter()
            .map(|&s| self.counters[s])
            .min()
            .unwrap_or(0)
    }

    /// Count one more access. Conservative update: only the counters at the current minimum
    /// grow, which keeps collisions from inflating everyone. Every `sample` increments
    /// (at least 64) all counters are halved.
    pub fn increment(&mut self, hash: u64, sample: u64) {
        let slots = self.slots(hash);
        let min = slots.iter().map(|&s| self.counters[s]).min().unwrap_or(0);
        if min < MAX_COUNT {
            for s in slots {
                if self.counters[s] == min {
                    self.counters[s] += 1;
                }
            }
        }
        self.increments += 1;
        if self.increments >= sample.max(64) {
            self.age();
        }
    }

    /// Halve every counter (start a new window that remembers half of the last one).
    fn age(&mut self) {
        for c in &mut self.counters {
            *c >>= 1;
        }
        self.increments = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_to_the_ceiling() {
        let mut s = FrequencySketch::for_items(100);
        let h = key_hash(b"a", b"");
        assert_eq!(s.estimate(h), 0);
        for i in 1..=20u8 {
            s.increment(h, u64::MAX);
            assert_eq!(s.estimate(h), i.min(MAX_COUNT));
        }
        assert_eq!(s.estimate(key_hash(b"a", b"v")), 0, "another variant");
    }

    #[test]
    fn halves_every_sample() {
        let mut s = FrequencySketch::for_items(100);
        let hot = key_hash(b"hot", b"");
        for _ in 0..12 {
            s.increment(hot, 100);
        }
        assert_eq!(s.estimate(hot), 12);
        // 88 more increments of others reach the sample of 100: everything halves.
        for i in 0..88 {
            s.increment(key_hash(format!("o{i}").as_bytes(), b""), 100);
        }
        assert_eq!(s.estimate(hot), 6);
    }

    #[test]
    fn hot_keys_stand_out_of_a_crowd() {
        // 50 hot keys asked 20 times each among 20,000 one-off keys, in a sketch sized for
        // 5,000: collisions never make a one-off key look as hot as a hot one.
        let mut s = FrequencySketch::for_items(5_000);
        let sample = 1 << 40;
        for round in 0..20 {
            for i in 0..50 {
                s.increment(key_hash(format!("hot{i}").as_bytes(), b""), sample);
            }
            for i in 0..1_000 {
                let k = format!("cold{round}-{i}");
                s.increment(key_hash(k.as_bytes(), b""), sample);
            }
        }
        let hot_min = (0..50)
            .map(|i| s.estimate(key_hash(format!("hot{i}").as_bytes(), b"")))
            .min();
        let cold_max = (0..20)
            .flat_map(|r| (0..1_000).map(move |i| format!("cold{r}-{i}")))
            .map(|k| s.estimate(key_hash(k.as_bytes(), b"")))
            .max();
        assert_eq!(hot_min, Some(MAX_COUNT));
        assert!(cold_max.unwrap_or(0) <= 3, "{cold_max:?}");
    }

    #[test]
    fn sized_by_items() {
        assert_eq!(FrequencySketch::for_items(0).bytes(), 4 * 1024);
        assert_eq!(FrequencySketch::for_items(3_000).bytes(), 4 * 16_384);
        assert_eq!(FrequencySketch::for_items(u64::MAX).bytes(), 4 << 20);
    }
}
