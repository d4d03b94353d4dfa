//! A site's origin pool, shared by every worker: which origins are in it, how a request picks
//! one, and the retry budget.
//!
//! Health: `unhealthyAfter` failures in a row (failed active checks, or requests that got no
//! connection or lost it before a response head) take an origin out; `healthyAfter` passed
//! active checks in a row put it back. Without active checks an origin out of the pool is
//! given one request again after `interval` (half-open), and stays in if it answers. When every
//! origin is out, requests still go to them in turn: a pool that is all down answers with the
//! origins' own errors rather than refusing.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How a request picks an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    /// The fewest requests waiting on the origin for a response head.
    LeastConnections,
}

/// The health rules of a pool.
#[derive(Debug, Clone, Copy)]
pub struct HealthRules {
    pub unhealthy_after: u32,
    pub healthy_after: u32,
    /// How long an origin out of the pool waits for its half-open try (passive checks only).
    pub retry_after: Duration,
    pub active: bool,
}

/// One origin of a pool.
#[derive(Debug)]
pub struct Member {
    /// `host:port` as the URL gave it.
    pub authority: String,
    healthy: AtomicBool,
    fails: AtomicU32,
    passes: AtomicU32,
    /// When it went out of the pool (ms since the pool's epoch).
    out_since_ms: AtomicU64,
    in_flight: AtomicU32,
}

/// A pool of origins.
#[derive(Debug)]
pub struct Pool {
    members: Vec<Member>,
    balance: Balance,
    rules: HealthRules,
    next: AtomicUsize,
    epoch: Instant,
    budget: RetryBudget,
    retries: AtomicU64,
}

impl Pool {
    pub fn new(authorities: Vec<String>, balance: Balance, rules: HealthRules) -> Self {
        Self {
            members: authorities
                .into_iter()
                .map(|authority| Member {
                    authority,
                    healthy: AtomicBool::new(true),
                    fails: AtomicU32::new(0),
                    passes: AtomicU32::new(0),
                    out_since_ms: AtomicU64::new(0),
                    in_flight: AtomicU32::new(0),
                })
                .collect(),
            balance,
            rules,
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
            budget: RetryBudget::default(),
            retries: AtomicU64::new(0),
        }
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// A request is sent again to another member.
    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests sent again so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether member `i` may take a request now: in the pool, or out of it long enough for a
    /// half-open try (passive checks only; that try takes the slot for another wait).
    fn usable(&self, i: usize) -> bool {
        let m = &self.members[i];
        if m.healthy.load(Ordering::Acquire) {
            return true;
        }
        if self.rules.active {
            return false;
        }
        let now = self.now_ms();
        let since = m.out_since_ms.load(Ordering::Acquire);
        now >= since + self.rules.retry_after.as_millis() as u64
            && m.out_since_ms
                .compare_exchange(since, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The member a request goes to, not one of `tried`; `None` when every member was tried.
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.members.len();
        let candidates = || (0..n).filter(|i| !tried.contains(i));
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let usable: Option<usize> = match self.balance {
            Balance::RoundRobin => (0..n)
                .map(|k| (start + k) % n)
                .filter(|i| !tried.contains(i))
                .find(|&i| self.usable(i)),
            Balance::LeastConnections => {
                // Ties go round robin, so equal members share the load.
                let order = (0..n)
                    .map(|k| (start + k) % n)
                    .filter(|i| !tried.contains(i));
                order
                    .filter(|&i| self.members[i].healthy.load(Ordering::Acquire))
                    .min_by_key(|&i| self.members[i].in_flight.load(Ordering::Relaxed))
                    .or_else(|| candidates().find(|&i| self.usable(i)))
            }
        };
        usable.or_else(|| {
            // Every member is out: still try them in turn.
            (0..n).map(|k| (start + k) % n).find(|i| !tried.contains(i))
        })
    }

    /// A request on member `i` is waiting for its response head until the guard drops.
    pub fn begin(&self, i: usize) -> InFlight<'_> {
        self.members[i].in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight { pool: self, i }
    }

    /// What a request or a check saw of member `i`: `ok` is a response head.
    pub fn report(&self, i: usize, ok: bool, active_check: bool) {
        let m = &self.members[i];
        if ok {
            m.fails.store(0, Ordering::Release);
            if m.healthy.load(Ordering::Acquire) {
                return;
            }
            // A request that got an answer (half-open) puts it back; active checks count.
            let passes = m.passes.fetch_add(1, Ordering::AcqRel) + 1;
            if !active_check || passes >= self.rules.healthy_after {
                m.healthy.store(true, Ordering::Release);
                m.passes.store(0, Ordering::Release);
            }
        } else {
            m.passes.store(0, Ordering::Release);
            let fails = m.fails.fetch_add(1, Ordering::AcqRel) + 1;
            if fails >= self.rules.unhealthy_after && m.healthy.swap(false, Ordering::AcqRel) {
                m.out_since_ms.store(self.now_ms(), Ordering::Release);
            } else if !m.healthy.load(Ordering::Acquire) {
                // A failed half-open try: wait again from now.
                m.out_since_ms.store(self.now_ms(), Ordering::Release);
            }
        }
    }

    pub fn is_healthy(&self, i: usize) -> bool {
        self.members[i].healthy.load(Ordering::Acquire)
    }
}

/// Holds a member's in-flight count.
pub struct InFlight<'a> {
    pool: &'a Pool,
    i: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.pool.members[self.i]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Retries allowed: each request adds a fifth of a retry, up to [`RetryBudget::CAP`] kept, so
/// retries stay within a fifth of the requests and a pool that is all down is not hit twice
/// as hard.
#[derive(Debug)]
pub struct RetryBudget {
    /// Fifths of a retry.
    fifths: AtomicU32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            // Some room at start, so the first failures after a start can retry.
            fifths: AtomicU32::new(Self::CAP * 5),
        }
    }
}

impl RetryBudget {
    /// Retries kept at most.
    pub const CAP: u32 = 10;

    /// A request was made.
    pub fn deposit(&self) {
        let _ = self
            .fifths
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |f| {
                (f < Self::CAP * 5).then_some(f + 1)
            });
    }

    /// Take one retry; false when there is none left.
    pub fn withdraw(&self) -> bool {
        self.fifths
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |f| f.checked_sub(5))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, balance: Balance, active: bool) -> Pool {
        Pool::new(
            (0..n).map(|i| format!("o{i}:80")).collect(),
            balance,
            HealthRules {
                unhealthy_after: 2,
                healthy_after: 2,
                retry_after: Duration::from_millis(50),
                active,
            },
        )
    }

    #[test]
    fn round_robin_skips_an_origin_out_of_the_pool_and_the_tried_ones() {
        let p = pool(3, Balance::RoundRobin, true);
        let picks: Vec<usize> = (0..6).map(|_| p.pick(&[]).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        p.report(1, false, false);
        assert!(p.is_healthy(1), "one failure is not enough");
        p.report(1, false, false);
        assert!(!p.is_healthy(1));
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&[]).unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        assert_eq!(p.pick(&[0, 2]), Some(1), "out, but the only one not tried");
        assert_eq!(p.pick(&[0, 1, 2]), None);
        // Active checks put it back after two passes.
        p.report(1, true, true);
        assert!(!p.is_healthy(1));
        p.report(1, true, true);
        assert!(p.is_healthy(1));
    }

    #[test]
    fn without_active_checks_an_origin_out_gets_one_try_after_the_wait() {
        let p = pool(2, Balance::RoundRobin, false);
        p.report(0, false, false);
        p.report(0, false, false);
        assert!((0..4).all(|_| p.pick(&[]) == Some(1)));
        std::thread::sleep(Duration::from_millis(60));
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&[]).unwrap()).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 0).count(), 1, "{picks:?}");
        // It answered: back in.
        p.report(0, true, false);
        assert!(p.is_healthy(0));
    }

    #[test]
    fn least_connections_picks_the_least_busy() {
        let p = pool(3, Balance::LeastConnections, true);
        let _a = p.begin(0);
        let _b = p.begin(0);
        let _c = p.begin(1);
        assert_eq!(p.pick(&[]), Some(2));
        let _d = p.begin(2);
        let _e = p.begin(2);
        assert_eq!(p.pick(&[]), Some(1));
        drop(_a);
        drop(_b);
        assert_eq!(p.pick(&[]), Some(0));
    }

    #[test]
    fn a_pool_all_down_still_answers_in_turn() {
        let p = pool(2, Balance::RoundRobin, true);
        for i in 0..2 {
            p.report(i, false, false);
            p.report(i, false, false);
        }
        let picks: Vec<usize> = (0..4).map(|_| p.pick(&[]).unwrap()).collect();
        assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn the_retry_budget_is_a_fifth_of_the_requests() {
        let b = RetryBudget::default();
        let mut taken = 0;
        while b.withdraw() {
            taken += 1;
        }
        assert_eq!(taken, RetryBudget::CAP);
        for _ in 0..50 {
            b.deposit();
        }
        let mut again = 0;
        while b.withdraw() {
            again += 1;
        }
        assert_eq!(again, 10);
        for _ in 0..4 {
            b.deposit();
        }
        assert!(!b.withdraw(), "four requests are not a retry");
    }
}
