//! One run of one task: build the handler's context, run it, record the outcome under
//! the lease.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_observe::otel;
use mcp_tasks_observe::record as observe;
use mcp_tasks_store::{Claimed, Finish, InputOutcome, Lease, WorkerStore};
use mcp_tasks_tools::{
    BoxFuture, ContextError, Outcome, TaskSink, ToolContext, ToolError, ToolResult,
};
use mcp_tasks_wire::backoff::Backoff;
use mcp_tasks_wire::json::replace_nul;
use mcp_tasks_wire::service_messages::EndReason;
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::{Running, Shared, StopReason};

/// The outcome of a run whose lease was lost: nothing it did was recorded.
const LOST: &str = "lost";

/// Status messages longer than this are cut; they are for humans.
const MAX_STATUS_CHARS: usize = 1000;

/// How long before its lease runs out (as this worker knows it) a run whose lease no
/// heartbeat could extend is cancelled: a quarter of the lease, by when the two
/// heartbeats before and their retries have failed.
fn cancel_margin(lease: Duration) -> Duration {
    lease / 4
}

/// How long before its lease runs out a cancelled handler that has not stopped is aborted.
fn abort_margin(lease: Duration) -> Duration {
    lease / 10
}

/// Starts the run of a task claimed by a statement sent at `claim_sent`.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    claimed: Claimed,
    permit: OwnedSemaphorePermit,
    claim_sent: Instant,
) {
    let lease = claimed.lease.clone();
    let cancel = CancellationToken::new();
    let reason = Arc::new(Mutex::new(None));
    let (expires, expiry) = watch::channel(claim_sent + shared.config.lease);
    let earlier = shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            lease.id,
            Running {
                lease: lease.clone(),
                cancel: cancel.clone(),
                reason: reason.clone(),
                expires,
                abort: None,
            },
        );
    if let Some(earlier) = earlier {
        // This worker reclaimed its own task, whose earlier lease lapsed (a database
        // outage outlasted it): that run can no longer write, so stop it.
        tracing::warn!(task = %lease.id, "reclaimed a task this worker was still running; stopping the older run");
        earlier.stop(StopReason::LeaseLost);
    }
    let span = tracing::info_span!(
        "task.run",
        task_id = %lease.id,
        tool = %claimed.task.tool,
        attempt = claimed.task.attempt,
        trace_id = %trace_id(claimed.task.trace_context.as_ref()),
        otel.kind = "consumer",
        otel.name = %format!("task.run {}", claimed.task.tool),
    );
    // The run belongs to the trace of the request that created the task, however long
    // ago and on whichever replica that was.
    otel::continue_stored_trace(&span, claimed.task.trace_context.as_ref());
    let pickup = (time::OffsetDateTime::now_utc() - claimed.runnable_since)
        .try_into()
        .unwrap_or_default();
    observe::task_claimed(pickup, claimed.reclaimed);
    let shared2 = shared.clone();
    let tool = claimed.task.tool.clone();
    let handle = shared.tracker.spawn(
        async move {
            let started = std::time::Instant::now();
            let outcome = run(&shared2, claimed, cancel, reason, expiry).await;
            observe::task_run(&tool, outcome, started.elapsed());
            // However it was found out (a heartbeat, a refused write), the run ended
            // because its lease was no longer this worker's.
            if outcome == LOST {
                observe::lease_lapsed();
            }
            let mut running = shared2.running.lock().unwrap_or_else(|e| e.into_inner());
            // Only this run's entry: a newer lease of the same task may have replaced it.
            if running
                .get(&lease.id)
                .is_some_and(|r| r.lease.token == lease.token)
            {
                running.remove(&lease.id);
            }
            drop(running);
            drop(permit);
            // A slot is free again.
            shared2.wake.notify_one();
        }
        .instrument(span),
    );
    if let Some(run) = shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&lease.id)
        .filter(|r| r.lease.token == lease.token)
    {
        run.abort = Some(handle.abort_handle());
    }
}

/// The trace id of a stored W3C `traceparent` (`00-<trace>-<span>-<flags>`).
fn trace_id(context: Option<&Value>) -> &str {
    context
        .and_then(|c| c.get("traceparent"))
        .and_then(Value::as_str)
        .and_then(|tp| tp.split('-').nth(1))
        .unwrap_or("-")
}

/// One run; returns how it ended, for `mcp_tasks_task_duration_seconds{outcome}`.
async fn run(
    shared: &Shared,
    claimed: Claimed,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
    expiry: watch::Receiver<Instant>,
) -> &'static str {
    let Claimed {
        lease,
        task,
        reclaimed,
        ..
    } = claimed;
    if reclaimed {
        tracing::warn!("reclaimed after the previous worker's lease lapsed");
    } else {
        tracing::info!("claimed");
    }
    let store = &shared.store;

    let Some(tool) = shared.registry.current().get(&task.tool).cloned() else {
        // Claims are filtered by tool, so only a tool that went away between the claim and
        // now (an upstream's list changed) gets here.
        tracing::error!(tool = %task.tool, "no such tool on this worker");
        let error = ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!("Tool {:?} is not available on the workers", task.tool),
        );
        return record(shared, &lease, Finish::Failed(error), Some("Failed")).await;
    };

    if reclaimed && !tool.idempotent {
        // The earlier run may have done its work (or part of it) before its worker died;
        // running it again could do it twice.
        let error = ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!(
                "The worker running this task was lost, and tool {:?} is not marked idempotent, so it was not run again",
                task.tool
            ),
        )
        .with_data(serde_json::json!({ "reason": "WORKER_LOST_NOT_IDEMPOTENT" }));
        tracing::warn!("a lost run of a non-idempotent tool: failed, not run again");
        return record(shared, &lease, Finish::Failed(error), Some("Failed")).await;
    }

    let mut ctx = ToolContext::builder(task.arguments);
    if let Some(Value::Object(caps)) = task.client_capabilities {
        ctx = ctx.client_capabilities(mcp_tasks_wire::ClientCapabilities(caps));
    }
    let ctx = ctx
        .responses(task.input_responses)
        .checkpoint(task.checkpoint)
        .task_id(lease.id.to_string())
        .owner(&task.owner.tenant, &task.owner.principal)
        .attempt(u32::try_from(task.attempt).unwrap_or(1))
        .trace_context(handler_trace_context(task.trace_context))
        .cancellation(cancel.clone())
        .sink(Arc::new(LeaseSink {
            store: store.clone(),
            lease: lease.clone(),
        }))
        .build();

    // The handler runs in its own task so a panic is contained and so it can be aborted
    // if it ignores cancellation; on the worker's tracker, so the drain waits for it too.
    let mut handle = AbortOnDropHandle::new(shared.tracker.spawn(tool.run(ctx).in_current_span()));
    // Without a heartbeat to extend it, the lease runs out; another worker may then claim
    // the task and run it again, so this run must have stopped by then (whatever the
    // handler is doing beyond the database, such as a call to an upstream server).
    let lease_length = shared.config.lease;
    let mut watched = expiry.clone();
    let outcome: Option<ToolResult> = tokio::select! {
        joined = &mut handle => Some(flatten(joined)),
        () = cancel.cancelled() => stop_handler(shared, &mut handle, expiry.clone()).await,
        () = lease_ends(&mut watched, cancel_margin(lease_length)) => {
            tracing::warn!(
                lease_ms = lease_length.as_millis() as u64,
                left_ms = cancel_margin(lease_length).as_millis() as u64,
                "no heartbeat has reached the database to extend this run's lease, which runs out soon: stopping the run, because once it has, another worker may claim the task and run it again"
            );
            reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(StopReason::LeaseRunningOut);
            cancel.cancel();
            stop_handler(shared, &mut handle, expiry.clone()).await
        }
    };
    let stop = *reason.lock().unwrap_or_else(|e| e.into_inner());

    if stop == Some(StopReason::LeaseLost) {
        tracing::warn!("lease lost; this run's outcome is discarded");
        return LOST;
    }
    // Cancelled because the lease ran short, not because the client asked.
    let outcome = match outcome {
        Some(Ok(Outcome::Cancelled)) if stop == Some(StopReason::LeaseRunningOut) => {
            Some(Err(ToolError::Interrupted))
        }
        other => other,
    };
    let finish = match outcome {
        Some(Ok(Outcome::Complete(mut result))) => {
            // Whatever a tool returns must be storable.
            replace_nul(&mut result);
            Finish::Completed(shared.config.server_info.stamped_call_tool_result(result))
        }
        Some(Ok(Outcome::Cancelled)) => Finish::Cancelled,
        Some(Ok(Outcome::NeedInput(requests))) => {
            if requests.is_empty() {
                Finish::Failed(ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "Tool {:?} asked for input without any input request",
                        task.tool
                    ),
                ))
            } else {
                let mut requests = Value::Object(requests.into_map());
                replace_nul(&mut requests);
                let requests = match requests {
                    Value::Object(m) => m,
                    _ => serde_json::Map::new(),
                };
                match request_input(shared, &lease, &requests).await {
                    Some(InputOutcome::Applied) => {
                        tracing::info!(keys = requests.len(), "waiting for input");
                        return "input_required";
                    }
                    Some(InputOutcome::CancelRequested) => Finish::Cancelled,
                    Some(InputOutcome::KeyReused(keys)) => Finish::Failed(ErrorObject::new(
                        codes::INTERNAL_ERROR,
                        format!(
                            "Tool {:?} asked for input under keys it had already used: {}",
                            task.tool,
                            keys.join(", ")
                        ),
                    )),
                    Some(InputOutcome::Stale) | None => {
                        tracing::warn!("lease lost before the input request was recorded");
                        return LOST;
                    }
                }
            }
        }
        Some(Err(ToolError::Protocol(mut error))) => {
            error.message = error.message.replace('\0', "\u{fffd}");
            if let Some(data) = error.data.as_mut() {
                replace_nul(data);
            }
            Finish::Failed(error)
        }
        Some(Err(ToolError::Interrupted)) | None => match stop {
            Some(StopReason::CancelRequested) => Finish::Cancelled,
            Some(StopReason::LeaseRunningOut) => return give_back(shared, &lease).await,
            Some(StopReason::Shutdown) => {
                match retry(store, &lease, shared.config.lease, |s, l| async move {
                    s.release(&l).await
                })
                .await
                {
                    Some(true) => tracing::info!(
                        "released for another worker (or cancelled, if that was requested meanwhile)"
                    ),
                    _ => tracing::warn!("could not release; the lease will lapse instead"),
                }
                return "released";
            }
            // The handler said it lost the task (its writes were refused).
            Some(StopReason::LeaseLost) | None => {
                tracing::warn!("run interrupted without a reason; outcome discarded");
                return LOST;
            }
        },
    };
    // A progress message ("3 of 5 done") would be stale on a finished task.
    let message = match &finish {
        Finish::Completed(_) => "Completed",
        Finish::Failed(_) => "Failed",
        Finish::Cancelled => EndReason::CancelledByClient.status_message(),
    };
    record(shared, &lease, finish, Some(message)).await
}

/// Resolves once the lease is within `margin` of running out, as this worker knows it,
/// with no heartbeat having extended it since.
async fn lease_ends(expiry: &mut watch::Receiver<Instant>, margin: Duration) {
    loop {
        let at = *expiry.borrow_and_update();
        let at = at.checked_sub(margin).unwrap_or(at);
        tokio::select! {
            () = tokio::time::sleep_until(at) => return,
            changed = expiry.changed() => {
                // The run's entry is gone (a newer lease of the task replaced it, and
                // stopped this run): the last expiry stands.
                if changed.is_err() {
                    tokio::time::sleep_until(at).await;
                    return;
                }
            }
        }
    }
}

/// After cancellation the handler has `cancel_grace` to stop by itself, and no longer
/// than its lease lets it; then it is aborted.
async fn stop_handler(
    shared: &Shared,
    handle: &mut AbortOnDropHandle<ToolResult>,
    mut expiry: watch::Receiver<Instant>,
) -> Option<ToolResult> {
    tokio::select! {
        joined = &mut *handle => return Some(flatten(joined)),
        () = tokio::time::sleep(shared.config.cancel_grace) => {
            tracing::warn!("handler ignored cancellation; aborted");
        }
        () = lease_ends(&mut expiry, abort_margin(shared.config.lease)) => {
            tracing::warn!("handler still running as its lease runs out; aborted");
        }
    }
    handle.abort();
    None
}

/// Gives back the task of a run stopped because its lease ran short, as soon as the
/// database answers: fenced by the lease, so it lands only if nobody has claimed the task
/// meanwhile, and then it counts no attempt (as a release at shutdown). Meanwhile the
/// heartbeats go on, and take back a lease that lapsed unclaimed. Tried for two leases;
/// after that the lease lapses for good and the next claim counts an attempt.
async fn give_back(shared: &Shared, lease: &Lease) -> &'static str {
    let released = retry_paced(
        &shared.store,
        lease,
        shared.config.lease * 2,
        crate::HEARTBEAT_RETRY,
        |s, l| async move { s.release(&l).await },
    )
    .await;
    match released {
        Some(true) => {
            tracing::info!(
                "gave the task back after its lease ran short: it runs again from the start, counting no attempt (or is cancelled, if that was requested meanwhile)"
            );
            "released"
        }
        Some(false) => {
            tracing::warn!("the lease ran out and the task was claimed again meanwhile");
            LOST
        }
        None => {
            tracing::warn!(
                "could not give the task back; its lease lapses, and the next claim counts an attempt"
            );
            LOST
        }
    }
}

/// What the handler passes on: the execution span's own context when traces are
/// exported (so the services it calls are children of this run), else the stored one.
fn handler_trace_context(stored: Option<Value>) -> serde_json::Map<String, Value> {
    if let Some(own) = otel::span_context(&tracing::Span::current()) {
        return own
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
    }
    match stored {
        Some(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

fn flatten(joined: Result<ToolResult, tokio::task::JoinError>) -> ToolResult {
    joined.unwrap_or_else(|e| {
        tracing::error!(error = %e, "tool handler panicked");
        Err(ToolError::Protocol(ErrorObject::new(
            codes::INTERNAL_ERROR,
            "The tool failed unexpectedly",
        )))
    })
}

/// Records how the run ended; returns the outcome label (`lost` when it was not written).
async fn record(
    shared: &Shared,
    lease: &Lease,
    finish: Finish,
    message: Option<&'static str>,
) -> &'static str {
    let store = &shared.store;
    let status = match &finish {
        Finish::Completed(_) => "completed",
        Finish::Failed(_) => "failed",
        Finish::Cancelled => "cancelled",
    };
    let finish = Arc::new(finish);
    let written = retry(store, lease, shared.config.lease, |s, l| {
        let finish = finish.clone();
        async move { s.finish(&l, &finish, message).await }
    })
    .await;
    match written {
        Some(true) => {
            tracing::info!(status, "finished");
            status
        }
        Some(false) => {
            tracing::warn!(
                status,
                "lease lost before the outcome was recorded; discarded"
            );
            LOST
        }
        None => {
            tracing::error!(
                status,
                "could not record the outcome; the lease will lapse and the task run again"
            );
            LOST
        }
    }
}

async fn request_input(
    shared: &Shared,
    lease: &Lease,
    requests: &serde_json::Map<String, Value>,
) -> Option<InputOutcome> {
    let requests = Arc::new(requests.clone());
    retry(&shared.store, lease, shared.config.lease, |s, l| {
        let requests = requests.clone();
        async move {
            s.request_input(&l, &requests, Some("Waiting for input"), None)
                .await
        }
    })
    .await
}

/// Retries a lease write through database blips, for at most `within` (a lease length:
/// by then the lease has lapsed, and someone else may have claimed the task).
async fn retry<T, F, Fut>(store: &WorkerStore, lease: &Lease, within: Duration, op: F) -> Option<T>
where
    F: Fn(WorkerStore, Lease) -> Fut,
    Fut: Future<Output = mcp_tasks_store::Result<T>>,
{
    retry_paced(store, lease, within, Duration::from_secs(2), op).await
}

/// [`retry`], with the pause between attempts doubling up to `pace`. Each attempt is
/// bounded too: a statement on a connection that hangs is given up on at the end.
async fn retry_paced<T, F, Fut>(
    store: &WorkerStore,
    lease: &Lease,
    within: Duration,
    pace: Duration,
    op: F,
) -> Option<T>
where
    F: Fn(WorkerStore, Lease) -> Fut,
    Fut: Future<Output = mcp_tasks_store::Result<T>>,
{
    let give_up = Instant::now() + within;
    let mut backoff = Backoff::new(Duration::from_millis(50), pace);
    loop {
        match tokio::time::timeout_at(give_up, op(store.clone(), lease.clone())).await {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(e)) => {
                let delay = backoff.next_delay();
                if Instant::now() + delay >= give_up {
                    tracing::error!(error = %e, "lease write failed; giving up");
                    return None;
                }
                tracing::warn!(error = %e, retry_ms = delay.as_millis() as u64, "lease write failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(_) => {
                tracing::error!("lease write got no answer in time; giving up");
                return None;
            }
        }
    }
}

/// A handler's side effects, written only while the lease is held.
struct LeaseSink {
    store: WorkerStore,
    lease: Lease,
}

impl TaskSink for LeaseSink {
    fn set_status<'a>(&'a self, message: &'a str) -> BoxFuture<'a, Result<(), ContextError>> {
        Box::pin(async move {
            let message: String = message
                .chars()
                .take(MAX_STATUS_CHARS)
                .map(|c| if c == '\0' { '\u{fffd}' } else { c })
                .collect();
            match self.store.set_status_message(&self.lease, &message).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(ContextError::Interrupted),
                Err(e) => Err(ContextError::Unavailable(e.to_string())),
            }
        })
    }

    fn save_checkpoint<'a>(
        &'a self,
        checkpoint: &'a Value,
    ) -> BoxFuture<'a, Result<(), ContextError>> {
        Box::pin(async move {
            let mut checkpoint = checkpoint.clone();
            replace_nul(&mut checkpoint);
            match self.store.save_checkpoint(&self.lease, &checkpoint).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(ContextError::Interrupted),
                Err(e) => Err(ContextError::Unavailable(e.to_string())),
            }
        })
    }

    fn ask<'a>(
        &'a self,
        requests: &'a [(String, Value)],
    ) -> BoxFuture<'a, Result<Vec<Value>, ContextError>> {
        Box::pin(crate::held::ask(&self.store, &self.lease, requests))
    }
}
