//! The worker's row in the `workers` table (see the store's `workers.rs`), so that the
//! console lists it while it is idle too: registered at start, refreshed every
//! `presence_interval`, deleted by [`run`](crate::run) after a clean drain.
//!
//! Why a slow interval (15 s by default): the row only feeds a page a person reads, and a
//! worker that stops cleanly deletes it at once; only a crashed one lingers, for three
//! intervals, before the page shows it gone. Each refresh is one HOT update of a row of a
//! tiny table, so even a large fleet costs a handful of statements a second.

use std::sync::Arc;

use mcp_tasks_store::WorkerInfo;
use tokio_util::sync::CancellationToken;

use crate::Shared;

/// What this worker says about itself now (the tools of the registry's current snapshot).
fn info(shared: &Shared) -> WorkerInfo {
    let config = &shared.config;
    WorkerInfo {
        id: config.worker_id.clone(),
        tools: shared
            .registry
            .current()
            .names()
            .map(str::to_owned)
            .collect(),
        host: crate::host_name(),
        pid: Some(std::process::id()),
        concurrency: u32::try_from(config.concurrency).unwrap_or(u32::MAX),
        refresh: config.presence_interval,
    }
}

/// Registers, then refreshes until `stop`. A failed write is retried at the next
/// interval; the worker runs on meanwhile (the row is for people, not for correctness).
pub(crate) async fn presence(shared: Arc<Shared>, stop: CancellationToken) {
    let mut registered = false;
    loop {
        let info = info(&shared);
        let written = if registered {
            shared.store.refresh_worker(&info).await
        } else {
            shared.store.register_worker(&info).await
        };
        match written {
            Ok(()) => registered = true,
            Err(e) => {
                tracing::warn!(error = %e, "could not record this worker in the workers table")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(shared.config.presence_interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Deletes the worker's row after a clean shutdown.
pub(crate) async fn deregister(shared: &Shared) {
    if let Err(e) = shared
        .store
        .deregister_worker(&shared.config.worker_id)
        .await
    {
        tracing::warn!(error = %e, "could not delete this worker's row (maintenance will)");
    }
}
