//! Fills whose client has been answered while their store write is still landing
//! (`handler/fill.rs`: the disk is not on the client's path). The admin calls that read or
//! change what is stored (`/metrics`, `PURGE`, `POST /purge`) first wait, for a bounded time,
//! for the writes of the fills answered before them: a purge after a response finds the
//! object that response stored, and the metrics count it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The fills in their landing window.
#[derive(Debug, Default)]
pub struct Landing {
    state: Mutex<State>,
    landed: Notify,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    open: BTreeSet<u64>,
}

/// One fill in its landing window; it has landed when this is dropped.
#[derive(Debug)]
pub struct Pending {
    landing: Arc<Landing>,
    seq: u64,
}

impl Landing {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fill is answered before its store write lands.
    pub fn begin(self: &Arc<Self>) -> Pending {
        let mut s = self.state();
        let seq = s.next;
        s.next += 1;
        s.open.insert(seq);
        Pending {
            landing: self.clone(),
            seq,
        }
    }

    /// Wait until every fill answered before this call has landed, at most `within` (a disk
    /// whose writes hang does not hang the caller); false if some had not.
    pub async fn settled(&self, within: Duration) -> bool {
        let upto = self.state().next;
        let wait = async {
            loop {
                let notified = self.landed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.state().open.first().is_none_or(|&first| first >= upto) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.landing.state().open.remove(&self.seq);
        self.landing.landed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settling_waits_for_the_fills_answered_before_it_only() {
        let l = Arc::new(Landing::default());
        assert!(l.settled(Duration::ZERO).await, "nothing pending");
        let first = l.begin();
        let short = Duration::from_millis(20);
        assert!(!l.settled(short).await, "bounded: gives up");
        let waiter = {
            let l = l.clone();
            tokio::spawn(async move { l.settled(Duration::from_secs(10)).await })
        };
        tokio::task::yield_now().await;
        // Begun after the call: not waited for.
        let _later = l.begin();
        drop(first);
        assert!(waiter.await.unwrap());
        assert!(
            !l.settled(short).await,
            "a call now waits for the later one"
        );
    }
}
