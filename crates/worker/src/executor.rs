//! One run of one task: build the handler's context, run it, record the outcome under
//! the lease.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_observe::otel;
use mcp_tasks_observe::record as observe;
use mcp_tasks_store::{Claimed, Finish, InputOutcome, Lease, Store};
use mcp_tasks_tools::{
    BoxFuture, ContextError, Outcome, TaskSink, ToolContext, ToolError, ToolResult,
};
use mcp_tasks_wire::json::replace_nul;
use mcp_tasks_wire::service_messages::EndReason;
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::{Running, Shared, StopReason};

/// The outcome of a run whose lease was lost: nothing it did was recorded.
const LOST: &str = "lost";

/// Status messages longer than this are cut; they are for humans.
const MAX_STATUS_CHARS: usize = 1000;

pub(crate) fn spawn(shared: &Arc<Shared>, claimed: Claimed, permit: OwnedSemaphorePermit) {
    let lease = claimed.lease.clone();
    let cancel = CancellationToken::new();
    let reason = Arc::new(Mutex::new(None));
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
            let outcome = run(&shared2, claimed, cancel, reason).await;
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
    let outcome: Option<ToolResult> = tokio::select! {
        joined = &mut handle => Some(flatten(joined)),
        () = cancel.cancelled() => {
            match tokio::time::timeout(shared.config.cancel_grace, &mut handle).await {
                Ok(joined) => Some(flatten(joined)),
                Err(_) => {
                    tracing::warn!("handler ignored cancellation; aborted");
                    handle.abort();
                    None
                }
            }
        }
    };
    let stop = *reason.lock().unwrap_or_else(|e| e.into_inner());

    if stop == Some(StopReason::LeaseLost) {
        tracing::warn!("lease lost; this run's outcome is discarded");
        return LOST;
    }
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

/// Retries a lease write through database blips, for at most one lease length (after
/// that the lease has lapsed and the write would be refused anyway).
async fn retry<T, F, Fut>(store: &Store, lease: &Lease, within: Duration, op: F) -> Option<T>
where
    F: Fn(Store, Lease) -> Fut,
    Fut: Future<Output = mcp_tasks_store::Result<T>>,
{
    let give_up = tokio::time::Instant::now() + within;
    let mut delay = Duration::from_millis(50);
    loop {
        match op(store.clone(), lease.clone()).await {
            Ok(v) => return Some(v),
            Err(e) if tokio::time::Instant::now() + delay < give_up => {
                tracing::warn!(error = %e, retry_ms = delay.as_millis() as u64, "lease write failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::error!(error = %e, "lease write failed; giving up");
                return None;
            }
        }
    }
}

/// A handler's side effects, written only while the lease is held.
struct LeaseSink {
    store: Store,
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
