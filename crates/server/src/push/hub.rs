//! The replica's view of the tasks its clients are waiting on.
//!
//! One hub per replica. Streams (and synchronous waits) subscribe to tasks; the hub
//! marks them watched (`tasks.watched_until`), so changes to them NOTIFY `mcp_tasks_changed`
//! (`<id> <version>`), which the hub hears through the store's event stream (one LISTEN
//! connection of its own, see `mcp_tasks_store::Events`). It then reads
//! each changed task once, however many local streams wait on it, and publishes the
//! snapshot on a `watch` channel: a slow stream only ever sees the latest snapshot, so
//! nothing queues up behind it.
//!
//! Notifications are hints. The hub also re-reads versions every few seconds, and
//! re-reads everything whenever the stream resynchronises (after its connection was
//! replaced, which its self-probe also does to a silently dead one), so a lost
//! notification or a broken connection costs latency, never a missed final state.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mcp_tasks_store::{
    Event, EventKind, EventsConfig, Owner, ReplicaStore, StoreError, TaskId, TaskRecord, Tenants,
};
use mcp_tasks_wire::TaskStatus;
use mcp_tasks_wire::backoff::Backoff;
use serde_json::{Map, Value};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Timings of the hub's loops.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// How long a watch mark (`tasks.watched_until`) lives without a refresh.
    pub watch_ttl: Duration,
    /// How often watch marks are refreshed (those with less than half their time left).
    pub refresh_every: Duration,
    /// How often versions are re-read as a backstop for lost notifications.
    pub backstop_every: Duration,
    /// How often the LISTEN connection is probed, and how long a probe may take (see
    /// `mcp_tasks_store::EventsConfig`).
    pub probe_every: Duration,
    pub probe_timeout: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            watch_ttl: Duration::from_secs(60),
            refresh_every: Duration::from_secs(20),
            backstop_every: Duration::from_secs(5),
            probe_every: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(5),
        }
    }
}

/// What a subscriber sees of a task.
#[derive(Debug, Clone)]
pub enum Snapshot {
    /// Not read yet.
    Loading,
    Task(Arc<TaskSnapshot>),
    /// Deleted (or never visible to this owner).
    Gone,
}

/// One version of a task, as clients see it. Only the client-visible part is kept (not
/// arguments, answers or lease bookkeeping): thousands of these live in a busy replica.
#[derive(Debug)]
pub struct TaskSnapshot {
    pub version: i64,
    pub status: TaskStatus,
    /// The attempt the task is on (`TaskRecord::current_attempt`), and how many it may
    /// have (the console's list shows them).
    pub attempt: i32,
    pub max_attempts: i32,
    /// The `DetailedTask` as `tasks/get` shows it, without `resultType`.
    pub detailed: Map<String, Value>,
}

impl TaskSnapshot {
    fn new(record: &TaskRecord) -> Self {
        Self {
            version: record.version,
            status: record.status,
            attempt: record.current_attempt(),
            max_attempts: record.max_attempts,
            detailed: record.view().detailed(),
        }
    }
}

struct Entry {
    owner: Owner,
    tx: watch::Sender<Snapshot>,
    version: i64,
    refs: usize,
}

struct Inner {
    store: ReplicaStore,
    config: HubConfig,
    entries: Mutex<HashMap<TaskId, Entry>>,
    dirty: Mutex<HashSet<TaskId>>,
    dirty_ready: Notify,
    /// Per tenant with console streams on this replica, counts the "something may be
    /// claimable" wake-ups heard that may concern it (a task of the tenant was created,
    /// resumed or released) and the resyncs, when the hub listens for them (the console
    /// is on). The console's lists re-run their query when it moves; a `watch` folds any
    /// number of moves into one for a stream that has not looked yet. A tenant's entry
    /// goes once no stream holds a receiver of it.
    runnable: Mutex<HashMap<String, (Tenants, watch::Sender<u64>)>>,
    hear_runnable: bool,
}

impl Inner {
    fn entries(&self) -> MutexGuard<'_, HashMap<TaskId, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mark_dirty(&self, ids: impl IntoIterator<Item = TaskId>) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
        let before = dirty.len();
        dirty.extend(ids);
        if dirty.len() > before {
            self.dirty_ready.notify_one();
        }
    }

    /// Whether this replica watches task `id` and has a version older than `version`.
    fn is_older(&self, id: TaskId, version: i64) -> bool {
        self.entries().get(&id).is_some_and(|e| e.version < version)
    }

    /// Moves the wake-up counts of the tenants `woken` may include, and forgets tenants
    /// nobody follows any more.
    fn wake(&self, woken: Tenants) {
        let mut runnable = self.runnable.lock().unwrap_or_else(|e| e.into_inner());
        runnable.retain(|_, (_, tx)| tx.receiver_count() > 0);
        for (tenant, tx) in runnable.values() {
            if woken.may_include(*tenant) {
                tx.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    fn keys(&self) -> Vec<(Owner, TaskId)> {
        self.entries()
            .iter()
            .map(|(id, e)| (e.owner.clone(), *id))
            .collect()
    }

    /// Publishes what was read. Versions only move forward, so a late read never
    /// replaces a newer snapshot.
    fn publish(&self, keys: &[(Owner, TaskId)], records: Vec<TaskRecord>) {
        let mut found: HashMap<TaskId, TaskRecord> =
            records.into_iter().map(|r| (r.id, r)).collect();
        let mut entries = self.entries();
        for (_, id) in keys {
            let Some(entry) = entries.get_mut(id) else {
                continue;
            };
            match found.remove(id) {
                Some(record) if record.version > entry.version => {
                    // Measured against the database's clock (`updated_at`): the time
                    // from the change to the replica knowing it, notification or not.
                    let lag = time::OffsetDateTime::now_utc() - record.updated_at;
                    mcp_tasks_observe::record::notification_lag(lag.try_into().unwrap_or_default());
                    entry.version = record.version;
                    entry
                        .tx
                        .send_replace(Snapshot::Task(Arc::new(TaskSnapshot::new(&record))));
                }
                Some(_) => {}
                None => {
                    if !matches!(*entry.tx.borrow(), Snapshot::Gone) {
                        entry.tx.send_replace(Snapshot::Gone);
                    }
                }
            }
        }
    }
}

/// Cheap to clone; all clones share one hub.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

/// A subscription to one task. Dropping it releases the hub's interest.
pub struct Watcher {
    pub id: TaskId,
    pub rx: watch::Receiver<Snapshot>,
    _guard: WatchGuard,
}

struct WatchGuard {
    hub: Arc<Inner>,
    id: TaskId,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut entries = self.hub.entries();
        if let Some(entry) = entries.get_mut(&self.id) {
            entry.refs -= 1;
            // The mark in the database simply lapses: another replica may still watch.
            if entry.refs == 0 {
                entries.remove(&self.id);
            }
        }
    }
}

impl Hub {
    /// Starts the hub's loops on `tasks` (so that shutdown can wait for them); they stop
    /// with `shutdown`.
    ///
    /// With `hear_runnable` (the console is on) it also listens for the workers' wake-ups
    /// (see [`Hub::runnable`]).
    pub(crate) fn start(
        store: ReplicaStore,
        config: HubConfig,
        hear_runnable: bool,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let inner = Arc::new(Inner {
            store,
            config,
            entries: Mutex::new(HashMap::new()),
            dirty: Mutex::new(HashSet::new()),
            dirty_ready: Notify::new(),
            runnable: Mutex::new(HashMap::new()),
            hear_runnable,
        });
        tasks.spawn(listen_loop(inner.clone(), shutdown.clone()));
        tasks.spawn(fetch_loop(inner.clone(), shutdown.clone()));
        tasks.spawn(upkeep_loop(inner.clone(), shutdown));
        Self { inner }
    }

    /// Moves on every wake-up of the workers heard from any replica that may concern
    /// `tenant` (a task of it was created, resumed or released: the coalesced
    /// `mcp_tasks_runnable`, see `mcp_tasks_store::Waker`) and on every resync, so a
    /// console list of that tenant can re-read what may have appeared; a wake-up of other
    /// tenants leaves it be. Never moves unless the hub was started with `hear_runnable`.
    pub fn runnable(&self, tenant: &str) -> watch::Receiver<u64> {
        let mut runnable = self
            .inner
            .runnable
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        runnable
            .entry(tenant.to_owned())
            .or_insert_with(|| (Tenants::of(tenant), watch::Sender::new(0)))
            .1
            .subscribe()
    }

    /// Subscribes to tasks of `owner`. Ids that are not this owner's tasks are left out
    /// of the result, indistinguishably from ids that do not exist.
    pub async fn subscribe(
        &self,
        owner: &Owner,
        ids: &[TaskId],
    ) -> Result<Vec<Watcher>, StoreError> {
        let inner = &self.inner;
        let mut watchers = Vec::with_capacity(ids.len());
        let mut new = Vec::new();
        {
            let mut entries = inner.entries();
            for &id in ids {
                match entries.get_mut(&id) {
                    Some(entry) if &entry.owner == owner => {
                        entry.refs += 1;
                        watchers.push(Watcher {
                            id,
                            rx: entry.tx.subscribe(),
                            _guard: WatchGuard {
                                hub: inner.clone(),
                                id,
                            },
                        });
                    }
                    // Someone else's task: never attach to it.
                    Some(_) => {}
                    None => {
                        let (tx, rx) = watch::channel(Snapshot::Loading);
                        entries.insert(
                            id,
                            Entry {
                                owner: owner.clone(),
                                tx,
                                version: 0,
                                refs: 1,
                            },
                        );
                        new.push((owner.clone(), id));
                        watchers.push(Watcher {
                            id,
                            rx,
                            _guard: WatchGuard {
                                hub: inner.clone(),
                                id,
                            },
                        });
                    }
                }
            }
        }
        if !new.is_empty() {
            // Mark first, read second: a change committed after the read notifies.
            let ttl = i64::try_from(inner.config.watch_ttl.as_millis()).unwrap_or(i64::MAX);
            let read = async {
                inner.store.watch(&new, ttl).await?;
                inner.store.get_tasks(&new).await
            };
            match read.await {
                Ok(records) => inner.publish(&new, records),
                Err(e) => {
                    // Others may have attached to these entries meanwhile: let the fetch
                    // loop keep trying for them.
                    inner.mark_dirty(new.iter().map(|(_, id)| *id));
                    return Err(e);
                }
            }
        }
        // Wait out any read another subscriber started, then keep only real tasks.
        let mut live = Vec::with_capacity(watchers.len());
        for mut w in watchers {
            let ready =
                w.rx.wait_for(|s| !matches!(s, Snapshot::Loading))
                    .await
                    .map(|s| matches!(*s, Snapshot::Task(_)))
                    .unwrap_or(false);
            if ready {
                live.push(w);
            }
        }
        Ok(live)
    }
}

/// Follows the store's change events: a change to a task this replica watches (and has
/// an older version of) marks it dirty; a resync marks everything dirty.
async fn listen_loop(inner: Arc<Inner>, shutdown: CancellationToken) {
    let kinds: &[EventKind] = if inner.hear_runnable {
        &[EventKind::Changed, EventKind::Runnable]
    } else {
        &[EventKind::Changed]
    };
    let mut events = inner.store.shared().events(
        kinds,
        EventsConfig {
            probe_every: inner.config.probe_every,
            probe_timeout: inner.config.probe_timeout,
        },
    );
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = shutdown.cancelled() => return,
        };
        match event {
            Event::Changed { id, version } => {
                if inner.is_older(id, version) {
                    inner.mark_dirty([id]);
                }
            }
            Event::Resync => {
                let watched: Vec<TaskId> = inner.entries().keys().copied().collect();
                tracing::debug!(
                    watched = watched.len(),
                    "push: resynchronising; re-reading watched tasks"
                );
                inner.mark_dirty(watched);
                inner.wake(Tenants::ALL);
            }
            Event::Runnable(tenants) => inner.wake(tenants),
            Event::CancelRequested(_) => {}
        }
    }
}

/// Reads dirty tasks in batches: one query however many notifications arrived.
async fn fetch_loop(inner: Arc<Inner>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        tokio::select! {
            () = inner.dirty_ready.notified() => {}
            () = shutdown.cancelled() => return,
        }
        let ids: Vec<TaskId> =
            std::mem::take(&mut *inner.dirty.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        let keys: Vec<(Owner, TaskId)> = {
            let entries = inner.entries();
            ids.iter()
                .filter_map(|id| entries.get(id).map(|e| (e.owner.clone(), *id)))
                .collect()
        };
        if keys.is_empty() {
            continue;
        }
        match inner.store.get_tasks(&keys).await {
            Ok(records) => {
                backoff.reset();
                inner.publish(&keys, records);
            }
            Err(e) => {
                tracing::warn!(error = %e, tasks = keys.len(), "push: could not read changed tasks; retrying");
                inner.mark_dirty(keys.into_iter().map(|(_, id)| id));
                tokio::select! {
                    () = tokio::time::sleep(backoff.next_delay()) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Refreshes the watch marks and re-reads versions as a backstop.
async fn upkeep_loop(inner: Arc<Inner>, shutdown: CancellationToken) {
    let mut backstop = tokio::time::interval(inner.config.backstop_every);
    let mut refresh = tokio::time::interval(inner.config.refresh_every);
    backstop.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ttl = i64::try_from(inner.config.watch_ttl.as_millis()).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            _ = backstop.tick() => {
                let keys = inner.keys();
                match inner.store.versions(&keys).await {
                    Ok(versions) => {
                        let current: HashMap<TaskId, i64> = versions.into_iter().collect();
                        let stale: Vec<TaskId> = {
                            let entries = inner.entries();
                            keys.iter()
                                .filter(|(_, id)| match (entries.get(id), current.get(id)) {
                                    (Some(e), Some(v)) => *v > e.version,
                                    (Some(e), None) => !matches!(*e.tx.borrow(), Snapshot::Gone),
                                    (None, _) => false,
                                })
                                .map(|(_, id)| *id)
                                .collect()
                        };
                        if !stale.is_empty() {
                            tracing::debug!(stale = stale.len(), "push: backstop found changes no notification announced");
                            inner.mark_dirty(stale);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "push: backstop read failed"),
                }
            }
            _ = refresh.tick() => {
                let keys = inner.keys();
                if let Err(e) = inner.store.watch(&keys, ttl).await {
                    tracing::warn!(error = %e, "push: could not refresh watch marks");
                }
            }
            () = shutdown.cancelled() => return,
        }
    }
}
