//! The reinsertion thread's wake-up and the keys of the copies in flight: the part of
//! reinsertion (`reinsert`) the [`Store`](crate::Store) holds, so that a reclaim wakes the pass
//! and a durable purge waits for a copy of its key.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::marks::slot_of;

/// The longest a durable purge waits for a copy of its key.
const PURGE_WAIT: Duration = Duration::from_secs(2);

/// The thread's wake-up, and the key slots of copies in flight.
#[derive(Default)]
pub(crate) struct Wake {
    pending: Mutex<bool>,
    woken: Condvar,
    copying: Mutex<HashMap<usize, u32>>,
    copied: Condvar,
    /// The store's reclaim count when the last look began.
    pub(crate) done_at: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Wake {
    /// A segment was reclaimed: look at the next one.
    pub fn wake(&self) {
        *lock(&self.pending) = true;
        self.woken.notify_one();
    }

    /// Whether a wake came within `timeout`.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let g = lock(&self.pending);
        let (mut g, _) = match self.woken.wait_timeout_while(g, timeout, |p| !*p) {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        std::mem::take(&mut *g)
    }

    /// A copy of `primary` is in flight until the guard drops.
    pub(crate) fn copying(&self, primary: &[u8]) -> Copying<'_> {
        let slot = slot_of(primary);
        *lock(&self.copying).entry(slot).or_default() += 1;
        Copying { wake: self, slot }
    }

    /// Wait (at most [`PURGE_WAIT`]) until no copy of `primary`'s slot is in flight.
    pub fn wait_for_copies(&self, primary: &[u8]) {
        let slot = slot_of(primary);
        let g = lock(&self.copying);
        let _ = self
            .copied
            .wait_timeout_while(g, PURGE_WAIT, |c| c.contains_key(&slot));
    }
}

pub(crate) struct Copying<'a> {
    wake: &'a Wake,
    slot: usize,
}

impl Drop for Copying<'_> {
    fn drop(&mut self) {
        let mut g = lock(&self.wake.copying);
        if let Some(n) = g.get_mut(&self.slot) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.slot);
            }
        }
        self.wake.copied.notify_all();
    }
}
