//! The data plane's notion of `now`. Policy decisions take `now` as an argument; the server asks
//! this clock. Tests of freshness move it forward through the admin endpoint
//! (`POST /debug/clock?advance=SECONDS`), which exists only when the process was started with
//! `EDGECACHE_DEBUG_CLOCK=1`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

#[derive(Debug, Default)]
pub struct Clock {
    offset_secs: AtomicU64,
    adjustable: bool,
}

impl Clock {
    /// A clock that tests may move when `EDGECACHE_DEBUG_CLOCK=1`.
    pub fn from_env() -> Self {
        Self {
            offset_secs: AtomicU64::new(0),
            adjustable: std::env::var_os("EDGECACHE_DEBUG_CLOCK").is_some_and(|v| v == "1"),
        }
    }

    pub fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.offset_secs.load(Ordering::Relaxed))
    }

    pub fn adjustable(&self) -> bool {
        self.adjustable
    }

    /// Move the clock forward; refused unless adjustable.
    pub fn advance(&self, secs: u64) -> bool {
        if self.adjustable {
            self.offset_secs.fetch_add(secs, Ordering::Relaxed);
        }
        self.adjustable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_adjustable_clock_moves() {
        let fixed = Clock::default();
        assert!(!fixed.advance(60));
        let c = Clock {
            offset_secs: AtomicU64::new(0),
            adjustable: true,
        };
        let before = c.now();
        assert!(c.advance(60));
        assert!(c.now().duration_since(before).unwrap() >= Duration::from_secs(60));
    }
}
