//! The worker's long-running loops.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_tasks_observe::record as observe;
use mcp_tasks_store::{ClaimLimits, Event, EventKind, EventsConfig, TaskId};
use mcp_tasks_tools::Registry;
use mcp_tasks_wire::backoff::Backoff;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{HEARTBEAT_RETRY, Shared, StopReason, executor};

/// While the queue has a backlog, how long a claim waits for more slots to come free, so
/// that one claim takes several tasks instead of one statement per finished task.
const CLAIM_LINGER: Duration = Duration::from_millis(1);

/// Claims work whenever a slot is free, until `shutdown`.
pub(crate) async fn claim(shared: Arc<Shared>, shutdown: CancellationToken) {
    let config = &shared.config;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    // The last claim got all it asked for: more is probably waiting.
    let mut backlog = false;
    // The tools, the key of their wake-up duty and the limits of the claims, as of the
    // registry snapshot seen.
    let mut cached: Option<(Registry, Vec<String>, i32, ClaimLimits)> = None;
    // Why the next claim runs (for `mcp_tasks_claim_statements_total`).
    let mut cause = observe::ClaimCause::Start;
    loop {
        // Wait for one free slot, then take every other free slot too.
        let first = tokio::select! {
            permit = shared.slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        if backlog && shared.slots.available_permits() + 1 < config.concurrency / 2 {
            tokio::select! {
                () = tokio::time::sleep(CLAIM_LINGER) => {}
                () = shutdown.cancelled() => return,
            }
        }
        let mut permits = vec![first];
        while let Ok(p) = shared.slots.clone().try_acquire_owned() {
            permits.push(p);
        }
        let wanted = permits.len();

        // Only tasks this worker can run: the others wait for a worker that has their tool.
        // The list is built again only when the registry changed.
        let registry = shared.registry.current();
        if !cached
            .as_ref()
            .is_some_and(|(seen, ..)| seen.same_snapshot(&registry))
        {
            let names: Vec<String> = registry.names().map(str::to_owned).collect();
            let key = mcp_tasks_store::duty_key(&names);
            let limits = mcp_tasks_tools::claim_limits(&config.scheduling, &registry);
            cached = Some((registry, names, key, limits));
        }
        let none = ClaimLimits::default();
        let (tools, duty_key, limits): (&[String], Option<i32>, &ClaimLimits) = cached
            .as_ref()
            .map_or((&[], None, &none), |(_, names, key, limits)| {
                (names, Some(*key), limits)
            });
        if tools.is_empty() {
            // No tool at all (upstreams not answering yet): claim nothing rather than
            // everything, which is what an empty filter would mean.
            drop(permits);
            shared.want_duty.send_if_modified(|w| w.take().is_some());
            tokio::select! {
                () = tokio::time::sleep(config.poll_interval) => {}
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        observe::claim_statement(cause);
        // The leases run from when the statement starts, which is after this.
        let sent = Instant::now();
        let claimed = match shared
            .store
            .claim_within(
                &config.worker_id,
                wanted as i64,
                config.lease_ms(),
                tools,
                limits,
            )
            .await
        {
            Ok(claimed) => {
                backoff.reset();
                claimed
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_ms = delay.as_millis() as u64, "claim failed");
                drop(permits);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        let got = claimed.len();
        backlog = got == wanted;
        // Idle with free slots and nothing more queued for us: queue for the wake-up
        // duty. Busy: let another idle worker have it.
        let want = if backlog { None } else { duty_key };
        shared
            .want_duty
            .send_if_modified(|w| std::mem::replace(w, want) != want);
        cause = observe::ClaimCause::Backlog;
        for task in claimed {
            let Some(permit) = permits.pop() else { break };
            executor::spawn(&shared, task, permit, sent);
        }
        drop(permits);

        if got < wanted {
            // Drained what was runnable: sleep until notified, or poll as a backstop
            // (notifications can be lost).
            cause = tokio::select! {
                () = shared.wake.notified() => observe::ClaimCause::Notified,
                () = tokio::time::sleep(config.poll_interval) => observe::ClaimCause::Poll,
                () = shutdown.cancelled() => return,
            };
        }
    }
}

/// Extends held leases every third of a lease; tells handlers whose lease was lost or
/// whose task was cancelled.
///
/// When the database cannot be reached, the heartbeat retries every [`HEARTBEAT_RETRY`]
/// (each attempt bounded, so a connection that hangs is given up on), and handlers go on
/// while their leases last: a run whose lease no heartbeat extended is stopped before it
/// runs out (see `executor.rs`). Once the database is back, leases nobody claimed
/// meanwhile are extended again (a lapsed lease keeps its token until someone claims the
/// task); leases claimed by others are not in the reply, and their runs are stopped then.
pub(crate) async fn heartbeat(shared: Arc<Shared>, stop: CancellationToken) {
    let config = &shared.config;
    let every = config.lease / 3;
    let mut failing = false;
    loop {
        let pause = if failing {
            HEARTBEAT_RETRY.min(every)
        } else {
            every
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
        let leases = shared.held_leases();
        if leases.is_empty() {
            failing = false;
            continue;
        }
        let sent = Instant::now();
        let beat = tokio::time::timeout(
            every.max(HEARTBEAT_TIMEOUT_MIN),
            shared.store.heartbeat(&leases, config.lease_ms()),
        )
        .await;
        match beat {
            Ok(Ok(replies)) => {
                if failing {
                    tracing::info!(held = replies.len(), "heartbeat works again");
                }
                failing = false;
                let alive: HashSet<TaskId> = replies.iter().map(|r| r.id).collect();
                let tokens: HashMap<TaskId, i64> = leases.iter().map(|l| (l.id, l.token)).collect();
                for reply in replies.iter().filter(|r| r.extended) {
                    if let Some(token) = tokens.get(&reply.id) {
                        shared.extended(reply.id, *token, sent);
                    }
                }
                for lease in &leases {
                    if !alive.contains(&lease.id)
                        && shared.stop_task(lease.id, Some(lease.token), StopReason::LeaseLost)
                    {
                        tracing::warn!(task_id = %lease.id, "lease lost; stopping the run");
                    }
                }
                for reply in replies.iter().filter(|r| r.cancel_requested) {
                    let token = tokens.get(&reply.id).copied();
                    if shared.stop_task(reply.id, token, StopReason::CancelRequested) {
                        tracing::info!(task = %reply.id, "cancellation requested; stopping the run");
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, held = leases.len(), "heartbeat failed; retrying");
                failing = true;
            }
            Err(_) => {
                tracing::warn!(
                    held = leases.len(),
                    "heartbeat got no answer in time; retrying"
                );
                failing = true;
            }
        }
    }
}

/// The shortest wait for a heartbeat's answer (otherwise a third of the lease, the
/// interval), so that a slow database is not taken for a dead one.
const HEARTBEAT_TIMEOUT_MIN: Duration = Duration::from_secs(1);

/// Follows the store's events for runnable work and cancellations. They are only hints:
/// the claim loop polls and heartbeats carry cancellation flags, so a lost one costs
/// latency only.
pub(crate) async fn listen(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut events = shared.store.shared().events(
        &[EventKind::Runnable, EventKind::CancelRequested],
        EventsConfig::default(),
    );
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = shutdown.cancelled() => return,
        };
        match event {
            Event::CancelRequested(id) => {
                if shared.stop_task(id, None, StopReason::CancelRequested) {
                    tracing::info!(task = %id, "cancellation requested (notified); stopping the run");
                }
            }
            // One idle worker per set of tools answers these: the one on duty.
            Event::Runnable(_) => {
                if shared.on_duty.load(Ordering::SeqCst) {
                    shared.wake.notify_one();
                }
            }
            // After a gap anything may have become claimable: look for work now.
            Event::Resync => shared.wake.notify_one(),
            Event::Changed { .. } => {}
        }
    }
}

/// How often a worker looks for tasks nobody claims, and how long they must have waited.
const QUEUE_CHECK_EVERY: Duration = Duration::from_secs(30);

/// Logs the tools whose tasks wait unclaimed and which this worker does not have: no live
/// worker has them (or every one that does is busy). They stay queued, never failed.
async fn report_waiting(shared: &Shared) {
    let waited_ms = i64::try_from(QUEUE_CHECK_EVERY.as_millis()).unwrap_or(i64::MAX);
    let registry = shared.registry.current();
    match shared.store.waiting_by_tool(waited_ms, 100).await {
        Ok(waiting) => {
            for (tool, tasks) in waiting {
                if registry.get(&tool).is_none() {
                    tracing::warn!(
                        %tool,
                        tasks,
                        waited_s = QUEUE_CHECK_EVERY.as_secs(),
                        "tasks wait for a tool this worker does not have; no live worker has claimed them"
                    );
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "could not read the queue"),
    }
}

/// Live tasks at which a table that was never analysed is given its first statistics, and
/// changed rows below which a table's statistics are never called stale (see
/// `WorkerStore::analyze_if_stale`).
const ANALYZE_MIN_ROWS: i64 = 1000;
/// At most one ANALYZE of the task table per this many milliseconds, by any worker.
const ANALYZE_MIN_GAP_MS: i64 = 10_000;

/// How many maintenance rounds a leader's term lasts: a leader that dies is replaced
/// within this many rounds (its last term runs out first).
const LEADER_TERM_ROUNDS: u32 = 3;

/// Maintenance: every worker keeps the table's statistics fresh (one at a time) and
/// reports tools it does not have; the leader alone (see `mcp_tasks_store`'s
/// `leader.rs`) finishes or requeues lapsed leases and expires and deletes tasks, so
/// that what the fleet reads for them does not grow with the number of workers.
pub(crate) async fn maintenance(shared: Arc<Shared>, shutdown: CancellationToken) {
    let config = &shared.config;
    let keep_ms = i64::try_from(config.tombstone_retention.as_millis()).unwrap_or(i64::MAX);
    let term_ms = i64::try_from((config.maintenance_interval * LEADER_TERM_ROUNDS).as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let mut queue_checked = Instant::now();
    let mut leading = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(config.maintenance_interval) => {}
            () = shutdown.cancelled() => break,
        }
        match shared
            .store
            .analyze_if_stale(ANALYZE_MIN_ROWS, ANALYZE_MIN_GAP_MS)
            .await
        {
            Ok(true) => tracing::debug!("the task table's statistics were stale: analysed it"),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "could not look at the table's statistics"),
        }
        if queue_checked.elapsed() >= QUEUE_CHECK_EVERY {
            queue_checked = Instant::now();
            report_waiting(&shared).await;
        }
        match shared.store.lead(&config.worker_id, term_ms).await {
            Ok(now_leading) => {
                if now_leading != leading {
                    tracing::info!(leading = now_leading, "maintenance leadership changed");
                }
                leading = now_leading;
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not renew or take the maintenance leadership");
                leading = false;
            }
        }
        if !leading {
            continue;
        }
        lead_round(&shared, keep_ms).await;
    }
    if leading && let Err(e) = shared.store.resign(&config.worker_id).await {
        tracing::debug!(error = %e, "could not give up the maintenance leadership");
    }
}

/// The leader's round: lapsed leases finished (no attempts left, or cancelled) or put
/// back in the queue, then expiry and deletion. Each step repeats while its batches come
/// back full.
async fn lead_round(shared: &Shared, keep_ms: i64) {
    let config = &shared.config;
    let batch = config.maintenance_batch;
    let full = |n: u64| i64::try_from(n).unwrap_or(i64::MAX) >= batch;
    let mut rescued = mcp_tasks_store::RescueReport::default();
    for _ in 0..50 {
        match shared.store.rescue_lapsed(batch).await {
            Ok(r) => {
                rescued.failed += r.failed;
                rescued.cancelled += r.cancelled;
                if !full(r.failed + r.cancelled) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease rescue failed");
                break;
            }
        }
    }
    if rescued.failed + rescued.cancelled > 0 {
        observe::crash_recovered(rescued.failed);
        tracing::warn!(
            failed = rescued.failed,
            cancelled = rescued.cancelled,
            "finished tasks whose workers were lost and which may not run again"
        );
    }
    let mut requeued = 0;
    for _ in 0..50 {
        match shared.store.requeue_lapsed(batch).await {
            Ok(n) => {
                requeued += n;
                if !full(n) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "requeueing lapsed leases failed");
                break;
            }
        }
    }
    if requeued > 0 {
        tracing::warn!(
            requeued,
            "queued again tasks whose workers were lost (their leases lapsed)"
        );
    }
    match shared.store.maintain(batch, keep_ms).await {
        Ok(r)
            if r.expired + r.deleted + r.tombstones_deleted + r.session_revocations_deleted > 0 =>
        {
            tracing::info!(
                expired = r.expired,
                deleted = r.deleted,
                tombstones_deleted = r.tombstones_deleted,
                session_revocations_deleted = r.session_revocations_deleted,
                "maintenance"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "maintenance failed"),
    }
}
