//! `scale`: `create`, `get` and `lifecycle` on an empty store and on one with a million
//! finished tasks and a hundred thousand queued ones in the table (loaded in bulk), in
//! alternating passes; and the time of each maintenance statement at that size.

use std::io::Write;
use std::time::{Duration, Instant};

use mcp_tasks_store::Owner;
use mcp_tasks_store::testing::{Seed, SeedState};
use serde_json::json;
use time::OffsetDateTime;

use crate::create_get::{create_at, get_at};
use crate::env::{Env, target};
use crate::lifecycle;
use crate::stats::ms;

struct Sizes {
    finished: i64,
    queued: i64,
    tombstones: i64,
    /// Rows each maintenance statement finds to do.
    due: i64,
}

/// Figures of one pass, to compare the loaded store with the empty one.
#[derive(Clone, Copy)]
struct Pass {
    create: f64,
    create_p99: f64,
    /// The raw one-row INSERT beside it, which keeps random v4 keys.
    create_raw: f64,
    get: f64,
    lifecycle: f64,
}

async fn pass(env: &Env, out: &mut dyn Write, label: &str) -> anyhow::Result<Pass> {
    let (create, create_raw) = create_at(env, 16).await?;
    let (get, get_raw) = get_at(env, 16).await?;
    env.service.start_worker(64, &env.db.sql).await?;
    let cycle = lifecycle::measure(env, 16, None).await?;
    env.service.stop_worker().await;
    writeln!(
        out,
        "scale {label:<14} create c16 {:>8.0}/s (raw INSERT {:>8.0}/s)  get c16 {:>8.0}/s (raw {:>8.0}/s)  lifecycle c16 {:>7.0}/s",
        create.rate(),
        create_raw.rate(),
        get.rate(),
        get_raw.rate(),
        cycle.rate
    )?;
    Ok(Pass {
        create: create.rate(),
        create_p99: crate::env::p99_ms(&create),
        create_raw: create_raw.rate(),
        get: get.rate(),
        lifecycle: cycle.rate,
    })
}

/// Back to an empty store: every row the last pass left (its lifecycle's finished tasks
/// and their history) gone, and statistics that say so. Deleted and vacuumed, not
/// truncated: a truncated table makes every insert extend the file, which at c16 queues
/// on the relation's extension lock, while the loaded table (vacuumed after each pass's
/// creates are deleted) refills free space; the two would differ in that, not in size.
async fn empty_again(env: &Env) -> anyhow::Result<()> {
    for statement in [
        "DELETE FROM task_events",
        "DELETE FROM tasks",
        "VACUUM ANALYZE tasks, task_events",
    ] {
        sqlx::query(statement).execute(&env.db.sql).await?;
    }
    Ok(())
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Two stores side by side, each with a service of its own: `env`'s, kept empty, and
/// another bulk-loaded. Their passes alternate (empty, loaded; then loaded, empty; ...) and
/// each round's pair gives one ratio per figure, so that a machine whose speed drifts
/// over the minutes of a run (a shared one does, by tens of percent) slows both sides of
/// a ratio alike; the target is judged on the median ratio over the rounds.
pub(crate) async fn scale(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    anyhow::ensure!(
        env.config.url.is_none(),
        "scale bulk-loads its database; it runs against a service it starts itself"
    );
    let loaded = Env::start(&env.config).await?;
    let result = compare(env, &loaded, out).await;
    let stopped = loaded.stop().await;
    result.and(stopped)
}

async fn compare(empty: &Env, loaded: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    let (sizes, rounds) = if empty.config.short {
        (
            Sizes {
                finished: 20_000,
                queued: 2_000,
                tombstones: 2_000,
                due: 100,
            },
            1,
        )
    } else {
        (
            Sizes {
                finished: 1_000_000,
                queued: 100_000,
                tombstones: 100_000,
                due: 100,
            },
            3,
        )
    };
    let started = Instant::now();
    load(loaded, &sizes).await?;
    writeln!(
        out,
        "scale: loaded {} finished, {} queued tasks and {} tombstones in {:.1} s",
        sizes.finished,
        sizes.queued,
        sizes.tombstones,
        started.elapsed().as_secs_f64()
    )?;
    let bytes: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('tombstones')")
        .fetch_one(&loaded.db.sql)
        .await?;
    writeln!(
        out,
        "scale: tombstones take {:.0} bytes each (table and indexes)",
        bytes as f64 / sizes.tombstones.max(1) as f64
    )?;
    // Before any pass, whose worker's own maintenance would leave nothing due.
    maintenance(loaded, out).await?;

    let mut pairs: Vec<(Pass, Pass)> = Vec::new();
    for round in 1..=rounds {
        let mut figures = [None, None];
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for side in order {
            let (env, label) = if side == 0 {
                empty_again(empty).await?;
                (empty, format!("round {round} empty"))
            } else {
                (loaded, format!("round {round} loaded"))
            };
            checkpoint(env, out).await?;
            figures[side] = Some(pass(env, out, &label).await?);
        }
        if let [Some(e), Some(l)] = figures {
            pairs.push((e, l));
        }
    }
    let ratio = |f: fn(&Pass) -> f64| median(pairs.iter().map(|(e, l)| f(l) / f(e)).collect());
    for (name, r) in [
        ("create", ratio(|p| p.create)),
        ("get", ratio(|p| p.get)),
        ("lifecycle", ratio(|p| p.lifecycle)),
    ] {
        target(
            out,
            &format!(
                "scale {name} within 10 % of the empty store (loaded/empty, median of {rounds} round{})",
                if rounds == 1 { "" } else { "s" }
            ),
            r >= 0.9,
            &format!("{r:.3}x"),
        )?;
    }
    writeln!(
        out,
        "scale raw one-row INSERT (random v4 keys) loaded/empty: {:.3}x",
        ratio(|p| p.create_raw)
    )?;
    writeln!(
        out,
        "scale create p99 (median of rounds): empty {:.2} ms, loaded {:.2} ms",
        median(pairs.iter().map(|(e, _)| e.create_p99).collect()),
        median(pairs.iter().map(|(_, l)| l.create_p99).collect()),
    )?;
    Ok(())
}

/// The bulk load, bypassing the service on purpose: tasks seeded through the store
/// (`testing`), tombstones in the benchmark's own SQL.
async fn load(env: &Env, sizes: &Sizes) -> anyhow::Result<()> {
    let now = OffsetDateTime::now_utc();
    let minutes = |m: i64| time::Duration::minutes(m);
    let bulk = |g: i64, tool: &str| Seed {
        arguments: json!({ "seconds": 0 }),
        poll_interval_ms: Some(500),
        ..Seed::new(Owner::new("bulk", format!("p{}", g % 1000)), tool)
    };
    // Finished, readable for another hour; `due` of them past it (for deletion).
    let finished = (1..=sizes.finished).map(|g| {
        let due = g <= sizes.due;
        Seed {
            state: SeedState::Completed {
                result: json!({
                    "content": [{ "type": "text", "text": "Computed job in 0 s." }],
                    "isError": false
                }),
                finished_at: now - minutes(5),
            },
            status_message: Some("Completed".into()),
            // 65 minutes from creation: an hour from now, or (due) a minute ago.
            created_at: now - minutes(if due { 66 } else { 5 }),
            ttl_ms: Some(3_900_000),
            attempt: 1,
            ..bulk(g, "slow_compute")
        }
    });
    // Queued, due tomorrow (so no worker of this run takes them); `due` of them past
    // their TTL (for expiry).
    let queued = (1..=sizes.queued).map(|g| {
        let due = g <= sizes.due;
        Seed {
            state: SeedState::Queued {
                run_after: Some(now + time::Duration::days(1)),
            },
            status_message: Some("Queued; waiting for a worker".into()),
            created_at: if due {
                now - time::Duration::seconds(61)
            } else {
                now
            },
            ttl_ms: due.then_some(1000),
            ..bulk(g, "slow_compute")
        }
    });
    // Leases lapsed with every attempt used (for rescue).
    let lapsed = (1..=sizes.due).map(|_| Seed {
        state: SeedState::Leased {
            worker: "gone".into(),
            token: 3,
            expires_at: now - minutes(1),
        },
        attempt: 3,
        arguments: json!({ "seconds": 0 }),
        ..Seed::new(Owner::new("bulk", "lapsed"), "slow_compute")
    });
    env.db
        .store
        .seed(finished.chain(queued).chain(lapsed))
        .await?;
    // Tombstones, `due` of them older than their retention (for the purge).
    sqlx::query(
        r"INSERT INTO tombstones (owner, id, deleted_at)
          SELECT mcp_tasks_owner_digest('bulk', 'p' || (g % 1000)), gen_random_uuid(),
              CASE WHEN g <= $2 THEN now() - interval '8 days' ELSE now() END
          FROM generate_series(1, $1) g",
    )
    .bind(sizes.tombstones)
    .bind(sizes.due)
    .execute(&env.db.sql)
    .await?;
    for statement in ["VACUUM ANALYZE tasks", "VACUUM ANALYZE tombstones"] {
        sqlx::query(statement).execute(&env.db.sql).await?;
    }
    Ok(())
}

/// Both passes start from a checkpoint. The load writes the whole table again (hint
/// bits, the visibility map) and over a gigabyte of WAL: left to itself, PostgreSQL
/// checkpoints in the middle of the loaded pass, which then measures the load's writes and
/// the full-page images every page gets after a checkpoint, not a store that holds 1.1M
/// rows. `CHECKPOINT` needs a superuser (or `pg_checkpoint`); without one, say so.
async fn checkpoint(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    if let Err(e) = sqlx::query("CHECKPOINT").execute(&env.db.sql).await {
        writeln!(
            out,
            "scale: CHECKPOINT refused ({e}): the figures may include a checkpoint's writes"
        )?;
    }
    Ok(())
}

/// Each maintenance statement five times at this size: the first finds the rows left due
/// for it, the others find nothing.
async fn maintenance(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = &env.db.store;
    let batch = 1000;
    let keep_ms = 7 * 24 * 3600 * 1000;
    let mut worst_idle = Duration::ZERO;
    for name in ["rescue", "expiry", "deletion", "tombstone purge"] {
        let mut times = Vec::new();
        let mut done = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let n = match name {
                "rescue" => {
                    let r = store.worker().rescue_lapsed(batch).await?;
                    r.failed + r.cancelled
                }
                "expiry" => store.worker().expire_overdue(batch).await?,
                "deletion" => store.worker().purge_expired(batch).await?,
                _ => store.worker().purge_tombstones(keep_ms, batch).await?,
            };
            times.push(started.elapsed());
            done.push(n);
        }
        let mut idle = times[1..].to_vec();
        idle.sort();
        worst_idle = worst_idle.max(idle[idle.len() / 2]);
        writeln!(
            out,
            "scale maintenance {name:<16} first {:>6.2} ms ({} rows), then {:>6.2} ms median ({} rows)",
            ms(times[0]),
            done[0],
            ms(idle[idle.len() / 2]),
            done[1..].iter().sum::<u64>()
        )?;
    }
    target(
        out,
        "every maintenance statement < 5 ms at this size (median with nothing due)",
        worst_idle < Duration::from_millis(5),
        &format!("slowest {:.2} ms", ms(worst_idle)),
    )
}
