//! A worker process: claims runnable tasks under fenced leases, runs their tools, and
//! records what happened.
//!
//! Four loops share one registry of running tasks:
//! - **claim**: whenever a slot is free, claim up to that many tasks in one statement;
//!   woken by NOTIFY, with a polling backstop;
//! - **heartbeat**: every third of a lease, extend all held leases in one statement;
//!   a lease that was not extended is lost, and a flagged cancellation is passed on; a
//!   run whose lease no heartbeat could extend is stopped before the lease runs out;
//! - **listen**: LISTEN for new work and for cancellations (which then reach the handler
//!   within milliseconds instead of at the next heartbeat);
//! - **maintenance**: finish lapsed leases that may not run again, expire overdue tasks,
//!   delete finished ones past their TTL.
//!
//! Every write a run makes is conditional on its lease token, so a worker that lost its
//! lease can never change the task again, whatever it still believes.

mod duty;
mod executor;
mod held;
mod loops;
mod presence;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_store::{Lease, TaskId, WorkerStore};
use mcp_tasks_tools::LiveRegistry;
use mcp_tasks_tools::scheduling::Scheduling;
use mcp_tasks_wire::results::Implementation;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

/// How soon a failed heartbeat (or the give-back of a run stopped for its lease) is tried
/// again.
pub(crate) const HEARTBEAT_RETRY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this worker in `lease_owner`; unique per process.
    pub worker_id: String,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Lease length; heartbeats run at a third of it.
    pub lease: Duration,
    /// Backstop poll for work when no notification arrives.
    pub poll_interval: Duration,
    /// On shutdown, how long running handlers may take to finish before their tasks are
    /// released to other workers.
    pub shutdown_grace: Duration,
    /// After cancellation reaches a handler, how long it may take to stop by itself
    /// before it is aborted.
    pub cancel_grace: Duration,
    pub maintenance_interval: Duration,
    pub maintenance_batch: i64,
    /// How long an expired task's owner is told "expired" rather than "not found".
    pub tombstone_retention: Duration,
    /// How often the worker refreshes its row in the `workers` table (see `presence.rs`).
    pub presence_interval: Duration,
    pub server_info: Implementation,
    /// The limits claims respect (the configuration file's scheduling sections; every
    /// worker must have the same): running tasks at once per tool, upstream, tenant and
    /// principal, starts per second per tool and upstream.
    pub scheduling: Scheduling,
}

impl WorkerConfig {
    pub fn new(server_info: Implementation) -> Self {
        Self {
            worker_id: default_worker_id(),
            concurrency: 16,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(20),
            cancel_grace: Duration::from_secs(5),
            maintenance_interval: Duration::from_secs(1),
            maintenance_batch: 1000,
            tombstone_retention: Duration::from_secs(7 * 24 * 3600),
            presence_interval: Duration::from_secs(15),
            server_info,
            scheduling: Scheduling::default(),
        }
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The host's name, when it has one.
fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
}

/// `host-pid-random`: readable in `lease_owner`, unique across restarts.
pub fn default_worker_id() -> String {
    let host = host_name().unwrap_or_else(|| "worker".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..6])
}

/// Why a running handler is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// The client asked for cancellation.
    CancelRequested,
    /// The lease is gone: someone else may own the task now.
    LeaseLost,
    /// No heartbeat could extend the lease (the database is out of reach), and it is about
    /// to run out: once it has, another worker may claim the task and run it again.
    LeaseRunningOut,
    /// This worker is shutting down.
    Shutdown,
}

/// A task this worker holds.
struct Running {
    lease: Lease,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
    /// When the lease runs out at the earliest: the lease length after this worker sent
    /// the claim, or the last heartbeat that extended it (the database counts from when
    /// the statement began, which is later).
    expires: watch::Sender<Instant>,
    /// The task running it, so that dropping the worker stops it.
    abort: Option<tokio::task::AbortHandle>,
}

impl Running {
    fn stop(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock() {
            // The first reason wins: a lost lease stays lost even if shutdown follows.
            r.get_or_insert(reason);
        }
        self.cancel.cancel();
    }
}

struct Shared {
    store: WorkerStore,
    registry: LiveRegistry,
    config: WorkerConfig,
    running: Mutex<HashMap<TaskId, Running>>,
    /// Something may be claimable.
    wake: Notify,
    /// The wake-up duty the claim loop wants (the key of its tools), if any; see `duty.rs`.
    want_duty: watch::Sender<Option<i32>>,
    /// This worker has the wake-up duty (or cannot queue for it): notifications of new
    /// work wake its claim loop. Other idle workers leave them to the one on duty.
    on_duty: AtomicBool,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
}

impl Shared {
    /// Stops the run of task `id`; with a `token`, only the run under that lease (after
    /// a database outage a worker may reclaim its own lapsed task, and the news about the
    /// old lease must not stop the new run).
    fn stop_task(&self, id: TaskId, token: Option<i64>, reason: StopReason) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        match running.get(&id) {
            Some(r) if token.is_none_or(|t| t == r.lease.token) => {
                r.stop(reason);
                true
            }
            _ => false,
        }
    }

    /// A heartbeat sent at `sent` extended the lease `token` of task `id`.
    fn extended(&self, id: TaskId, token: i64, sent: Instant) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = running.get(&id).filter(|r| r.lease.token == token) {
            let until = sent + self.config.lease;
            r.expires.send_if_modified(|at| {
                let later = until > *at;
                if later {
                    *at = until;
                }
                later
            });
        }
    }

    fn held_leases(&self) -> Vec<Lease> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.values().map(|r| r.lease.clone()).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker configuration: {0}")]
    Config(String),
}

/// Runs a worker until `shutdown` fires, then drains: no new claims, running handlers
/// get `shutdown_grace` to finish, and the tasks still running after that are released
/// so another worker picks them up at once.
pub async fn run(
    store: WorkerStore,
    registry: impl Into<LiveRegistry>,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let registry: LiveRegistry = registry.into();
    if config.concurrency == 0 {
        return Err(WorkerError::Config("concurrency must be at least 1".into()));
    }
    if config.lease < Duration::from_millis(300) {
        return Err(WorkerError::Config(
            "the lease must be at least 300 ms".into(),
        ));
    }
    tracing::info!(
        worker = %config.worker_id,
        concurrency = config.concurrency,
        lease_ms = config.lease.as_millis() as u64,
        tools = ?registry.current().names().collect::<Vec<_>>(),
        "worker starting"
    );
    let shared = Arc::new(Shared {
        slots: Arc::new(Semaphore::new(config.concurrency)),
        store,
        registry,
        config,
        running: Mutex::new(HashMap::new()),
        wake: Notify::new(),
        want_duty: watch::Sender::new(None),
        on_duty: AtomicBool::new(false),
        tracker: TaskTracker::new(),
    });

    // If this future is dropped (the process is going away, or a test simulates a crash)
    // everything it started stops with it.
    let _abort_runs = AbortRunsOnDrop(shared.clone());
    // Heartbeats must outlive the claim loop: they keep leases alive during the drain.
    let heartbeats_stop = CancellationToken::new();
    let heartbeat = spawn_owned(loops::heartbeat(shared.clone(), heartbeats_stop.clone()));
    let listen = spawn_owned(loops::listen(shared.clone(), shutdown.clone()));
    let maintenance = spawn_owned(loops::maintenance(shared.clone(), shutdown.clone()));
    let duty = spawn_owned(duty::duty(shared.clone(), shutdown.clone()));
    // Like heartbeats, the row stays fresh through the drain: the worker is still there.
    let presence = spawn_owned(presence::presence(shared.clone(), heartbeats_stop.clone()));

    loops::claim(shared.clone(), shutdown.clone()).await;

    // Drain.
    shared.tracker.close();
    let in_flight = shared.held_leases().len();
    if in_flight > 0 {
        tracing::info!(
            in_flight,
            grace_s = shared.config.shutdown_grace.as_secs(),
            "shutting down: letting running tasks finish"
        );
    }
    if tokio::time::timeout(shared.config.shutdown_grace, shared.tracker.wait())
        .await
        .is_err()
    {
        let ids: Vec<TaskId> = shared
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        tracing::warn!(
            remaining = ids.len(),
            "grace period over: releasing unfinished tasks to other workers"
        );
        for id in ids {
            shared.stop_task(id, None, StopReason::Shutdown);
        }
        shared.tracker.wait().await;
    }
    heartbeats_stop.cancel();
    let _ = tokio::join!(heartbeat, listen, maintenance, duty, presence);
    presence::deregister(&shared).await;
    tracing::info!(worker = %shared.config.worker_id, "worker stopped");
    Ok(())
}

/// Starts one of the worker's loops, owned by [`run`]: it is awaited at the end of the
/// drain, and aborted if `run` is dropped first, so no loop outlives its worker.
#[expect(
    clippy::disallowed_methods,
    reason = "the handle aborts the loop on drop and run() awaits it: its owner is the worker, not a tracker"
)]
fn spawn_owned<F>(future: F) -> AbortOnDropHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    AbortOnDropHandle::new(tokio::spawn(future))
}

struct AbortRunsOnDrop(Arc<Shared>);

impl Drop for AbortRunsOnDrop {
    fn drop(&mut self) {
        let running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        for run in running.values() {
            if let Some(abort) = &run.abort {
                abort.abort();
            }
        }
    }
}
