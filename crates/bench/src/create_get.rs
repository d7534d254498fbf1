//! `mcp-tasks bench create | get`: single requests at each concurrency, beside the raw
//! one-row INSERT and primary-key select.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use crate::baseline;
use crate::env::{CreateScript, Env, cpu_share, figures, meta, p99_ms, target, task_id};
use crate::load::{self, Run, Script, Target};

/// ` (pgbench 0.123)`: `ours` as a share of pgbench's rate, when pgbench ran.
fn against_pgbench(ours: &Run, pg: Option<&Run>) -> String {
    pg.map(|pg| format!(" (pgbench {:.3})", ours.rate() / pg.rate().max(1e-9)))
        .unwrap_or_default()
}

/// The same requests at c16 sent by `wrk` (see `wrk.rs`), when it is installed.
async fn from_outside(
    env: &Env,
    out: &mut dyn Write,
    label: &str,
    request: &[u8],
    inside: &Run,
) -> anyhow::Result<()> {
    if !crate::wrk::available().await {
        writeln!(out, "{label} skipped: wrk is not installed")?;
        return Ok(());
    }
    let run = crate::wrk::drive(&env.target, request, 16, env.seconds()).await?;
    writeln!(
        out,
        "{label} {}   {:.3}x the built-in generator's",
        figures(&run),
        run.rate() / inside.rate().max(1e-9)
    )?;
    Ok(())
}
use crate::pgbench::{self, Script as Pgbench};

pub(crate) struct GetScript {
    pub(crate) target: Target,
    pub(crate) id: uuid::Uuid,
}

impl Script for GetScript {
    fn request(&self, n: u64) -> Vec<u8> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tasks/get","params":{{"taskId":"{}","_meta":{}}}}}"#,
            self.id,
            meta()
        );
        self.target
            .request("tasks/get", &self.id.to_string(), &body)
    }

    fn answer(&self, _n: u64, _sent: Instant, body: &[u8]) -> Result<(), String> {
        // The status is near one end of the answer, whatever order its keys come in;
        // scanning all of a large result would cost the load generator more than the
        // service.
        let (head, tail) = (
            &body[..body.len().min(512)],
            &body[body.len().saturating_sub(512)..],
        );
        if memchr(head, b"\"completed\"") || memchr(tail, b"\"completed\"") {
            Ok(())
        } else {
            Err(format!(
                "unexpected answer: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ))
        }
    }
}

fn memchr(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Creates at concurrency `c`: ours, then the raw INSERT.
pub(crate) async fn create_at(env: &Env, c: usize) -> anyhow::Result<(Run, Run)> {
    let raw = baseline::drive(&env.db.url, c, env.seconds(), baseline::insert()).await?;
    let script = Arc::new(CreateScript {
        target: env.target.clone(),
        seconds: 0,
        on_created: |_, _| {},
    });
    let ours = load::drive(&env.target, c, env.seconds(), None, script).await?;
    if env.config.url.is_none() {
        // Nobody runs these; left queued they would be the next worker's backlog.
        sqlx::query(
            "DELETE FROM tasks WHERE tenant = $1 AND finished_at IS NULL AND lease_owner IS NULL",
        )
        .bind(baseline::TENANT)
        .execute(&env.db.sql)
        .await?;
        // What runs next must not measure the tens of thousands of rows just inserted and
        // deleted in a table whose statistics still say it is (nearly) empty: the planner
        // then reads a primary-key lookup over the tenant's part of `tasks_tenant_created`
        // or `tasks_owner_created` (`id` their last column), dead entries and all (479
        // index pages, 18 ms, after 60,000 rows, instead of 2 pages). The `scale`
        // scenario's empty-store `get` measured that, its loaded pass did not (it comes
        // after the load's VACUUM ANALYZE), so the two measured different things.
        sqlx::query("VACUUM ANALYZE tasks")
            .execute(&env.db.sql)
            .await?;
    }
    Ok((ours, raw))
}

/// Creates at each concurrency, beside the raw INSERT; returns the c16 figures.
pub(crate) async fn create(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut at16 = None;
    let mut pg16 = None;
    for &c in env.concurrencies() {
        // Before ours: what it inserts is removed with what ours leaves queued.
        let pg = pgbench::baseline(
            out,
            &format!("create c{c:<3} pgbench one-row INSERT   "),
            &env.db.url,
            &Pgbench::Insert,
            c,
            env.seconds(),
        )
        .await?;
        let cpu0 = env.service.replica_cpu();
        let started = Instant::now();
        let (ours, raw) = create_at(env, c).await?;
        let cpu = cpu_share(env, cpu0, started.elapsed(), ours.elapsed);
        writeln!(
            out,
            "create c{c:<3} raw one-row INSERT (sqlx) {}",
            figures(&raw)
        )?;
        writeln!(
            out,
            "create c{c:<3} tools/call -> task       {}{cpu}   ratio {:.3}{}",
            figures(&ours),
            ours.rate() / raw.rate().max(1e-9),
            against_pgbench(&ours, pg.as_ref())
        )?;
        if c == 16 {
            at16 = Some((ours, raw));
            pg16 = pg;
        }
    }
    let (ours, raw) = at16.ok_or_else(|| anyhow::anyhow!("no c16 run"))?;
    let request = CreateScript {
        target: env.target.clone(),
        seconds: 0,
        on_created: |_, _| {},
    }
    .request(0);
    from_outside(
        env,
        out,
        "create c16  tools/call -> task, from wrk",
        &request,
        &ours,
    )
    .await?;
    if env.config.url.is_none() {
        sqlx::query(
            "DELETE FROM tasks WHERE tenant = $1 AND finished_at IS NULL AND lease_owner IS NULL",
        )
        .bind(baseline::TENANT)
        .execute(&env.db.sql)
        .await?;
    }
    if let Some((replica, url)) = env.service.start_limited_replica(1_000_000).await? {
        let target = Target::parse(&url)?;
        let script = Arc::new(CreateScript {
            target: target.clone(),
            seconds: 0,
            on_created: |_, _| {},
        });
        let limited = load::drive(&target, 16, env.seconds(), None, script).await?;
        replica.stop().await;
        writeln!(
            out,
            "create c16  with an in-flight limit (1,000,000; checked on every create) {}   ratio {:.3}",
            figures(&limited),
            limited.rate() / raw.rate().max(1e-9)
        )?;
    }
    let ratio = ours.rate() / raw.rate().max(1e-9);
    target(
        out,
        "create c16 >= 0.2x the raw INSERT, p99 < 25 ms",
        ratio >= 0.2 && p99_ms(&ours) < 25.0,
        &format!("{ratio:.3}x, p99 {:.2} ms", p99_ms(&ours)),
    )?;
    // As users run it: a worker runs every task while the creates go on.
    if env.service.started_here() {
        env.service
            .start_worker(crate::lifecycle::WORKER_CONCURRENCY, &env.db.sql)
            .await?;
        let drained = crate::lifecycle::measure(env, 16, None).await?;
        env.service.stop_worker().await;
        let running = drained.create;
        writeln!(
            out,
            "create c16  tools/call -> task, a worker running each   {}   ratio {:.3}{}",
            figures(&running),
            running.rate() / raw.rate().max(1e-9),
            against_pgbench(&running, pg16.as_ref())
        )?;
        if let Some(pg) = &pg16 {
            let ratio = running.rate() / pg.rate().max(1e-9);
            target(
                out,
                "create c16 with a worker running each task >= 0.3x pgbench's INSERT",
                ratio >= 0.3,
                &format!("{ratio:.3}x"),
            )?;
        }
    }
    Ok(())
}

/// The result `get` reads back: a short text, as `slow_compute` answers.
pub(crate) fn small_result() -> serde_json::Value {
    serde_json::json!({
        "content": [{ "type": "text", "text": "Computed job in 0 s." }],
        "isError": false
    })
}

/// A result of about 64 KiB, half text and half structured content (objects, numbers,
/// nesting), where copying stored JSON instead of parsing and re-serialising it pays most.
fn large_result() -> serde_json::Value {
    let text = "All work and no play makes a large result. ".repeat(760);
    let rows: Vec<serde_json::Value> = (0..420)
        .map(|i| serde_json::json!({ "i": i, "name": format!("item {i}"), "score": i as f64 / 7.0, "tags": ["a", "b"], "ok": i % 2 == 0 }))
        .collect();
    serde_json::json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": { "rows": rows },
        "isError": false
    })
}

/// Creates one completed task with `result` and returns its id (finished through the
/// store, as a worker would).
pub(crate) async fn completed_task(
    env: &Env,
    result: serde_json::Value,
) -> anyhow::Result<uuid::Uuid> {
    let mut conn = load::Conn::open(&env.target).await?;
    let script = CreateScript {
        target: env.target.clone(),
        seconds: 0,
        on_created: |_, _| {},
    };
    let (_, body) = conn.exchange(&script.request(0)).await?;
    let id = task_id(body).ok_or_else(|| anyhow::anyhow!("the create failed"))?;
    let store = &env.store;
    let owner = mcp_tasks_store::Owner::new(baseline::TENANT, baseline::PRINCIPAL);
    let lease = mcp_tasks_store::Lease {
        owner,
        id: mcp_tasks_store::TaskId(id),
        token: 0,
    };
    // Claimed the way a worker would, then finished with its token.
    let claimed = store.worker().claim("bench", 1000, 30_000).await?;
    for c in claimed {
        let result = if c.lease.id == lease.id {
            mcp_tasks_store::Finish::Completed(result.clone())
        } else {
            mcp_tasks_store::Finish::Cancelled
        };
        store
            .worker()
            .finish(&c.lease, &result, Some("Completed"))
            .await?;
    }
    Ok(id)
}

/// Gets of one completed task at concurrency `c`: ours, then the raw select.
pub(crate) async fn get_at(env: &Env, c: usize) -> anyhow::Result<(Run, Run)> {
    let id = completed_task(env, small_result()).await?;
    get_of(env, id, c).await
}

async fn get_of(env: &Env, id: uuid::Uuid, c: usize) -> anyhow::Result<(Run, Run)> {
    let raw = baseline::drive(&env.observed_url, c, env.seconds(), baseline::get(id)).await?;
    let ours = gets(env, &env.target, id, c).await?;
    Ok((ours, raw))
}

/// `c` clients getting task `id` from the replica at `target`.
async fn gets(env: &Env, target: &Target, id: uuid::Uuid, c: usize) -> anyhow::Result<Run> {
    let script = Arc::new(GetScript {
        target: target.clone(),
        id,
    });
    load::drive(target, c, env.seconds(), None, script).await
}

/// Gets of one completed task at each concurrency, beside the raw primary-key select.
pub(crate) async fn get(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    let id = completed_task(env, small_result()).await?;
    let mut at16 = None;
    let mut pg16 = None;
    for &c in env.concurrencies() {
        let pg = pgbench::baseline(
            out,
            &format!("get    c{c:<3} pgbench primary-key select"),
            &env.observed_url,
            &Pgbench::Get(id),
            c,
            env.seconds(),
        )
        .await?;
        let cpu0 = env.service.replica_cpu();
        let started = Instant::now();
        let (ours, raw) = get_of(env, id, c).await?;
        let cpu = cpu_share(env, cpu0, started.elapsed(), ours.elapsed);
        writeln!(
            out,
            "get    c{c:<3} raw primary-key select (sqlx) {}",
            figures(&raw)
        )?;
        writeln!(
            out,
            "get    c{c:<3} tasks/get                {}{cpu}   ratio {:.3}{}",
            figures(&ours),
            ours.rate() / raw.rate().max(1e-9),
            against_pgbench(&ours, pg.as_ref())
        )?;
        if c == 16 {
            at16 = Some((ours, raw));
            pg16 = pg;
        }
    }
    if let Some((ours, _)) = &at16 {
        let request = GetScript {
            target: env.target.clone(),
            id,
        }
        .request(0);
        from_outside(env, out, "get    c16  tasks/get, from wrk", &request, ours).await?;
        // The same replica but for its threads: on two cores shared with PostgreSQL and
        // the load, one thread hands no work to another (README, *Performance*).
        if let Some((_replica, url)) = env
            .service
            .start_replica_with(&[
                ("DATABASE_URL", &env.db.url),
                ("MCP_TASKS_MAX_TASKS_IN_FLIGHT", "0"),
                ("MCP_TASKS_THREADS", "1"),
            ])
            .await?
        {
            let run = gets(env, &Target::parse(&url)?, id, 16).await?;
            writeln!(
                out,
                "get    c16  tasks/get, MCP_TASKS_THREADS=1 {}   {:.3}x the default{}",
                figures(&run),
                run.rate() / ours.rate().max(1e-9),
                against_pgbench(&run, pg16.as_ref())
            )?;
        }
    }
    let large = large_result();
    let size = large.to_string().len();
    let id = completed_task(env, large).await?;
    let cpu0 = env.service.replica_cpu();
    let started = Instant::now();
    let (big, big_raw) = get_of(env, id, 16).await?;
    let cpu = cpu_share(env, cpu0, started.elapsed(), big.elapsed);
    let kib = size / 1024;
    writeln!(
        out,
        "get    c16  raw select, {kib} KiB result  {}",
        figures(&big_raw)
    )?;
    writeln!(
        out,
        "get    c16  tasks/get, {kib} KiB result   {}{cpu}   ratio {:.3}",
        figures(&big),
        big.rate() / big_raw.rate().max(1e-9)
    )?;
    let (ours, raw) = at16.ok_or_else(|| anyhow::anyhow!("no c16 run"))?;
    let ratio = ours.rate() / raw.rate().max(1e-9);
    target(
        out,
        "get c16 >= 0.5x the raw primary-key select",
        ratio >= 0.5,
        &format!("{ratio:.3}x"),
    )?;
    if let Some(pg) = &pg16 {
        let ratio = ours.rate() / pg.rate().max(1e-9);
        target(
            out,
            "get c16 >= 0.6x pgbench's primary-key select",
            ratio >= 0.6,
            &format!("{ratio:.3}x"),
        )?;
    }
    Ok(())
}
