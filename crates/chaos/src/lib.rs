//! `mcp-tasks chaos`: real processes on loopback (N replicas, M workers, one throwaway
//! PostgreSQL), K task scripts driven through random replicas while replicas and
//! workers are SIGKILLed and restarted, LISTEN backends are terminated and PostgreSQL
//! restarts once. Then it checks, from the client side and from an audit trigger in the
//! database, that nothing was lost, finalized twice or overwritten, and that no lease is
//! left held; and it measures how long a dead worker's task waits before it runs again.
//!
//! Every random choice comes from one seed, printed at the start and in the summary, so
//! a run's sequence of scripts and chaos actions can be replayed (timing still varies).

mod actions;
mod analysis;
mod audit;
mod driver;
mod failover;
mod fleet;
mod report;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_tasks_devdb::DevDatabase;
use mcp_tasks_store::{PoolConfig, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::actions::chaos_loop;
use crate::audit::AuditDb;
use crate::driver::{Api, Kind, Outcome, Script};
use crate::fleet::{Fleet, Settings};
use crate::report::{Report, check_outcomes};

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
    /// Fail over to a synchronous standby instead of restarting PostgreSQL in place.
    pub failover: bool,
    /// Put the processes behind PgBouncer in transaction mode.
    pub pooler: bool,
}

/// Runs the harness, prints the summary on stdout, and fails when a check failed.
pub async fn run(config: &Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    if config.replicas == 0 || config.workers == 0 || config.concurrency == 0 || config.tasks == 0 {
        bail!("--tasks, --replicas, --workers and --concurrency must be at least 1");
    }
    if config.lease_ms < 30 {
        bail!("--lease-ms must be at least 30");
    }
    if config.failover && config.pooler {
        // The pooler would need repointing at the promoted standby, which is the
        // failover manager's part (Patroni, a proxy), not the service's.
        bail!("--failover and --pooler cannot be combined");
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
    let standby = if config.failover {
        let standby = failover::synchronous_standby(&db).await?;
        eprintln!(
            "[chaos] a synchronous standby at {} ({})",
            standby.url(),
            standby.data_dir().display()
        );
        Some(standby)
    } else {
        None
    };
    let pooler = if config.pooler {
        let pooler = tokio::task::block_in_place(|| db.pooler()).context("starting PgBouncer")?;
        eprintln!("[chaos] PgBouncer (transaction mode) at {}", pooler.url());
        Some(pooler)
    } else {
        None
    };
    let (database_url, direct_url) = match (&standby, &pooler) {
        (Some(standby), _) => (failover::url(&db, standby), None),
        (None, Some(pooler)) => (pooler.url().to_owned(), Some(db.url().to_owned())),
        (None, None) => (db.url().to_owned(), None),
    };
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
            database_url,
            direct_url,
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
        standby,
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
