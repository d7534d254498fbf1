//! Which call a message from the upstream belongs to. One connection serves the calls of
//! every tenant and principal a process runs, so what the upstream sends about one call
//! must never reach another principal's.
//!
//! - Progress carries its call's token, and an input request of an upstream task names
//!   that task: those go to exactly that call, or nowhere.
//! - A log message or an input request with no association (a 2025-era stdio upstream has
//!   none to give) goes to the one call open on the connection, and only when no call of
//!   another owner is open there or ended within [`ENDED_GRACE`]: a message sent for a
//!   call that has just ended (or been cancelled while its handler still runs) is dropped
//!   rather than shown to someone else. Calls of the same owner may hear each other's;
//!   they are the same principal's.
//!
//! Every call holds a [`CallGuard`] from before its first request leaves until it ends,
//! so a call between requests (following an upstream task) or about to send one counts
//! as open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ProgressToken, RequestId};
use tokio::sync::mpsc;

use crate::input::Asked;

/// How long a call that ended still keeps unassociated messages from other owners' calls.
pub(crate) const ENDED_GRACE: Duration = Duration::from_secs(5);

/// Input requests waiting for a call's attention at most; more at once are refused.
const QUEUED_INPUTS: usize = 4;

/// What a call hears from the upstream while it runs.
#[derive(Debug)]
pub(crate) enum CallEvent {
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    Log(String),
}

/// Calls in flight on one connection, so notifications and requests from the upstream
/// reach the call they belong to.
#[derive(Default)]
pub(crate) struct InFlight {
    by_token: HashMap<ProgressToken, Entry>,
    /// Every call open on the connection (by guard number): its owner.
    open: HashMap<u64, Option<String>>,
    next_guard: u64,
    /// When a call of each owner last ended here, within [`ENDED_GRACE`].
    ended: HashMap<Option<String>, Instant>,
}

struct Entry {
    request: RequestId,
    owner: Option<String>,
    events: mpsc::UnboundedSender<CallEvent>,
    inputs: mpsc::Sender<Asked>,
    /// The upstream's own task this call follows (`tasks/result`), if any.
    task: Option<String>,
}

impl InFlight {
    pub(crate) fn progress(
        &self,
        token: &ProgressToken,
    ) -> Option<mpsc::UnboundedSender<CallEvent>> {
        self.by_token.get(token).map(|e| e.events.clone())
    }

    /// Where a log message goes: the call of request `id`, or (none given) the lone call.
    pub(crate) fn route_by_request(
        &self,
        id: Option<&RequestId>,
    ) -> Option<mpsc::UnboundedSender<CallEvent>> {
        match id {
            Some(id) => self
                .by_token
                .values()
                .find(|e| &e.request == id)
                .map(|e| e.events.clone()),
            None => self.lone().map(|e| e.events.clone()),
        }
    }

    /// The call an input request belongs to: the one following the upstream task it
    /// names (a request naming a task nobody follows belongs to no call), else the lone
    /// call.
    pub(crate) fn route_input(&self, task: Option<&str>) -> Option<mpsc::Sender<Asked>> {
        let entry = match task {
            Some(task) => self
                .by_token
                .values()
                .find(|e| e.task.as_deref() == Some(task)),
            None => self.lone(),
        };
        entry.map(|e| e.inputs.clone())
    }

    /// The one call an unassociated message can only be meant for, if there is one (see
    /// the module's rule).
    fn lone(&self) -> Option<&Entry> {
        let mut entries = self.by_token.values();
        let (Some(only), None) = (entries.next(), entries.next()) else {
            return None;
        };
        let other_open = self.open.values().any(|o| *o != only.owner);
        let other_ended = self
            .ended
            .iter()
            .any(|(o, at)| *o != only.owner && at.elapsed() < ENDED_GRACE);
        if other_open || other_ended {
            tracing::debug!(
                other_open,
                other_ended,
                "an unassociated message while another principal's call is open or just ended; dropped"
            );
            return None;
        }
        Some(only)
    }

    fn close(&mut self, guard: u64) {
        if let Some(owner) = self.open.remove(&guard) {
            let now = Instant::now();
            self.ended
                .retain(|_, at| now.duration_since(*at) < ENDED_GRACE);
            self.ended.insert(owner, now);
        }
    }
}

/// The calls of one connection, shared by its client side and its tools.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<InFlight>>);

impl Calls {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&InFlight) -> Option<T>) -> Option<T> {
        self.0.lock().ok().and_then(|c| f(&c))
    }

    /// A call of `owner` begins; it counts as open until the guard is dropped.
    pub(crate) fn open(&self, owner: Option<&str>) -> CallGuard {
        let mut id = 0;
        if let Ok(mut calls) = self.0.lock() {
            calls.next_guard += 1;
            id = calls.next_guard;
            calls.open.insert(id, owner.map(str::to_owned));
        }
        CallGuard {
            calls: self.clone(),
            id,
        }
    }

    /// Routes what the upstream sends about the request `request` (progress token
    /// `token`; following the upstream's task `task`, if any) to the caller, a call of
    /// `owner`.
    pub(crate) fn register(
        &self,
        token: ProgressToken,
        request: RequestId,
        task: Option<String>,
        owner: Option<&str>,
    ) -> Registration {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (inputs_tx, inputs) = mpsc::channel(QUEUED_INPUTS);
        if let Ok(mut calls) = self.0.lock() {
            calls.by_token.insert(
                token.clone(),
                Entry {
                    request,
                    owner: owner.map(str::to_owned),
                    events: events_tx,
                    inputs: inputs_tx,
                    task,
                },
            );
        }
        Registration {
            calls: self.clone(),
            token,
            events,
            inputs,
        }
    }
}

/// A call open on the connection; dropping it ends the call.
pub(crate) struct CallGuard {
    calls: Calls,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.calls.0.lock() {
            calls.close(self.id);
        }
    }
}

/// A registration of one request; dropping it stops the routing.
pub(crate) struct Registration {
    calls: Calls,
    token: ProgressToken,
    pub(crate) events: mpsc::UnboundedReceiver<CallEvent>,
    pub(crate) inputs: mpsc::Receiver<Asked>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.calls.0.lock() {
            calls.by_token.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    fn request(n: i64) -> RequestId {
        rmcp::model::NumberOrString::Number(n)
    }

    #[test]
    fn an_unassociated_message_reaches_only_a_lone_call_of_the_only_owner() {
        let calls = Calls::default();
        let a = calls.open(Some("a"));
        let _ra = calls.register(token(1), request(1), None, Some("a"));
        assert!(calls.with(|c| c.route_by_request(None)).is_some());
        // Another owner's call about to send its request: nobody gets it.
        let b = calls.open(Some("b"));
        assert!(calls.with(|c| c.route_by_request(None)).is_none());
        drop(b);
        // Just ended: still nobody.
        assert!(calls.with(|c| c.route_by_request(None)).is_none());
        assert!(calls.with(|c| c.route_input(None)).is_none());
        drop(a);
        // A request naming a task nobody follows belongs to no call.
        let _a2 = calls.open(Some("a"));
        let _r2 = calls.register(token(2), request(2), Some("t1".into()), Some("a"));
        assert!(calls.with(|c| c.route_input(Some("t2"))).is_none());
        assert!(calls.with(|c| c.route_input(Some("t1"))).is_some());
    }

    #[test]
    fn the_same_owners_calls_share() {
        let calls = Calls::default();
        let first = calls.open(Some("a"));
        drop(first);
        let _second = calls.open(Some("a"));
        let _r = calls.register(token(1), request(1), None, Some("a"));
        assert!(calls.with(|c| c.route_by_request(None)).is_some());
    }
}
