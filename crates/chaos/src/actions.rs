//! The chaos itself: every 1 to 3 s a replica or a worker is SIGKILLed and started again,
//! or the LISTEN backends are terminated; PostgreSQL restarts once, around the middle.
//! What was done is counted, and what each killed worker held is kept for the recovery
//! measurement.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use mcp_tasks_devdb::DevDatabase;
use mcp_tasks_store::TaskId;
use rand::Rng;
use rand::rngs::StdRng;
use time::OffsetDateTime;
use tokio::time::Instant;

use crate::audit::AuditDb;
use crate::fleet::Fleet;

/// One worker SIGKILL and what that worker held just before.
#[derive(Debug)]
pub(crate) struct WorkerKill {
    pub(crate) worker: String,
    /// The database's clock just before the kill.
    pub(crate) at: OffsetDateTime,
    pub(crate) held: Vec<(TaskId, i64)>,
}

#[derive(Debug, Default)]
pub(crate) struct Chaos {
    pub(crate) replica_kills: u64,
    pub(crate) worker_kills: u64,
    pub(crate) listener_kills: u64,
    pub(crate) listeners_terminated: u64,
    pub(crate) pg_restarts: u64,
    pub(crate) failovers: u64,
    /// With a failover: how long after the promotion the slowest replica was ready again.
    pub(crate) failover_ms: Option<i64>,
    pub(crate) worker_kills_held: Vec<WorkerKill>,
    /// Worker id → wall clock just before its SIGKILL and once it was reaped.
    pub(crate) killed: HashMap<String, (OffsetDateTime, OffsetDateTime)>,
    /// Wall clock when PostgreSQL was told to stop, and when it was ready again.
    pub(crate) outage: Option<(OffsetDateTime, OffsetDateTime)>,
    pub(crate) unexpected: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ChaosCounts {
    pub(crate) replica_kills: u64,
    pub(crate) worker_kills: u64,
    pub(crate) listener_kills: u64,
    pub(crate) listeners_terminated: u64,
    pub(crate) pg_restarts: u64,
    pub(crate) failovers: u64,
    pub(crate) failover_ms: Option<i64>,
}

impl Chaos {
    pub(crate) fn note_exits(&mut self, exits: Vec<String>) {
        for e in exits {
            eprintln!("[chaos] UNEXPECTED EXIT: {e}");
            self.unexpected.push(e);
        }
    }

    pub(crate) fn counts(&self) -> ChaosCounts {
        ChaosCounts {
            replica_kills: self.replica_kills,
            worker_kills: self.worker_kills,
            listener_kills: self.listener_kills,
            listeners_terminated: self.listeners_terminated,
            pg_restarts: self.pg_restarts,
            failovers: self.failovers,
            failover_ms: self.failover_ms,
        }
    }
}

/// Every 1 to 3 s, one action; PostgreSQL restarts once, around the middle, or with a
/// `standby`, fails over to it.
pub(crate) async fn chaos_loop(
    rng: &mut StdRng,
    fleet: &mut Fleet,
    audit_db: &AuditDb,
    mut db: DevDatabase,
    mut standby: Option<DevDatabase>,
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

        if chaos.pg_restarts + chaos.failovers == 0 && Instant::now() >= pg_at {
            db = outage(rng, db, standby.take(), fleet, audit_db, &mut chaos, t0).await?;
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
    if chaos.pg_restarts + chaos.failovers == 0 {
        db = outage(rng, db, standby.take(), fleet, audit_db, &mut chaos, t0).await?;
    }
    Ok((db, chaos))
}

/// The database's one outage: a failover to `standby` when there is one, otherwise a
/// restart in place. Returns the database that serves after it.
async fn outage(
    rng: &mut StdRng,
    db: DevDatabase,
    standby: Option<DevDatabase>,
    fleet: &Fleet,
    audit_db: &AuditDb,
    chaos: &mut Chaos,
    t0: Instant,
) -> anyhow::Result<DevDatabase> {
    let Some(standby) = standby else {
        return restart_postgres(rng, db, chaos, t0).await;
    };
    let (db, cost) = crate::failover::fail_over(db, standby, &fleet.urls(), audit_db, t0).await?;
    chaos.failovers += 1;
    chaos.failover_ms = Some(i64::try_from(cost.slowest.as_millis()).unwrap_or(i64::MAX));
    chaos.outage = Some((cost.stopped_at, cost.back_at));
    Ok(db)
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
