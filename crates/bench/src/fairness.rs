//! `fairness`: many tenants on one queue.
//!
//! - *Claims*: the fair claim (the store's statement, in `queue_key` order; any tool,
//!   and by tool as workers claim) against the claim as it was, oldest first across
//!   everyone (`OLDEST_FIRST_CLAIM`, on `tasks_queued`), all issued raw, taking batches of
//!   16 from 16 connections out of the same backlog, in rounds of the same number of rows
//!   taking turns (the median round each).
//! - *Pickup*: how long a light tenant's task waits from its create to its claim, with
//!   nothing else queued and while one heavy tenant has its whole backlog queued and a
//!   worker drains it (the heavy tenant's claim rate is printed beside).
//! - The same at 1,000,000 queued tasks of 10,000 tenants (arrived interleaved, and
//!   again arrived tenant by tenant), where a new tenant's task waits one round: one task
//!   of every tenant with work.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks_store::Owner;
use mcp_tasks_store::testing::{FAIR_CLAIM, FAIR_CLAIM_BY_TOOL, OLDEST_FIRST_CLAIM, Seed};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::task::JoinSet;

use crate::env::{CreateScript, Env, target, task_id};
use crate::lifecycle::WORKER_CONCURRENCY;
use crate::load;
use crate::stats::{Summary, ms};

/// Clients claiming at once, and rows each claim asks for.
const CLIENTS: usize = 16;
const BATCH: i64 = 16;

struct Sizes {
    /// Rows each claim round takes.
    round: u64,
    rounds: usize,
    /// The heavy tenant's backlog.
    flood: usize,
    /// The light tenant's tasks, one every `light_every`.
    light: usize,
    light_every: Duration,
    /// The many-tenants case.
    many_tasks: usize,
    many_tenants: usize,
}

impl Sizes {
    fn of(env: &Env) -> Self {
        if env.config.short {
            Self {
                round: 2_000,
                rounds: 3,
                flood: 10_000,
                light: 20,
                light_every: Duration::from_millis(25),
                // Four claims' rounds (24,000 rows) and room to spare.
                many_tasks: 30_000,
                many_tenants: 200,
            }
        } else {
            Self {
                round: 20_000,
                rounds: 3,
                flood: 100_000,
                light: 200,
                light_every: Duration::from_millis(20),
                many_tasks: 1_000_000,
                many_tenants: 10_000,
            }
        }
    }
}

pub(crate) async fn fairness(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    if env.config.url.is_some() {
        writeln!(
            out,
            "fairness: skipped (it loads and empties the database; not with --url)"
        )?;
        return Ok(());
    }
    let sizes = Sizes::of(env);
    // Without JIT, as the store's own connections run (see `Store::connect`): both
    // claims' generic plans then run as a worker's would.
    let raw = PgPoolOptions::new()
        .max_connections(CLIENTS as u32)
        .connect_with(
            env.db
                .url
                .parse::<PgConnectOptions>()?
                .options([("jit", "off")]),
        )
        .await?;

    // One heavy tenant.
    let needed = sizes.round as usize * sizes.rounds * 4 + sizes.flood;
    seed(env, out, (0..needed).map(|_| Owner::new("heavy", "flood"))).await?;
    let (ratio, by_tool) = claims(&raw, &sizes, out, "one tenant").await?;
    target(
        out,
        "fairness claims >= 0.9x the oldest-first claim (any tool; by tool, as workers claim)",
        ratio >= 0.9 && by_tool >= 0.9,
        &format!("{ratio:.3}x; {by_tool:.3}x"),
    )?;
    empty(env).await?;

    let quiet = pickup(env, &sizes, out, "nothing else queued", 0, Pace::Steady).await?;
    seed(
        env,
        out,
        (0..sizes.flood).map(|_| Owner::new("heavy", "flood")),
    )
    .await?;
    let flooded = pickup(
        env,
        &sizes,
        out,
        &format!("{} of one tenant queued", sizes.flood),
        sizes.flood,
        Pace::Steady,
    )
    .await?;
    target(
        out,
        "fairness light-tenant pickup p99 < 50 ms while one tenant floods",
        flooded.p99 < Duration::from_millis(50),
        &format!(
            "p99 {:.2} ms (nothing queued: {:.2} ms)",
            ms(flooded.p99),
            ms(quiet.p99)
        ),
    )?;
    empty(env).await?;

    // Many tenants, their tasks having arrived interleaved (as concurrent callers' do):
    // the fair order then visits the table about as it was written, like oldest first.
    let tenants = sizes.many_tenants;
    let label = format!("{} tasks of {tenants} tenants", sizes.many_tasks);
    let owners = (0..sizes.many_tasks).map(move |i| Owner::new(format!("t{}", i % tenants), "p"));
    seed(env, out, owners).await?;
    let (ratio, by_tool) =
        claims(&raw, &sizes, out, &format!("{label}, arrived interleaved")).await?;
    target(
        out,
        "fairness claims at many tenants >= 0.9x the oldest-first claim (any tool; by tool)",
        ratio >= 0.9 && by_tool >= 0.9,
        &format!("{ratio:.3}x; {by_tool:.3}x"),
    )?;
    pickup(
        env,
        &sizes,
        out,
        &format!("{label} queued, one at a time (a round: a task of each tenant)"),
        sizes.many_tasks,
        Pace::OneAtATime(if env.config.short { 10 } else { 5 }),
    )
    .await?;
    empty(env).await?;
    // The same tasks having arrived tenant by tenant (bulk loads): the fair order takes
    // one row of each tenant in turn, so each claim of 16 dirties some 16 heap pages
    // where oldest first dirties one or two. Printed, not judged: the cost of fairness
    // against the table's physical order.
    let per = sizes.many_tasks / tenants;
    let owners = (0..sizes.many_tasks).map(move |i| Owner::new(format!("t{}", i / per), "p"));
    seed(env, out, owners).await?;
    claims(
        &raw,
        &sizes,
        out,
        &format!("{label}, arrived tenant by tenant"),
    )
    .await?;
    empty(env).await?;
    raw.close().await;
    Ok(())
}

/// Queued tasks of `slow_compute` (0 s) for these owners, in this order.
async fn seed(
    env: &Env,
    out: &mut dyn Write,
    owners: impl Iterator<Item = Owner>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let seeds = owners.map(|owner| Seed {
        arguments: json!({ "seconds": 0 }),
        ..Seed::new(owner, "slow_compute")
    });
    let n = env.db.store.seed(seeds).await?;
    sqlx::query("ANALYZE tasks").execute(&env.db.sql).await?;
    writeln!(
        out,
        "fairness: seeded {n} queued tasks in {:.1} s",
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// Every task and the fair order's bookkeeping gone.
async fn empty(env: &Env) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE tasks, task_events, queue_lanes, queue_clock")
        .execute(&env.db.sql)
        .await?;
    Ok(())
}

/// Rounds of the fair claim (any tool, and by tool as workers claim: their tools'
/// queues, for a worker of one tool and one of four), and the oldest-first one, taking
/// turns; the median rates' ratios to the oldest-first claim: (fair, the slower by tool).
async fn claims(
    raw: &PgPool,
    sizes: &Sizes,
    out: &mut dyn Write,
    label: &str,
) -> anyhow::Result<(f64, f64)> {
    // The tools of each: a worker of the one tool there is, and one of four tools (three
    // with nothing queued), whose claim merges the tools' heads.
    let one: &[&str] = &["slow_compute"];
    let four: &[&str] = &["slow_compute", "idle_a", "idle_b", "idle_c"];
    let statements = [
        (FAIR_CLAIM, "fair", &[][..]),
        (FAIR_CLAIM_BY_TOOL, "by-tool", one),
        (FAIR_CLAIM_BY_TOOL, "four-tools", four),
        (OLDEST_FIRST_CLAIM, "oldest", &[][..]),
    ];
    let mut rates: [Vec<f64>; 4] = Default::default();
    for round in 0..sizes.rounds {
        // Which goes first turns, so none always meets the warmer cache.
        for k in 0..statements.len() {
            let which = (round + k) % statements.len();
            let (statement, name, tools) = statements[which];
            // All raw, from the same pool, with the same parameters and the same rows
            // back: only the statements (and the tools they are given) differ.
            let tools: Vec<String> = tools.iter().map(|t| (*t).to_owned()).collect();
            let raw = raw.clone();
            let claim = move |n| {
                let (raw, tools) = (raw.clone(), tools.clone());
                async move {
                    let rows = sqlx::query(statement)
                        .bind(format!("bench-{name}-{n}"))
                        .bind(BATCH)
                        .bind(600_000_i64)
                        // The status texts are the service's business; any will do.
                        .bind("Running")
                        .bind("Running (attempt {attempt})")
                        .bind(tools)
                        .fetch_all(&raw)
                        .await?;
                    Ok(rows.len() as u64)
                }
            };
            // One claim untimed first. The head of this statement's index holds an entry
            // for each row the other statements took since its last round (dead, each to
            // be visited in the heap once before a scan marks it): a worker's claim never
            // meets those, since in service one statement drains the queue.
            claim(0).await?;
            let rate = claim_rate(sizes.round, claim).await?;
            rates[which].push(rate);
        }
    }
    let [fair, by_tool, four, oldest] = rates.map(|mut r| median(&mut r));
    writeln!(
        out,
        "fairness claims, {label}: fair {fair:>8.0}/s  by tool (one) {by_tool:>8.0}/s  (four) {four:>8.0}/s  oldest first {oldest:>8.0}/s  (c{CLIENTS}, {BATCH} a claim, median of {})  ratios {:.3}, by tool {:.3} and {:.3}",
        sizes.rounds,
        fair / oldest,
        by_tool / oldest,
        four / oldest,
    )?;
    Ok((fair / oldest, by_tool.min(four) / oldest))
}

/// Rows a second while `CLIENTS` clients claim `rows` rows in all with `claim` (given
/// the client's number; it answers how many rows it got).
async fn claim_rate<F, Fut>(rows: u64, claim: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<u64>> + Send,
{
    let claim = Arc::new(claim);
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for n in 0..CLIENTS {
        let (claim, claimed) = (claim.clone(), claimed.clone());
        set.spawn(async move {
            while claimed.load(Ordering::Relaxed) < rows {
                let got = claim(n).await?;
                anyhow::ensure!(got > 0, "the queue ran dry");
                claimed.fetch_add(got, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    Ok(claimed.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// How the light tenant sends its tasks.
#[derive(Clone, Copy)]
enum Pace {
    /// `sizes.light` tasks, one every `sizes.light_every`: well within its share when
    /// one other tenant has work (half the claims).
    Steady,
    /// This many, each once the one before was claimed: with thousands of tenants with
    /// work its share is one claim a round, and a task sent faster would queue behind its
    /// own.
    OneAtATime(usize),
}

/// The light tenant's pickups (create committed to claim) while a worker drains what is
/// queued (`queued` tasks, for the claim rate printed beside).
async fn pickup(
    env: &Env,
    sizes: &Sizes,
    out: &mut dyn Write,
    label: &str,
    queued: usize,
    pace: Pace,
) -> anyhow::Result<Summary> {
    env.service
        .start_worker(WORKER_CONCURRENCY, &env.db.sql)
        .await?;
    // The light tenant is the replica's one caller (no authentication: `default`); its
    // creates go through the replica, which wakes the worker as it would for anyone.
    let mut conn = load::Conn::open(&env.target).await?;
    let script = CreateScript {
        target: env.target.clone(),
        seconds: 0,
        on_created: |_, _| {},
    };
    let others = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM tasks WHERE tenant <> 'default' AND claimed_at IS NOT NULL",
        )
        .fetch_one(&env.db.sql)
        .await
    };
    let others_before = others().await?;
    let started = Instant::now();
    let count = match pace {
        Pace::Steady => sizes.light,
        Pace::OneAtATime(n) => n,
    };
    let mut ids = Vec::with_capacity(count);
    for n in 0..count {
        let (status, body) = conn
            .exchange(&load::Script::request(&script, n as u64))
            .await?;
        anyhow::ensure!(status == 200, "a create answered {status}");
        let id = task_id(body).ok_or_else(|| anyhow::anyhow!("no task id in the answer"))?;
        ids.push(id);
        match pace {
            Pace::Steady => tokio::time::sleep(sizes.light_every).await,
            Pace::OneAtATime(_) => {
                let deadline = Instant::now() + Duration::from_secs(60);
                while sqlx::query_scalar::<_, Option<time::OffsetDateTime>>(
                    "SELECT claimed_at FROM tasks WHERE id = $1",
                )
                .bind(id)
                .fetch_one(&env.db.sql)
                .await?
                .is_none()
                {
                    anyhow::ensure!(Instant::now() < deadline, "a light task waited 60 s");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let waits: Vec<f64> = loop {
        let waits: Vec<f64> = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM claimed_at - created_at)::float8 * 1000
             FROM tasks WHERE id = ANY($1) AND claimed_at IS NOT NULL",
        )
        .bind(&ids)
        .fetch_all(&env.db.sql)
        .await?;
        if waits.len() == ids.len() {
            break waits;
        }
        if Instant::now() >= deadline {
            let (claimed, clock, keys): (i64, f64, Vec<f64>) = sqlx::query_as(
                "SELECT (SELECT count(*) FROM tasks WHERE claimed_at IS NOT NULL),
                        mcp_tasks_queue_clock(),
                        (SELECT array_agg(queue_key) FROM tasks WHERE id = ANY($1))",
            )
            .bind(&ids)
            .fetch_one(&env.db.sql)
            .await?;
            anyhow::bail!(
                "the light tenant's tasks were not all claimed in 120 s ({} of {}; {claimed} claimed in all; clock {clock}; their keys {keys:?})",
                waits.len(),
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let window = started.elapsed();
    let others = others().await? - others_before;
    env.service.stop_worker().await;
    let summary = Summary::of(
        waits
            .iter()
            .map(|w| Duration::from_secs_f64(w.max(0.0) / 1000.0))
            .collect(),
    )
    .ok_or_else(|| anyhow::anyhow!("no pickups"))?;
    let rate = if queued > 0 {
        format!(
            "  others claimed {:.0}/s meanwhile",
            others as f64 / window.as_secs_f64()
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "fairness light-tenant pickup, {label}: n={} p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms{rate}",
        waits.len(),
        ms(summary.p50),
        ms(summary.p99),
        ms(summary.max),
    )?;
    Ok(summary)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
