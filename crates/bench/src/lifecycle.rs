//! Tasks run to completion: `lifecycle` (throughput and end-to-end latency), `pickup`
//! (commit of a new task to its handler starting) and `efficiency` (what each task costs
//! the database).
//!
//! End-to-end latency is from the moment the `tools/call` was sent to the task's
//! `finished_at` (the finishing statement's `now()`), both on this machine's clock.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sqlx::PgPool;
use uuid::Uuid;

use crate::baseline;
use crate::env::{CreateScript, Env, figures, target};
use crate::finished;
use crate::load::{self, Run};
use crate::stats::{Summary, ms};

/// Tasks a worker runs at once in these scenarios.
pub(crate) const WORKER_CONCURRENCY: usize = 64;

/// What one lifecycle measurement found.
#[derive(Debug, Clone)]
pub(crate) struct Cycle {
    pub(crate) tasks: usize,
    /// Tasks finished per second, from the first create sent to the last finish.
    pub(crate) rate: f64,
    pub(crate) end_to_end: Option<Summary>,
    pub(crate) create: Run,
    /// Statements this benchmark ran on the service's database while waiting (their
    /// commits are not the service's).
    pub(crate) polls: u64,
}

impl Cycle {
    fn line(&self) -> String {
        let mut s = format!("{:>8.0}/s  ({} tasks)", self.rate, self.tasks);
        if let Some(l) = self.end_to_end {
            s += &format!(
                "  end to end p50 {:>6.2} ms  p99 {:>6.2} ms",
                ms(l.p50),
                ms(l.p99)
            );
        }
        if self.create.errors > 0 {
            s += &format!("  create errors {}", self.create.errors);
        }
        s
    }
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Creates over HTTP (closed loop at `connections`, or open loop at `rate`) for the run's
/// length, waits for every task to finish, and reads when each did.
pub(crate) async fn measure(
    env: &Env,
    connections: usize,
    rate: Option<f64>,
) -> anyhow::Result<Cycle> {
    let created: Arc<Mutex<Vec<(Uuid, Instant)>>> = Arc::default();
    let sink = created.clone();
    let script = Arc::new(CreateScript {
        target: env.target.clone(),
        seconds: 0,
        on_created: move |id, sent| {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((id, sent));
        },
    });
    let (base_instant, base_time) = (Instant::now(), SystemTime::now());
    let create = load::drive(&env.target, connections, env.seconds(), rate, script).await?;
    let created = std::mem::take(&mut *created.lock().unwrap_or_else(|e| e.into_inner()));
    let ids: Vec<Uuid> = created.iter().map(|(id, _)| *id).collect();
    let owner = finished::owner(&env.observed, env.service.started_here(), &ids).await?;
    let waited = finished::wait(&env.observed, &owner, &ids).await?;
    let (finished, read) = finished::finished_at(&env.observed, &owner, &ids).await?;
    let polls = waited + read + u64::from(!env.service.started_here());
    let sent: std::collections::HashMap<Uuid, i64> = created
        .iter()
        .map(|(id, at)| (*id, micros(base_time + (*at - base_instant))))
        .collect();
    let first = sent.values().copied().min().unwrap_or(0);
    let last = finished.iter().map(|(_, f)| *f).max().unwrap_or(first);
    let latencies: Vec<Duration> = finished
        .iter()
        .filter_map(|(id, f)| {
            let s = sent.get(id)?;
            Some(Duration::from_micros(u64::try_from(f - s).unwrap_or(0)))
        })
        .collect();
    Ok(Cycle {
        tasks: finished.len(),
        rate: finished.len() as f64 / ((last - first) as f64 / 1e6).max(1e-6),
        end_to_end: Summary::of(latencies),
        create,
        polls,
    })
}

/// The raw cycle, then ours at its peak and at half of it. Returns ours at the peak and
/// the raw rate.
pub(crate) async fn lifecycle(env: &Env, out: &mut dyn Write) -> anyhow::Result<(Cycle, f64)> {
    let pg = pgbench_cycle(env, out).await?;
    let raw = raw_cycle(env).await?;
    env.service
        .start_worker(WORKER_CONCURRENCY, &env.db.sql)
        .await?;
    let peak = measure(env, 16, None).await?;
    let half = measure(env, 64, Some(peak.rate / 2.0)).await?;
    writeln!(
        out,
        "lifecycle raw create+claim+complete, unbatched, c16  {}",
        figures(&raw)
    )?;
    writeln!(
        out,
        "lifecycle ours, c16 closed loop                      {}   ratio {:.3}",
        peak.line(),
        peak.rate / raw.rate().max(1e-9)
    )?;
    writeln!(
        out,
        "lifecycle ours, open loop at half the peak ({:.0}/s)  {}",
        peak.rate / 2.0,
        half.line()
    )?;
    let ratio = peak.rate / raw.rate().max(1e-9);
    target(
        out,
        "lifecycle >= 1.0x the raw unbatched cycle",
        ratio >= 1.0,
        &format!("{ratio:.3}x"),
    )?;
    if let Some(pg) = &pg {
        let ratio = peak.rate / pg.rate().max(1e-9);
        target(
            out,
            "lifecycle >= 1.0x pgbench's unbatched create+claim+complete",
            ratio >= 1.0,
            &format!("{ratio:.3}x"),
        )?;
    }
    let p99 = half.end_to_end.map_or(f64::INFINITY, |l| ms(l.p99));
    target(
        out,
        "lifecycle end-to-end p99 < 50 ms at half the peak rate",
        p99 < 50.0,
        &format!("p99 {p99:.2} ms"),
    )?;
    env.service.stop_worker().await;
    Ok((peak, raw.rate()))
}

/// pgbench's create → claim → complete cycle at c16, with no worker about, over a
/// backlog of queued tasks so that a claim always finds one (pgbench stops a client
/// whose claim finds none); its rows are removed afterwards.
async fn pgbench_cycle(env: &Env, out: &mut dyn Write) -> anyhow::Result<Option<Run>> {
    if !crate::pgbench::available().await {
        return crate::pgbench::baseline(
            out,
            "lifecycle pgbench",
            "",
            &crate::pgbench::Script::Cycle,
            16,
            env.seconds(),
        )
        .await;
    }
    for n in 0..1000 {
        baseline::insert()(env.db.sql.clone(), n).await?;
    }
    let pg = crate::pgbench::baseline(
        out,
        "lifecycle pgbench create+claim+complete, unbatched, c16",
        &env.db.url,
        &crate::pgbench::Script::Cycle,
        16,
        env.seconds(),
    )
    .await?;
    sqlx::query("DELETE FROM tasks")
        .execute(&env.db.sql)
        .await?;
    Ok(pg)
}

/// The raw create → claim → complete cycle at c16, with no worker about (it would claim
/// the baseline's tasks); its rows are removed afterwards.
pub(crate) async fn raw_cycle(env: &Env) -> anyhow::Result<Run> {
    let raw = baseline::drive(&env.db.url, 16, env.seconds(), baseline::cycle()).await?;
    sqlx::query("DELETE FROM tasks WHERE lease_owner = 'raw' OR status = 'completed'")
        .execute(&env.db.sql)
        .await?;
    Ok(raw)
}

/// Commit of a new task (its `CreateTaskResult` received) to its handler's first write,
/// one task at a time. A trigger of the benchmark's own records that write's time.
pub(crate) async fn pickup(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    if env.config.url.is_some() {
        writeln!(
            out,
            "pickup: skipped (it installs a trigger; not with --url)"
        )?;
        return Ok(());
    }
    for statement in [
        "CREATE TABLE bench_started (id uuid PRIMARY KEY, at timestamptz NOT NULL)",
        "CREATE FUNCTION bench_started() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO bench_started VALUES (NEW.id, clock_timestamp()) ON CONFLICT DO NOTHING;
             RETURN NULL;
         END $$",
        "CREATE TRIGGER bench_started AFTER UPDATE ON tasks FOR EACH ROW
         WHEN (NEW.status_message LIKE 'Computing job: 0 of%'
               AND OLD.status_message IS DISTINCT FROM NEW.status_message)
         EXECUTE FUNCTION bench_started()",
    ] {
        sqlx::query(statement).execute(&env.db.sql).await?;
    }
    env.service
        .start_worker(WORKER_CONCURRENCY, &env.db.sql)
        .await?;
    let samples = if env.config.short { 20 } else { 200 };
    let mut conn = load::Conn::open(&env.target).await?;
    let script = CreateScript {
        target: env.target.clone(),
        seconds: 1,
        on_created: |_, _| {},
    };
    let mut answered = Vec::with_capacity(samples);
    for n in 0..samples {
        let (_, body) = conn
            .exchange(&load::Script::request(&script, n as u64))
            .await?;
        let at = SystemTime::now();
        let id = crate::env::task_id(body).context("the create failed")?;
        answered.push((id, micros(at)));
        // Spaced out, so each task is picked up on its own; each runs a second, which
        // the worker's slots allow for.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started: std::collections::HashMap<Uuid, i64> =
        sqlx::query_as("SELECT id, (extract(epoch FROM at) * 1000000)::bigint FROM bench_started")
            .fetch_all(&env.db.sql)
            .await?
            .into_iter()
            .collect();
    let latencies: Vec<Duration> = answered
        .iter()
        .filter_map(|(id, at)| {
            Some(Duration::from_micros(
                u64::try_from(started.get(id)? - at).unwrap_or(0),
            ))
        })
        .collect();
    let summary = Summary::of(latencies);
    writeln!(
        out,
        "pickup: CreateTaskResult received -> handler's first write: {}",
        summary.map_or_else(|| "no samples".to_owned(), |s| s.to_string())
    )?;
    let p50 = summary.map_or(f64::INFINITY, |s| ms(s.p50));
    target(
        out,
        "pickup p50 < 5 ms",
        p50 < 5.0,
        &format!("p50 {p50:.2} ms"),
    )?;
    env.service.stop_worker().await;
    Ok(())
}

/// Database counters of one stretch of work.
#[derive(Debug, Clone)]
struct Counters {
    commits: i64,
    wal: i64,
    lsn: String,
}

async fn counters(sql: &PgPool) -> anyhow::Result<Counters> {
    // Busy backends report their counters at most every second; the ones measured have
    // exited by now, which reports theirs.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (commits, wal, lsn): (i64, i64, String) = sqlx::query_as(
        "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
                pg_current_wal_flush_lsn()::text
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(sql)
    .await?;
    Ok(Counters { commits, wal, lsn })
}

/// The WAL that touched this database's relations between two points (pg_walinspect:
/// records and full-page images with a block of this database), and this database's
/// commit records (about 40 bytes each); why not, when it cannot.
async fn own_wal(sql: &PgPool, before: &Counters, after: &Counters) -> Result<i64, String> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .execute(sql)
        .await
        .map_err(|e| e.to_string())?;
    let bytes: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(record_length), 0)::bigint
         FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
         WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database
                                       WHERE datname = current_database()) || '/%'",
    )
    .bind(&before.lsn)
    .bind(&after.lsn)
    .fetch_one(sql)
    .await
    .map_err(|e| e.to_string())?;
    Ok(bytes + 40 * (after.commits - before.commits))
}

/// Commits and WAL bytes per task: this database's WAL when pg_walinspect can tell it,
/// else the whole server's.
async fn per_task(
    sql: &PgPool,
    before: &Counters,
    after: &Counters,
    tasks: usize,
) -> (f64, f64, Result<(), String>) {
    let n = tasks.max(1) as f64;
    let own = own_wal(sql, before, after).await;
    (
        (after.commits - before.commits) as f64 / n,
        own.as_ref().copied().unwrap_or(after.wal - before.wal) as f64 / n,
        own.map(|_| ()),
    )
}

/// Commits and WAL per task of our lifecycle and of the raw cycle, and the table after.
pub(crate) async fn efficiency(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    anyhow::ensure!(
        env.service.started_here(),
        "efficiency stops the service to read its counters; it runs against one it starts"
    );
    let sql = &env.observed;
    // The raw cycle's connections are closed afterwards, which makes them report.
    let before = counters(sql).await?;
    let raw = baseline::drive(&env.db.url, 16, env.seconds(), baseline::cycle()).await?;
    let after = counters(sql).await?;
    let (raw_commits, raw_wal, raw_own) = per_task(sql, &before, &after, raw.ok as usize).await;
    sqlx::query("DELETE FROM tasks")
        .execute(&env.db.sql)
        .await?;

    env.service
        .start_worker(WORKER_CONCURRENCY, &env.db.sql)
        .await?;
    let before = counters(sql).await?;
    let ours = measure(env, 16, None).await?;
    // Stopped, so that their connections report what they did.
    env.service.stop_worker().await;
    env.service.stop_replica().await;
    let mut after = counters(sql).await?;
    after.commits -= i64::try_from(ours.polls).unwrap_or(0);
    let (commits, wal, own) = per_task(sql, &before, &after, ours.tasks).await;
    writeln!(
        out,
        "efficiency raw unbatched cycle: {raw_commits:.2} commits/task, {:.0} B WAL/task ({} tasks)",
        raw_wal, raw.ok
    )?;
    writeln!(
        out,
        "efficiency ours (c16):          {commits:.2} commits/task, {wal:.0} B WAL/task ({} tasks)   ratios {:.2}x commits, {:.2}x WAL",
        ours.tasks,
        commits / raw_commits.max(1e-9),
        wal / raw_wal.max(1e-9)
    )?;
    writeln!(
        out,
        "efficiency note: {}",
        match own.and(raw_own) {
            Ok(()) => "WAL is this database's (pg_walinspect: records touching its relations, full-page images included, plus commit records)".to_owned(),
            Err(why) => format!("WAL is the whole server's, other databases' writes included (pg_walinspect could not tell: {why})"),
        }
    )?;
    let (dead, live, table, indexes): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT n_dead_tup, n_live_tup, pg_relation_size('tasks'), pg_indexes_size('tasks')
         FROM pg_stat_user_tables WHERE relname = 'tasks'",
    )
    .fetch_one(sql)
    .await?;
    writeln!(
        out,
        "efficiency table after: {live} live / {dead} dead tuples, table {} KiB, indexes {} KiB",
        table / 1024,
        indexes / 1024
    )?;
    target(
        out,
        "efficiency <= 3 commits and 3 KB of WAL per task",
        commits <= 3.0 && wal <= 3072.0,
        &format!("{commits:.2} commits, {wal:.0} B"),
    )?;
    Ok(())
}
