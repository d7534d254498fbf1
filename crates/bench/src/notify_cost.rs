//! What NOTIFY costs task transitions, and what our design saves.
//!
//! A NOTIFY takes a cluster-wide lock when its transaction commits, so a design that
//! notifies on every transition serialises all of them. Ours notifies only for tasks some
//! replica watches (the trigger's WHEN clause checks `tasks.watched_until`). This runs the same transition (a
//! fenced status-message update that bumps the task's version) from several clients
//! under four designs, interleaved in rounds, and reports transitions per second:
//!
//! - `no trigger`: the bare UPDATE; the baseline;
//! - `ours, unwatched`: the watchers trigger, nobody watching (the common case);
//! - `ours, all watched`: the watchers trigger, every task watched (every transition notifies);
//! - `NOTIFY always`: the naive design, a NOTIFY in every transition's transaction.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks_store::{Lease, NewTask, Owner, PoolConfig};
use serde_json::{Map, json};
use tokio::task::JoinSet;

use crate::scratch::{self, ScratchDatabase};

#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub clients: usize,
    pub tasks: usize,
    pub seconds: f64,
    pub rounds: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Design {
    NoTrigger,
    Unwatched,
    AllWatched,
    NotifyAlways,
}

impl Design {
    const ALL: [Self; 4] = [
        Self::NoTrigger,
        Self::Unwatched,
        Self::AllWatched,
        Self::NotifyAlways,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::NoTrigger => "no trigger (baseline)",
            Self::Unwatched => "ours, unwatched",
            Self::AllWatched => "ours, all watched",
            Self::NotifyAlways => "NOTIFY always",
        }
    }
}

pub async fn run(config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    let pool = PoolConfig {
        max_connections: u32::try_from(config.clients + 2)?,
        ..PoolConfig::default()
    };
    let db = ScratchDatabase::create(&config.database_url, &pool).await?;
    let result = measure(config, &db, out).await;
    db.drop_database().await?;
    result
}

async fn measure(config: &Config, db: &ScratchDatabase, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = &db.store;
    let owner = Owner::new("bench", "bench");
    for _ in 0..config.tasks {
        store
            .replica()
            .create_task(
                &owner,
                NewTask {
                    tool: "bench".into(),
                    arguments: json!({}),
                    status_message: None,
                    ttl_ms: None,
                    poll_interval_ms: None,
                    retention_ms: 60_000,
                    max_attempts: 1,
                    input_responses: Map::new(),
                    trace_context: None,
                    client_capabilities: None,
                    idempotency: None,
                },
            )
            .await?;
    }
    let leases: Vec<Lease> = store
        .worker()
        .claim("bench", i64::try_from(config.tasks)?, 3_600_000)
        .await?
        .into_iter()
        .map(|c| c.lease)
        .collect();
    anyhow::ensure!(leases.len() == config.tasks, "could not claim every task");
    let leases = Arc::new(leases);

    writeln!(
        out,
        "notify-cost: {} clients, {} tasks, {} s per design, {} rounds (synchronous_commit as configured on the server)",
        config.clients, config.tasks, config.seconds, config.rounds
    )?;
    let mut rates: Vec<(Design, Vec<f64>)> = Design::ALL.iter().map(|d| (*d, Vec::new())).collect();
    for round in 0..config.rounds {
        for (design, samples) in &mut rates {
            prepare(db, *design, &owner, &leases).await?;
            let rate = run_design(db, *design, &leases, config).await?;
            writeln!(
                out,
                "  round {}: {:<22} {:>8.0} transitions/s",
                round + 1,
                design.name(),
                rate
            )?;
            samples.push(rate);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let baseline = median(&rates[0].1);
    writeln!(
        out,
        "notify-cost: median transitions/s, and ratio to the baseline"
    )?;
    for (design, samples) in &rates {
        let m = median(samples);
        writeln!(
            out,
            "  {:<22} {:>8.0}/s  ratio {:.2}",
            design.name(),
            m,
            m / baseline
        )?;
    }
    let ours = median(&rates[1].1);
    let naive = median(&rates[3].1);
    writeln!(
        out,
        "notify-cost: ours (unwatched) vs NOTIFY always: {:.2}x the transitions per second",
        ours / naive
    )?;
    Ok(())
}

async fn prepare(
    db: &ScratchDatabase,
    design: Design,
    owner: &Owner,
    leases: &[Lease],
) -> anyhow::Result<()> {
    db.set_watch_trigger(matches!(design, Design::Unwatched | Design::AllWatched))
        .await?;
    let keys: Vec<_> = leases.iter().map(|l| (owner.clone(), l.id)).collect();
    if design == Design::AllWatched {
        db.store.replica().watch(&keys, 3_600_000).await?;
    } else {
        db.unwatch_all().await?;
    }
    Ok(())
}

async fn run_design(
    db: &ScratchDatabase,
    design: Design,
    leases: &Arc<Vec<Lease>>,
    config: &Config,
) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for c in 0..config.clients {
        let (store, sql, leases, stop, done) = (
            db.store.clone(),
            db.sql.clone(),
            leases.clone(),
            stop.clone(),
            done.clone(),
        );
        let clients_n = config.clients;
        clients.spawn(async move {
            // Each client owns a slice of the tasks, so clients never wait on each
            // other's row locks: only the commit path is shared.
            let mine: Vec<&Lease> = leases.iter().skip(c).step_by(clients_n).collect();
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                let lease = mine[(n as usize) % mine.len()];
                // Alternate per pass over the slice, so every update really changes the
                // message (an unchanged message is not a transition).
                let message = if (n as usize / mine.len()).is_multiple_of(2) {
                    "a"
                } else {
                    "b"
                };
                let changed = if design == Design::NotifyAlways {
                    scratch::status_with_notify(&sql, lease, message).await?
                } else {
                    store.worker().set_status_message(lease, message).await?
                };
                anyhow::ensure!(changed, "a bench transition was refused");
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(config.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    while let Some(joined) = clients.join_next().await {
        joined??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64())
}
