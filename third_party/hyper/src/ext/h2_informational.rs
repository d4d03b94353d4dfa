//! EdgeCache patch (third_party/hyper/PATCHES.md): 1xx informational responses from an HTTP/2
//! server's service, before its final response.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Waker};

use http::Response;

/// A handle to send 1xx informational responses (103 Early Hints, 100 Continue, ...) on the
/// HTTP/2 stream of one request before its final response.
///
/// hyper's HTTP/2 server puts one in every request's extensions. Responses sent with
/// [`InformationalSender::send`] are queued and written by the stream's task on its next poll,
/// in order, ahead of the final response's HEADERS. Once the service has returned its final
/// response (or the stream is gone), [`InformationalSender::send`] refuses.
#[derive(Clone)]
pub struct InformationalSender {
    shared: Arc<Mutex<Queue>>,
}

/// Why an informational response was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InformationalError {
    /// The status is not 1xx (or is 101, which HTTP/2 forbids, RFC 9113 8.6).
    NotInformational,
    /// The final response is already on its way, or the stream is gone.
    Closed,
}

impl fmt::Display for InformationalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InformationalError::NotInformational => "not a 1xx status other than 101",
            InformationalError::Closed => "the final response was already sent",
        })
    }
}

impl std::error::Error for InformationalError {}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Response<()>>,
    waker: Option<Waker>,
    closed: bool,
}

impl fmt::Debug for InformationalSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformationalSender").finish_non_exhaustive()
    }
}

impl InformationalSender {
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::new(Mutex::new(Queue::default())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `response` (its status 1xx, not 101) for the stream; wakes the stream's task.
    pub fn send(&self, response: Response<()>) -> Result<(), InformationalError> {
        let status = response.status();
        if !status.is_informational() || status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(InformationalError::NotInformational);
        }
        let waker = {
            let mut q = self.lock();
            if q.closed {
                return Err(InformationalError::Closed);
            }
            q.pending.push_back(response);
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Whether the final response has not been sent yet, so [`InformationalSender::send`] may
    /// still succeed.
    pub fn is_open(&self) -> bool {
        !self.lock().closed
    }

    /// The stream's side: everything queued so far, and the waker to call on the next send.
    pub(crate) fn take_pending(&self, cx: &Context<'_>) -> VecDeque<Response<()>> {
        let mut q = self.lock();
        match &q.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => q.waker = Some(cx.waker().clone()),
        }
        std::mem::take(&mut q.pending)
    }

    /// The stream's side: the final response goes out (or the stream ended); refuse later sends
    /// and return what was queued but not yet taken.
    pub(crate) fn close(&self) -> VecDeque<Response<()>> {
        let mut q = self.lock();
        q.closed = true;
        q.waker = None;
        std::mem::take(&mut q.pending)
    }
}
