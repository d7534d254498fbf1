//! `console`: the web console's pages rendered from a cold start with 100,000 tasks in
//! the table (20,000 with `--short`). For each page a new replica process is started,
//! its first render timed (new process, new pool, first statement of each kind), then
//! warm renders; beside them, in the same run, the raw statements a page cannot beat: a
//! primary-key select and a 50-row read of an owner's newest tasks through its index,
//! each on a new connection. Then whether each page's statements read indexes (their
//! plans at this size).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mcp_tasks_store::Owner;
use mcp_tasks_store::testing::{Seed, SeedClaim, SeedState};
use serde_json::json;
use sqlx::Connection;
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::env::{Env, target};
use crate::service::Child;
use crate::stats::ms;

/// The owner `--auth none` gives every caller.
const TENANT: &str = "default";
const PRINCIPAL: &str = "anonymous";
const TARGET_MS: f64 = 300.0;
const WARM: usize = 20;

/// The bulk load: mixed statuses, several principals and tools, an hour of finishes
/// (pickup and run times for the health plots), and live leases; seeded through the store
/// (`testing`), one task every 30 ms up to now.
fn load(n: i64) -> impl Iterator<Item = Seed> {
    let now = OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    (1..=n).map(move |g| {
        let at = now - time::Duration::milliseconds((n - g) * 30);
        let principal = if g % 5 < 3 {
            PRINCIPAL.to_owned()
        } else {
            format!("p{}", g % 50)
        };
        let done = at + time::Duration::seconds(2);
        let leased = g % 2 == 0;
        let state = match g % 100 {
            0..70 => SeedState::Completed {
                result: json!({ "content": [], "isError": false }),
                finished_at: done,
            },
            70..78 => SeedState::Failed {
                error: json!({ "code": -32603, "message": "x" }),
                finished_at: done,
            },
            78..84 => SeedState::Cancelled { finished_at: done },
            84..92 if leased => SeedState::Leased {
                worker: format!("worker-{}", g % 8),
                token: 1,
                expires_at: now + day,
            },
            84..92 => SeedState::Queued {
                run_after: Some(now + day),
            },
            _ => SeedState::InputRequired {
                requests: json!({ "k": { "method": "elicitation/create" } })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            },
        };
        let queued = matches!(state, SeedState::Queued { .. });
        Seed {
            arguments: json!({ "n": 1 }),
            status_message: Some("bench".into()),
            created_at: at,
            // Deleted no sooner than a day from now.
            ttl_ms: Some((now + day - at).whole_milliseconds() as i64),
            attempt: if matches!(state, SeedState::Leased { .. }) {
                0
            } else {
                i32::try_from(1 + g % 3).unwrap_or(1)
            },
            claim: (!queued).then(|| SeedClaim {
                at: at + time::Duration::seconds(1),
                worker: format!("worker-{}", g % 8),
                pickup_ms: i32::try_from(g % 1000).unwrap_or(0),
            }),
            state,
            ..Seed::new(Owner::new(TENANT, principal), format!("tool_{}", g % 4))
        }
    })
}

/// The history: a lapse for a tenth of the tasks that ran more than once, over the last
/// day (the health page counts the last hour's), and the input rounds of waiting tasks.
const EVENTS: &str = r"
    INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
    SELECT tenant, id, now() - random() * interval '1 day', 'lease_lapsed', 'worker-lost', 1,
           'reclaimed'
    FROM tasks WHERE attempt > 1 AND claimed_at IS NOT NULL AND random() < 0.1
    UNION ALL
    SELECT tenant, id, updated_at, 'input_requested', claimed_by, attempt, 'k'
    FROM tasks WHERE status = 'input_required'";

/// One GET on a new connection: status, headers and body.
async fn get(
    addr: std::net::SocketAddr,
    path: &str,
    cookie: &str,
) -> anyhow::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/html\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(at) = response.parse(&bytes)? else {
        bail!("an incomplete answer to GET {path}");
    };
    let status = response.code.unwrap_or(0);
    let headers = response
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    Ok((status, headers, bytes[at..].to_vec()))
}

/// The console's session cookie of a fresh replica (`--auth none` signs everyone in).
async fn session(addr: std::net::SocketAddr) -> anyhow::Result<String> {
    let (status, headers, _) = get(addr, "/console/signin", "").await?;
    anyhow::ensure!(status == 303, "GET /console/signin answered {status}");
    headers
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .and_then(|(_, v)| v.split(';').next().map(str::to_owned))
        .context("no session cookie")
}

struct Timing {
    first: Duration,
    warm_p50: Duration,
    warm_p99: Duration,
    bytes: usize,
}

/// A new replica with the console on; the first render of `path`, then `WARM` more.
async fn cold_and_warm(env: &Env, path: &str) -> anyhow::Result<Timing> {
    let (replica, addr) =
        Child::start_console_replica(&env.config.binary, &env.observed_url).await?;
    let result = async {
        let target = crate::load::Target::parse(&addr)?;
        let cookie = session(target.addr).await?;
        let started = Instant::now();
        let (status, _, body) = get(target.addr, path, &cookie).await?;
        let first = started.elapsed();
        anyhow::ensure!(
            status == 200,
            "GET {path} answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        let mut warm = Vec::new();
        for _ in 0..WARM {
            let started = Instant::now();
            let (status, _, _) = get(target.addr, path, &cookie).await?;
            anyhow::ensure!(status == 200, "GET {path} answered {status}");
            warm.push(started.elapsed());
        }
        warm.sort();
        Ok(Timing {
            first,
            warm_p50: warm[warm.len() / 2],
            warm_p99: warm[warm.len() - 1],
            bytes: body.len(),
        })
    }
    .await;
    replica.stop().await;
    result
}

/// The raw baselines, each on a new connection as a cold replica's first statement is.
async fn baselines(env: &Env, id: uuid::Uuid) -> anyhow::Result<(Duration, Duration)> {
    let started = Instant::now();
    let mut conn = sqlx::PgConnection::connect(&env.observed_url).await?;
    let _: Option<(uuid::Uuid,)> =
        sqlx::query_as("SELECT id FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3")
            .bind(TENANT)
            .bind(PRINCIPAL)
            .bind(id)
            .fetch_optional(&mut conn)
            .await?;
    let pk = started.elapsed();
    conn.close().await?;
    let started = Instant::now();
    let mut conn = sqlx::PgConnection::connect(&env.observed_url).await?;
    let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT id, status FROM tasks WHERE tenant = $1 AND principal = $2
         ORDER BY created_at DESC, id DESC LIMIT 50",
    )
    .bind(TENANT)
    .bind(PRINCIPAL)
    .fetch_all(&mut conn)
    .await?;
    anyhow::ensure!(rows.len() == 50, "the baseline read {} rows", rows.len());
    let list = started.elapsed();
    conn.close().await?;
    Ok((pk, list))
}

pub(crate) async fn console(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    anyhow::ensure!(
        env.config.url.is_none(),
        "console bulk-loads its database and starts replicas of its own"
    );
    let n: i64 = if env.config.short { 20_000 } else { 100_000 };
    let sql = &env.db.sql;
    let started = Instant::now();
    env.db.store.seed(load(n)).await?;
    sqlx::query(EVENTS).execute(sql).await?;
    for statement in ["VACUUM ANALYZE tasks", "VACUUM ANALYZE task_events"] {
        sqlx::query(statement).execute(sql).await?;
    }
    let (total, own): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(*) FILTER (WHERE principal = $1) FROM tasks")
            .bind(PRINCIPAL)
            .fetch_one(sql)
            .await?;
    writeln!(
        out,
        "console: loaded {total} tasks ({own} of the signed-in principal) in {:.1} s",
        started.elapsed().as_secs_f64()
    )?;
    let (id,): (uuid::Uuid,) = sqlx::query_as(
        "SELECT id FROM tasks WHERE tenant = $1 AND principal = $2 AND status = 'completed'
         ORDER BY created_at DESC LIMIT 1",
    )
    .bind(TENANT)
    .bind(PRINCIPAL)
    .fetch_one(sql)
    .await?;
    let (pk, list) = baselines(env, id).await?;
    writeln!(
        out,
        "console baseline (new connection + statement): primary-key select {:.2} ms, owner's newest 50 by index {:.2} ms",
        ms(pk),
        ms(list)
    )?;
    let pages = [
        ("list", "/console/tasks".to_owned()),
        (
            "list status=failed",
            "/console/tasks?status=failed&age=%3C24h".to_owned(),
        ),
        (
            "list tool+attempts",
            "/console/tasks?tool=tool_1&attempts=2".to_owned(),
        ),
        ("task page", format!("/console/tasks/{id}")),
        ("inbox", "/console/inbox".to_owned()),
        ("health", "/console/health".to_owned()),
    ];
    let mut worst = 0.0_f64;
    for (name, path) in &pages {
        let t = cold_and_warm(env, path).await?;
        worst = worst.max(ms(t.first));
        writeln!(
            out,
            "console {name:<20} cold {:>7.2} ms (target {TARGET_MS:.0} ms; {:>5.1}x the raw index read)  warm p50 {:>6.2} ms p99 {:>6.2} ms  {} KiB",
            ms(t.first),
            ms(t.first) / ms(list).max(1e-9),
            ms(t.warm_p50),
            ms(t.warm_p99),
            t.bytes / 1024
        )?;
    }
    let mut scans = 0;
    for scope in [
        mcp_tasks_store::Scope::owner(&mcp_tasks_store::Owner::new(TENANT, PRINCIPAL)),
        mcp_tasks_store::Scope::tenant(TENANT),
    ] {
        let who = if scope.principal.is_some() {
            "principal"
        } else {
            "admin"
        };
        for plan in env.store.console().console_plans(&scope, "tool_1").await? {
            let indexes = plan.indexes();
            let verdict = if plan.scans_table() {
                scans += 1;
                "SEQUENTIAL SCAN".to_owned()
            } else if indexes.is_empty() {
                "no index".to_owned()
            } else {
                format!("index ({})", indexes.join(", "))
            };
            writeln!(out, "console plan {who:<9} {:<28} {verdict}", plan.name)?;
        }
    }
    target(
        out,
        &format!(
            "every console page renders from a cold start in < {TARGET_MS:.0} ms at {total} tasks, no table scans"
        ),
        worst < TARGET_MS && scans == 0,
        &format!("slowest {worst:.2} ms, {scans} plans with a sequential scan"),
    )
}
