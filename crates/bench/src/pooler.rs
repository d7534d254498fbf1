//! `mcp-tasks bench pooler`: creates and gets at c16 through PgBouncer in transaction
//! mode (a replica whose pools go through it, its LISTEN straight to PostgreSQL), beside
//! the same on direct connections, in one run, taking turns.

use std::io::Write;
use std::sync::Arc;

use mcp_tasks_devdb::DevPooler;
use sqlx::postgres::PgConnectOptions;

use crate::baseline;
use crate::create_get::{GetScript, completed_task, small_result};
use crate::env::{CreateScript, Env, figures};
use crate::load::{self, Run, Target};

/// Rounds of each, taking turns (the machine is shared and noisy).
const ROUNDS: usize = 2;

pub(crate) async fn pooler(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    if !env.service.started_here() {
        writeln!(out, "pooler: skipped (the service was given by URL)")?;
        return Ok(());
    }
    let options: PgConnectOptions = env.db.url.parse()?;
    let (host, port) = (options.get_host().to_owned(), options.get_port());
    let database = options.get_database().unwrap_or("postgres").to_owned();
    let user = options.get_username().to_owned();
    let pooler =
        match tokio::task::spawn_blocking(move || DevPooler::start(&host, port, &database, &user))
            .await?
        {
            Ok(pooler) => pooler,
            Err(e) => {
                writeln!(out, "pooler: skipped: {e:#}")?;
                return Ok(());
            }
        };
    let Some((replica, url)) = env
        .service
        .start_replica_with(&[
            ("DATABASE_URL", pooler.url()),
            ("MCP_TASKS_DIRECT_DATABASE_URL", &env.db.url),
            ("MCP_TASKS_MAX_TASKS_IN_FLIGHT", "0"),
        ])
        .await?
    else {
        return Ok(());
    };
    let pooled = Target::parse(&url)?;
    let id = completed_task(env, small_result()).await?;
    let sides = [("direct", &env.target), ("PgBouncer", &pooled)];
    let mut creates: [Vec<Run>; 2] = Default::default();
    let mut gets: [Vec<Run>; 2] = Default::default();
    // Gets first: after tens of thousands of creates, a table whose statistics still say
    // it is nearly empty is read by another plan (see `create_get::create_at`).
    for round in 0..ROUNDS {
        for k in 0..sides.len() {
            let which = (round + k) % sides.len();
            let target = sides[which].1;
            let get = Arc::new(GetScript {
                target: target.clone(),
                id,
            });
            gets[which].push(load::drive(target, 16, env.seconds(), None, get).await?);
        }
    }
    for round in 0..ROUNDS {
        for k in 0..sides.len() {
            let which = (round + k) % sides.len();
            let target = sides[which].1;
            let create = Arc::new(CreateScript {
                target: target.clone(),
                seconds: 0,
                on_created: |_, _| {},
            });
            creates[which].push(load::drive(target, 16, env.seconds(), None, create).await?);
        }
    }
    replica.stop().await;
    drop(pooler);
    // Nobody runs them; left queued they would be the next worker's backlog.
    sqlx::query(
        "DELETE FROM tasks WHERE tenant = $1 AND finished_at IS NULL AND lease_owner IS NULL",
    )
    .bind(baseline::TENANT)
    .execute(&env.db.sql)
    .await?;
    for (what, runs) in [
        ("create c16 tools/call -> task", &creates),
        ("get    c16 tasks/get         ", &gets),
    ] {
        let [direct, through] = [best(&runs[0]), best(&runs[1])];
        writeln!(out, "pooler {what} direct     {}", figures(direct))?;
        writeln!(
            out,
            "pooler {what} PgBouncer  {}   ratio to direct {:.3}",
            figures(through),
            through.rate() / direct.rate().max(1e-9)
        )?;
    }
    Ok(())
}

/// The faster of a side's rounds (the other met more of the machine's noise).
fn best(runs: &[Run]) -> &Run {
    runs.iter()
        .max_by(|a, b| a.rate().total_cmp(&b.rate()))
        .expect("at least one round")
}
