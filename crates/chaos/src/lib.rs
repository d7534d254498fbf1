//! `mcp-tasks chaos`: real processes on loopback (N replicas, M workers, one throwaway
//! PostgreSQL), K task scripts driven through random replicas while replicas and
//! workers are SIGKILLed and restarted, LISTEN backends are terminated and PostgreSQL
//! restarts once. Then it checks, from the client side and from an audit trigger in the
//! database, that nothing was lost, finalized twice or overwritten, and that no lease is
//! left held; and it measures how long a dead worker's task waits before it runs again.
//!
//! Every random choice comes from one seed, printed at the start and in the summary, so
//! a run's sequence of scripts and chaos actions can be replayed (timing still varies).

mod analysis;
mod audit;
mod driver;
mod fleet;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_tasks_devdb::DevDatabase;
use mcp_tasks_store::{PoolConfig, Store, TaskId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::audit::AuditDb;
use crate::driver::{Api, Failure, Kind, Outcome, Script};
use crate::fleet::{Fleet, Settings};

/// Workers' backstop poll for new work (ms).
const POLL_MS: u64 = 200;
/// Added to `--duration` for each script's deadline.
const SCRIPT_GRACE: Duration = Duration::from_secs(120);
/// Examples of each kind of finding printed on stderr.
const EXAMPLES: usize = 10;

#[derive(Debug, Clone)]
pub struct Config {
    /// The `mcp-tasks` executable the replicas and workers run.
    pub binary: PathBuf,
    pub tasks: usize,
    pub replicas: usize,
    pub workers: usize,
    /// How long the chaos goes on; the scripts' starts are spread over it.
    pub duration: Duration,
    /// Scripts driven at once.
    pub concurrency: usize,
    /// `None` draws one.
    pub seed: Option<u64>,
    /// The workers' lease (ms).
    pub lease_ms: u64,
}

/// Runs the harness, prints the summary on stdout, and fails when a check failed.
pub async fn run(config: &Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    if config.replicas == 0 || config.workers == 0 || config.concurrency == 0 || config.tasks == 0 {
        bail!("--tasks, --replicas, --workers and --concurrency must be at least 1");
    }
    if config.lease_ms < 30 {
        bail!("--lease-ms must be at least 30");
    }
    let seed = config.seed.unwrap_or_else(rand::random);
    eprintln!(
        "[chaos] seed={seed} (replay with --seed {seed}): {} tasks, {} replicas, {} workers, {} s of chaos, concurrency {}, lease {} ms",
        config.tasks,
        config.replicas,
        config.workers,
        config.duration.as_secs_f64(),
        config.concurrency,
        config.lease_ms
    );
    // Everything started lives inside this future: on Ctrl-C, dropping it kills the
    // processes (kill_on_drop) and deletes the cluster (DevDatabase's drop).
    let report = tokio::select! {
        report = execute(config, seed) => report?,
        () = shutdown.cancelled() => bail!("interrupted; the processes and the cluster were stopped"),
    };
    println!("{}", report.summary());
    println!("{}", report.recovery_line());
    let failed = report.failures();
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("chaos checks failed: {}", failed.join(", "))
    }
}

async fn execute(config: &Config, seed: u64) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);

    let db = tokio::task::spawn_blocking(DevDatabase::start)
        .await?
        .context("starting a throwaway PostgreSQL")?;
    eprintln!(
        "[chaos] PostgreSQL {} at {} ({})",
        db.version(),
        db.url(),
        db.data_dir().display()
    );
    let store = Store::connect(
        db.url(),
        &PoolConfig {
            max_connections: 4,
            ..PoolConfig::default()
        },
    )
    .await?;
    store.migrate().await.context("migrating")?;
    store.close().await;
    let audit_db = AuditDb::connect(db.url())?;
    audit_db
        .install()
        .await
        .context("installing the audit trigger")?;

    let state_key: String = (0..32)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect();
    let mut fleet = Fleet::start(
        Settings {
            binary: config.binary.clone(),
            database_url: db.url().to_owned(),
            state_key,
            lease_ms: config.lease_ms,
            poll_ms: POLL_MS,
        },
        config.replicas,
        config.workers,
    )
    .await?;
    eprintln!("[chaos] replicas at {}", fleet.urls().join(" "));

    let api = Arc::new(Api::new(&fleet.urls()));
    let scripts = Script::plan(&mut rng, config.tasks, seed);
    let mut chaos_rng = StdRng::seed_from_u64(rng.random());
    let mut check_rng = StdRng::seed_from_u64(rng.random());

    // Drivers: the scripts' starts are spread over the chaos, so tasks are in every
    // phase of their lives when something is killed.
    let chaos_start = Instant::now();
    let queue = Arc::new(Mutex::new(
        scripts
            .into_iter()
            .collect::<std::collections::VecDeque<_>>(),
    ));
    let mut drivers = tokio::task::JoinSet::new();
    for _ in 0..config.concurrency.min(config.tasks) {
        let queue = queue.clone();
        let api = api.clone();
        let (tasks, duration) = (config.tasks, config.duration);
        drivers.spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some(script) = next else { break };
                let offset = duration.mul_f64(script.index as f64 / tasks as f64);
                tokio::time::sleep_until(chaos_start + offset).await;
                let deadline = Instant::now() + duration + SCRIPT_GRACE;
                outcomes.push(api.run(script, deadline).await);
            }
            outcomes
        });
    }

    let (db, mut chaos) = chaos_loop(
        &mut chaos_rng,
        &mut fleet,
        &audit_db,
        db,
        config.duration,
        started,
    )
    .await?;
    let crashed = fleet.exited_on_their_own();
    chaos.note_exits(crashed);
    fleet
        .ensure_running()
        .await
        .context("restarting processes after the chaos")?;
    eprintln!(
        "[chaos] t={:.1}s chaos over; every process is running; waiting for the scripts",
        started.elapsed().as_secs_f64()
    );

    let mut outcomes: Vec<Outcome> = Vec::with_capacity(config.tasks);
    while let Some(joined) = drivers.join_next().await {
        outcomes.extend(joined.context("a driver panicked")?);
    }
    outcomes.sort_by_key(|o| o.script.index);
    let crashed = fleet.exited_on_their_own();
    chaos.note_exits(crashed);
    fleet.ensure_running().await?;
    eprintln!(
        "[chaos] t={:.1}s every script ended; checking",
        started.elapsed().as_secs_f64()
    );

    let mut report = Report {
        seed,
        tasks: config.tasks,
        lease_ms: config.lease_ms,
        ..Report::default()
    };
    let census = audit_db
        .tasks()
        .await
        .context("listing the tasks in the database")?;
    let events = audit_db.events().await.context("reading the audit")?;
    let histories = analysis::histories(&events);
    let explainer = analysis::Explainer {
        killed: &chaos.killed,
        outage: chaos.outage,
    };
    check_outcomes(
        &api,
        &mut check_rng,
        &outcomes,
        &histories,
        &explainer,
        &mut report,
    )
    .await;

    let accepted: HashSet<&str> = outcomes
        .iter()
        .filter_map(|o| o.task_id.as_deref())
        .collect();
    report.duplicates += (report.accepted - accepted.len()) as u64;
    for (id, status) in &census {
        if !accepted.contains(id.to_string().as_str()) {
            report.duplicates += 1;
            report.examples.push(format!(
                "task {id} ({status}) is in the database but no tools/call answered with it"
            ));
        }
    }

    let audit = audit_db.audit().await.context("reading the audit")?;
    report.double_finalized = audit.double_finalized;
    report.overwritten = audit.results_overwritten;
    report.left_terminal = audit.left_terminal;
    report.leases_held = audit.leases_held;
    report.claims = audit.claims;

    // Recovery: from a worker's SIGKILL to the claim that took over each lease it held
    // (not a later claim for another reason, such as the re-run after an answer).
    for kill in &chaos.worker_kills_held {
        for (id, token) in &kill.held {
            let reclaim = events.iter().find(|e| {
                e.id == *id && e.event == "claimed" && e.lease_token.is_some_and(|t| t > *token)
            });
            match reclaim {
                Some(e) if e.lapsed_owner.as_deref() == Some(kill.worker.as_str()) => report
                    .recoveries_ms
                    .push((e.at - kill.at).whole_milliseconds() as i64),
                _ => report.held_not_reclaimed += 1,
            }
        }
    }
    report.recoveries_ms.sort_unstable();

    report.chaos = chaos.counts();
    report.unexpected_exits = chaos.unexpected.len() as u64;
    report.retries = api.retries.load(std::sync::atomic::Ordering::Relaxed);
    report.log_warn = fleet.logs.warn.load(std::sync::atomic::Ordering::Relaxed);
    report.log_error = fleet.logs.error.load(std::sync::atomic::Ordering::Relaxed);
    for kind in Kind::ALL {
        let n = outcomes.iter().filter(|o| o.script.kind == kind).count();
        report.kinds.push(format!("{}={n}", kind.name()));
    }

    fleet.kill_all().await;
    audit_db.close().await;
    tokio::task::spawn_blocking(move || drop(db)).await?;
    report.duration = started.elapsed();

    for line in &chaos.unexpected {
        eprintln!("[chaos] UNEXPECTED EXIT: {line}");
    }
    for line in fleet
        .logs
        .errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        eprintln!("[chaos] ERROR logged: {line}");
    }
    for line in report.examples.iter().take(4 * EXAMPLES) {
        eprintln!("[chaos] {line}");
    }
    if report.unexplained_lost_runs > 0 {
        eprintln!(
            "[chaos] {} lost run(s) that no kill and no outage explain; {} of them began with a worker reclaiming its own lapsed lease",
            report.unexplained_lost_runs, report.unexplained_own_reclaims
        );
    }
    eprintln!(
        "[chaos] scripts: {}; LISTEN backends terminated: {}; requests sent again: {}; claims: {}; tasks held by killed workers and not reclaimed (finished, cancelled or asked for input first): {}; processes logged {} WARN and {} ERROR lines",
        report.kinds.join(" "),
        report.chaos.listeners_terminated,
        report.retries,
        report.claims,
        report.held_not_reclaimed,
        report.log_warn,
        report.log_error
    );
    Ok(report)
}

/// Resolves every accepted script's task through `tasks/get`, compares it with what
/// the script implies, and accounts for every run the task lost.
async fn check_outcomes(
    api: &Api,
    rng: &mut StdRng,
    outcomes: &[Outcome],
    histories: &HashMap<String, analysis::History>,
    explainer: &analysis::Explainer<'_>,
    report: &mut Report,
) {
    let mut examples: HashMap<&str, usize> = HashMap::new();
    let mut example = |report: &mut Report, what: &'static str, line: String| {
        let n = examples.entry(what).or_default();
        *n += 1;
        if *n <= EXAMPLES {
            report.examples.push(format!("{what}: {line}"));
        }
    };
    let no_history = analysis::History::default();
    for o in outcomes {
        let script = &o.script;
        let name = format!("script {} ({})", script.index, script.kind.name());
        if let Some(error) = &o.error {
            report.script_errors += 1;
            example(report, "script error", format!("{name}: {error}"));
        }
        let Some(id) = o.task_id.as_deref() else {
            report.never_accepted += 1;
            example(report, "never accepted", name);
            continue;
        };
        report.accepted += 1;
        let deadline = Instant::now() + Duration::from_secs(60);
        let task = match api.resolve(rng, id, deadline).await {
            Ok(task) => task,
            Err(Failure::Rejected(e)) => {
                report.lost += 1;
                example(
                    report,
                    "lost",
                    format!("{name}: task {id}: tasks/get says {e}"),
                );
                continue;
            }
            Err(e @ Failure::Deadline(_)) => {
                report.lost += 1;
                example(report, "lost", format!("{name}: task {id}: tasks/get {e}"));
                continue;
            }
        };
        report.resolved += 1;

        let crash_recovery = is_crash_recovery(&task);
        let history = histories.get(id).unwrap_or(&no_history);
        let lost_runs = history.lost_runs(explainer);
        report.lost_runs += lost_runs.len() as u64;
        let unexplained: Vec<&analysis::LostRun> =
            lost_runs.iter().filter(|r| r.cause.is_none()).collect();
        for run in &unexplained {
            report.unexplained_lost_runs += 1;
            report.unexplained_own_reclaims += u64::from(run.own_reclaim());
            example(
                report,
                "unexplained lost run",
                format!("{name}: task {id}: {run}"),
            );
        }

        let status = mcp_tasks_client::status_of(&task);
        if let Some(seen) = &o.last_seen
            && mcp_tasks_client::is_terminal(seen)
            && mcp_tasks_client::status_of(seen) != status
        {
            report.wrong_state += 1;
            example(
                report,
                "wrong state",
                format!(
                    "{name}: task {id} was {:?} to the script, is {status:?} now",
                    mcp_tasks_client::status_of(seen)
                ),
            );
            continue;
        }
        if let Err(why) = script.check(&task) {
            // A task whose last runs were all lost is failed by design (CRASH_RECOVERY
            // after max_attempts lost runs): the state its script implies, provided the
            // chaos explains every one of those losses.
            let runs: Vec<String> = lost_runs.iter().map(ToString::to_string).collect();
            if crash_recovery && lost_runs.len() >= analysis::MAX_ATTEMPTS && unexplained.is_empty()
            {
                report.crash_recovery += 1;
                example(
                    report,
                    "crash recovery (explained)",
                    format!("{name}: task {id}: {why}; {}", runs.join("; ")),
                );
            } else {
                report.wrong_state += 1;
                example(
                    report,
                    "wrong state",
                    format!("{name}: task {id}: {why}; lost runs: [{}]", runs.join("; ")),
                );
            }
        }
    }
}

fn is_crash_recovery(task: &Value) -> bool {
    mcp_tasks_client::status_of(task) == "failed"
        && task.pointer("/error/data/reason").and_then(Value::as_str) == Some("CRASH_RECOVERY")
}

/// One worker SIGKILL and what that worker held just before.
#[derive(Debug)]
struct WorkerKill {
    worker: String,
    /// The database's clock just before the kill.
    at: OffsetDateTime,
    held: Vec<(TaskId, i64)>,
}

#[derive(Debug, Default)]
struct Chaos {
    replica_kills: u64,
    worker_kills: u64,
    listener_kills: u64,
    listeners_terminated: u64,
    pg_restarts: u64,
    worker_kills_held: Vec<WorkerKill>,
    /// Worker id → wall clock just before its SIGKILL and once it was reaped.
    killed: HashMap<String, (OffsetDateTime, OffsetDateTime)>,
    /// Wall clock when PostgreSQL was told to stop, and when it was ready again.
    outage: Option<(OffsetDateTime, OffsetDateTime)>,
    unexpected: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy)]
struct ChaosCounts {
    replica_kills: u64,
    worker_kills: u64,
    listener_kills: u64,
    listeners_terminated: u64,
    pg_restarts: u64,
}

impl Chaos {
    fn note_exits(&mut self, exits: Vec<String>) {
        for e in exits {
            eprintln!("[chaos] UNEXPECTED EXIT: {e}");
            self.unexpected.push(e);
        }
    }

    fn counts(&self) -> ChaosCounts {
        ChaosCounts {
            replica_kills: self.replica_kills,
            worker_kills: self.worker_kills,
            listener_kills: self.listener_kills,
            listeners_terminated: self.listeners_terminated,
            pg_restarts: self.pg_restarts,
        }
    }
}

/// Every 1 to 3 s, one action; PostgreSQL restarts once, around the middle.
async fn chaos_loop(
    rng: &mut StdRng,
    fleet: &mut Fleet,
    audit_db: &AuditDb,
    mut db: DevDatabase,
    duration: Duration,
    t0: Instant,
) -> anyhow::Result<(DevDatabase, Chaos)> {
    let start = Instant::now();
    let end = start + duration;
    let pg_at = start + duration.mul_f64(rng.random_range(0.4..0.6));
    let mut chaos = Chaos::default();
    let t = || t0.elapsed().as_secs_f64();
    loop {
        let pause = Duration::from_millis(rng.random_range(1000..=3000));
        if Instant::now() + pause >= end {
            tokio::time::sleep_until(end).await;
            break;
        }
        tokio::time::sleep(pause).await;
        let exits = fleet.exited_on_their_own();
        chaos.note_exits(exits);
        fleet.ensure_running().await?;

        if chaos.pg_restarts == 0 && Instant::now() >= pg_at {
            db = restart_postgres(rng, db, &mut chaos, t0).await?;
            continue;
        }
        match rng.random_range(0..10) {
            0..4 => {
                let i = rng.random_range(0..fleet.replica_count());
                let down = Duration::from_millis(rng.random_range(200..=1500));
                let name = fleet.kill_replica(i).await;
                chaos.replica_kills += 1;
                eprintln!(
                    "[chaos] t={:.1}s SIGKILL {name}; restarting in {down:?}",
                    t()
                );
                tokio::time::sleep(down).await;
                fleet.start_replica(i).await?;
            }
            4..8 => {
                let i = rng.random_range(0..fleet.worker_count());
                let down = Duration::from_millis(rng.random_range(200..=1500));
                let id = fleet.worker_id(i);
                let held = audit_db.held_by(&id).await;
                let before = OffsetDateTime::now_utc();
                let name = fleet.kill_worker(i).await;
                chaos
                    .killed
                    .insert(id.clone(), (before, OffsetDateTime::now_utc()));
                chaos.worker_kills += 1;
                match held {
                    Ok((at, held)) => {
                        eprintln!(
                            "[chaos] t={:.1}s SIGKILL {name} holding {} task(s); next generation in {down:?}",
                            t(),
                            held.len()
                        );
                        chaos.worker_kills_held.push(WorkerKill {
                            worker: id.clone(),
                            at,
                            held,
                        });
                    }
                    Err(e) => eprintln!(
                        "[chaos] t={:.1}s SIGKILL {name} (could not read what it held: {e})",
                        t()
                    ),
                }
                tokio::time::sleep(down).await;
                fleet.start_worker(i).await?;
            }
            _ => match audit_db.terminate_listeners().await {
                Ok(n) => {
                    chaos.listener_kills += 1;
                    chaos.listeners_terminated += n;
                    eprintln!("[chaos] t={:.1}s terminated {n} LISTEN backend(s)", t());
                }
                Err(e) => eprintln!("[chaos] t={:.1}s could not terminate listeners: {e}", t()),
            },
        }
    }
    if chaos.pg_restarts == 0 {
        db = restart_postgres(rng, db, &mut chaos, t0).await?;
    }
    Ok((db, chaos))
}

/// Fast shutdown, 1 to 3 s of outage, start on the same port and data.
async fn restart_postgres(
    rng: &mut StdRng,
    mut db: DevDatabase,
    chaos: &mut Chaos,
    t0: Instant,
) -> anyhow::Result<DevDatabase> {
    let down = Duration::from_millis(rng.random_range(1000..=3000));
    eprintln!(
        "[chaos] t={:.1}s stopping PostgreSQL for {down:?}",
        t0.elapsed().as_secs_f64()
    );
    let stopped = Instant::now();
    let stopped_at = OffsetDateTime::now_utc();
    db = tokio::task::spawn_blocking(move || {
        db.stop();
        db
    })
    .await?;
    tokio::time::sleep(down).await;
    let (db, started) = tokio::task::spawn_blocking(move || {
        let started = db.start_again();
        (db, started)
    })
    .await?;
    started.context("starting PostgreSQL again")?;
    chaos.outage = Some((stopped_at, OffsetDateTime::now_utc()));
    chaos.pg_restarts += 1;
    eprintln!(
        "[chaos] t={:.1}s PostgreSQL is back after {:.1} s",
        t0.elapsed().as_secs_f64(),
        stopped.elapsed().as_secs_f64()
    );
    Ok(db)
}

#[derive(Debug, Default)]
struct Report {
    seed: u64,
    tasks: usize,
    lease_ms: u64,
    accepted: usize,
    resolved: u64,
    lost: u64,
    wrong_state: u64,
    crash_recovery: u64,
    lost_runs: u64,
    unexplained_lost_runs: u64,
    /// Of those, runs started by a worker reclaiming its own lapsed lease.
    unexplained_own_reclaims: u64,
    never_accepted: u64,
    script_errors: u64,
    duplicates: u64,
    double_finalized: i64,
    overwritten: i64,
    left_terminal: i64,
    leases_held: i64,
    claims: i64,
    unexpected_exits: u64,
    chaos: ChaosCounts,
    recoveries_ms: Vec<i64>,
    held_not_reclaimed: u64,
    retries: u64,
    log_warn: u64,
    log_error: u64,
    kinds: Vec<String>,
    examples: Vec<String>,
    duration: Duration,
}

impl Report {
    fn percentile(&self, p: f64) -> Option<i64> {
        let v = &self.recoveries_ms;
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        Some(v[i])
    }

    fn summary(&self) -> String {
        let ms = |v: Option<i64>| v.map_or_else(|| "na".to_owned(), |v| v.to_string());
        format!(
            "chaos: seed={} tasks={} accepted={} resolved={} lost={} wrong_state={} double_finalized={} overwritten={} left_terminal={} leases_held={} never_accepted={} duplicates={} script_errors={} lost_runs={} unexplained_lost_runs={} crash_recovery={} unexpected_exits={} replica_kills={} worker_kills={} listener_kills={} pg_restarts={} recovery_ms_p50={} recovery_ms_max={} duration_s={:.1}",
            self.seed,
            self.tasks,
            self.accepted,
            self.resolved,
            self.lost,
            self.wrong_state,
            self.double_finalized,
            self.overwritten,
            self.left_terminal,
            self.leases_held,
            self.never_accepted,
            self.duplicates,
            self.script_errors,
            self.lost_runs,
            self.unexplained_lost_runs,
            self.crash_recovery,
            self.unexpected_exits,
            self.chaos.replica_kills,
            self.chaos.worker_kills,
            self.chaos.listener_kills,
            self.chaos.pg_restarts,
            ms(self.percentile(0.5)),
            ms(self.recoveries_ms.last().copied()),
            self.duration.as_secs_f64()
        )
    }

    fn recovery_line(&self) -> String {
        let lease = self.lease_ms;
        let bound = lease + POLL_MS;
        let (Some(p50), Some(max)) = (self.percentile(0.5), self.recoveries_ms.last()) else {
            return format!(
                "chaos: no worker was killed while holding a task, so recovery was not measured (bound: lease {lease} ms + poll {POLL_MS} ms = {bound} ms)"
            );
        };
        let above = self
            .recoveries_ms
            .iter()
            .filter(|&&ms| ms > bound as i64)
            .count();
        format!(
            "chaos: a dead worker's task was reclaimed after p50 {p50} ms, max {max} ms, over {} reclaims (bound: lease {lease} ms + poll {POLL_MS} ms = {bound} ms; heartbeats renew the lease every {} ms, so {}–{lease} ms of it remain at the kill; {above} above the bound)",
            self.recoveries_ms.len(),
            lease / 3,
            lease - lease / 3,
        )
    }

    /// The checks that failed.
    fn failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let mut check = |name: &str, n: i64| {
            if n != 0 {
                failed.push(format!("{name}={n}"));
            }
        };
        check("lost", self.lost as i64);
        check("wrong_state", self.wrong_state as i64);
        check("double_finalized", self.double_finalized);
        check("overwritten", self.overwritten);
        check("left_terminal", self.left_terminal);
        check("leases_held", self.leases_held);
        check("never_accepted", self.never_accepted as i64);
        check("duplicates", self.duplicates as i64);
        check("script_errors", self.script_errors as i64);
        check("unexplained_lost_runs", self.unexplained_lost_runs as i64);
        check("unexpected_exits", self.unexpected_exits as i64);
        if self.chaos.pg_restarts != 1 {
            failed.push(format!(
                "pg_restarts={} (expected 1)",
                self.chaos.pg_restarts
            ));
        }
        failed
    }
}
