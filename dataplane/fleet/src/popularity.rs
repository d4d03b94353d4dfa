//! How often a key was asked for lately, approximately: a count-min sketch shared by the
//! workers, halved once per window, so a count is about the requests of the last window plus
//! half those of the one before (TinyLFU's reset, on a clock instead of a sample count, so the
//! threshold reads as "N requests within a window"). A count can be too high (two keys share
//! every counter; with 2^16 counters a row that takes thousands of distinct keys a window),
//! never too low: an object is at worst kept on one node more than needed.
//!
//! Fixed size: [`DEPTH`] x [`WIDTH`] 32-bit counters, 1 MiB, allocated only when sharding is on.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ring::mix64;

const DEPTH: usize = 4;
const WIDTH: usize = 1 << 16;
/// Each row's own seed, so two keys that collide in one row rarely collide in another.
const SEEDS: [u64; DEPTH] = [
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7344,
    0xA409_3822_299F_31D0,
    0x082E_FA98_EC4E_6C89,
];

pub struct Popularity {
    rows: Vec<Box<[AtomicU32]>>,
    window: Duration,
    started: Instant,
    /// The window the counters were last halved for.
    epoch: AtomicU64,
}

impl Popularity {
    pub fn new(window: Duration, now: Instant) -> Self {
        let rows = (0..DEPTH)
            .map(|_| (0..WIDTH).map(|_| AtomicU32::new(0)).collect())
            .collect();
        Popularity {
            rows,
            window: window.max(Duration::from_millis(1)),
            started: now,
            epoch: AtomicU64::new(0),
        }
    }

    /// Count one request for the key whose hash is `key`; the key's count, this one included.
    pub fn record(&self, key: u64, now: Instant) -> u32 {
        self.age(now);
        let mut count = u32::MAX;
        for (row, seed) in self.rows.iter().zip(SEEDS) {
            let i = (mix64(key ^ seed) as usize) & (WIDTH - 1);
            let prev = row[i].fetch_add(1, Ordering::Relaxed);
            count = count.min(prev.saturating_add(1));
        }
        count
    }

    /// Halve every counter once for each window that began since the last halving (all of
    /// them to zero after a long quiet spell). One caller does it; a request counted meanwhile
    /// may be halved or not, which an approximate count can afford.
    fn age(&self, now: Instant) {
        let windows =
            now.saturating_duration_since(self.started).as_nanos() / self.window.as_nanos();
        let epoch = u64::try_from(windows).unwrap_or(u64::MAX);
        let last = self.epoch.load(Ordering::Relaxed);
        if epoch <= last
            || self
                .epoch
                .compare_exchange(last, epoch, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let shift = u32::try_from(epoch - last).unwrap_or(u32::MAX).min(31);
        for row in &self.rows {
            for c in row.iter() {
                let v = c.load(Ordering::Relaxed);
                c.store(v >> shift, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::key_hash;

    #[test]
    fn counts_requests_per_key() {
        let t0 = Instant::now();
        let p = Popularity::new(Duration::from_secs(60), t0);
        let (a, b) = (key_hash(b"a"), key_hash(b"b"));
        for i in 1..=5 {
            assert_eq!(p.record(a, t0), i);
        }
        assert_eq!(p.record(b, t0), 1);
    }

    #[test]
    fn counts_halve_each_window_and_fade_after_a_quiet_spell() {
        let t0 = Instant::now();
        let w = Duration::from_secs(10);
        let p = Popularity::new(w, t0);
        let k = key_hash(b"k");
        for _ in 0..8 {
            p.record(k, t0);
        }
        // 8 halved to 4, plus this one.
        assert_eq!(p.record(k, t0 + w), 5);
        // Three windows later: 5 >> 3 = 0, plus this one.
        assert_eq!(p.record(k, t0 + 4 * w), 1);
    }

    #[test]
    fn many_other_keys_rarely_lift_a_cold_one() {
        let t0 = Instant::now();
        let p = Popularity::new(Duration::from_secs(60), t0);
        for i in 0..20_000u32 {
            p.record(key_hash(&i.to_le_bytes()), t0);
        }
        let lifted = (0..1000u32)
            .filter(|i| p.record(key_hash(format!("cold {i}").as_bytes()), t0) > 1)
            .count();
        assert!(
            lifted < 10,
            "{lifted} of 1000 cold keys counted more than once"
        );
    }
}
