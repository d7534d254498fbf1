//! A handler's input request that keeps the run (see `mcp_tasks_store::HeldAsk`): shown
//! on the task while the lease is held, then waited for by polling the task row. The
//! answer comes from a `tasks/update` on any replica; reading one row by its key every
//! second at most is cheap next to the time a person takes to answer.

use std::time::Duration;

use mcp_tasks_store::{HeldAnswers, HeldAsk, Lease, WorkerStore};
use mcp_tasks_tools::ContextError;
use mcp_tasks_wire::json::replace_nul;
use serde_json::Value;

/// The first poll comes soon (an answer may already be on its way); then each waits
/// longer, up to [`SLOWEST_POLL`]. Not a retry after failure, so not `Backoff`: the polls
/// slow down while a person takes their time, and held asks start whenever their handlers
/// reach them, so there is no herd for jitter to spread.
const FIRST_POLL: Duration = Duration::from_millis(100);
const SLOWEST_POLL: Duration = Duration::from_secs(1);

pub(crate) async fn ask(
    store: &WorkerStore,
    lease: &Lease,
    requests: &[(String, Value)],
) -> Result<Vec<Value>, ContextError> {
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let requests: Vec<(String, Value)> = requests
        .iter()
        .map(|(k, r)| {
            let mut r = r.clone();
            replace_nul(&mut r);
            (k.replace('\0', "\u{fffd}"), r)
        })
        .collect();
    let keys = match store
        .ask_held(lease, &requests, Some("Waiting for input"))
        .await
    {
        Ok(HeldAsk::Asked(keys)) => keys,
        Ok(HeldAsk::CancelRequested | HeldAsk::Stale) => return Err(ContextError::Interrupted),
        Err(e) => return Err(ContextError::Unavailable(e.to_string())),
    };
    tracing::info!(keys = keys.len(), "waiting for input, holding the task");
    let mut delay = FIRST_POLL;
    loop {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(SLOWEST_POLL);
        match store.held_answers(lease, &keys).await {
            Ok(Some(HeldAnswers::Answered(answers))) => {
                tracing::info!(keys = keys.len(), "input received; going on");
                return Ok(answers);
            }
            Ok(Some(HeldAnswers::Waiting)) => {}
            Ok(None) => return Err(ContextError::Interrupted),
            // A database blip: the lease is the heartbeat's business; keep waiting.
            Err(e) => tracing::warn!(error = %e, "could not read the task for its answers"),
        }
    }
}
