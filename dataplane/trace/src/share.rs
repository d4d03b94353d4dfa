//! A share of requests, from 0 to 1, decided by a 64-bit draw: how new traces are sampled
//! (src/export.rs) and which requests the access log writes (edgecache_observe::request_log).

/// A share of requests: all, none, or those whose draw is below a threshold (a share of 2^64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Every,
    None,
    Below(u64),
}

impl Share {
    /// The share `share` (at or above 1: every request; at or below 0: none).
    pub fn of(share: f64) -> Share {
        if share >= 1.0 {
            Share::Every
        } else if share > 0.0 {
            // share < 1, so the product is below 2^64.
            Share::Below((share * 18_446_744_073_709_551_616.0) as u64)
        } else {
            Share::None
        }
    }

    /// Whether a request is in the share; `draw` (uniform over u64) is called only when it
    /// decides.
    pub fn admits(self, draw: impl FnOnce() -> u64) -> bool {
        match self {
            Share::Every => true,
            Share::None => false,
            Share::Below(t) => draw() < t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares() {
        assert_eq!(Share::of(1.0), Share::Every);
        assert_eq!(Share::of(2.0), Share::Every);
        assert_eq!(Share::of(0.0), Share::None);
        assert_eq!(Share::of(-1.0), Share::None);
        assert!(!Share::None.admits(|| 0));
        assert!(Share::Every.admits(|| u64::MAX));
        let s = Share::of(0.25);
        let n = 100_000u64;
        // An even spread of draws over u64: a quarter of them is below the threshold.
        let step = u64::MAX / n;
        let hits = (0..n).filter(|i| s.admits(|| i * step)).count();
        let share = hits as f64 / n as f64;
        assert!((0.249..0.251).contains(&share), "{share}");
    }
}
