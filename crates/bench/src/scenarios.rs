//! `mcp-tasks bench create | get | lifecycle | pickup | scale | efficiency | console`: the service's
//! hot paths over HTTP, each beside the same statements issued raw in the same run, as
//! ratios (the machines these run on are shared, so only ratios compare across runs).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::baseline;
use crate::load::{self, Run, Script, Target};
use crate::scratch::ScratchDatabase;
use crate::service::Service;
use crate::stats::ms;

#[derive(Debug, Clone)]
pub struct Config {
    /// The PostgreSQL server (scratch databases are created on it). With `url`, the
    /// database of the service at that URL.
    pub database_url: String,
    /// The `mcp-tasks` executable the service is started from.
    pub binary: PathBuf,
    /// A service already running; otherwise one is started on loopback.
    pub url: Option<String>,
    /// Seconds per measurement.
    pub seconds: f64,
    /// CI mode: small sizes and short runs; figures are printed, targets not asserted.
    pub short: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Create,
    Get,
    Lifecycle,
    Pickup,
    Scale,
    Efficiency,
    Console,
}

impl Scenario {
    pub const ALL: [Self; 7] = [
        Self::Create,
        Self::Get,
        Self::Lifecycle,
        Self::Pickup,
        Self::Scale,
        Self::Efficiency,
        Self::Console,
    ];
}

/// One scenario's world: a scratch database, the service on it, and where to send load.
pub(crate) struct Env {
    pub(crate) db: ScratchDatabase,
    pub(crate) service: Service,
    pub(crate) target: Target,
    /// The service's database (the scratch one, unless the service was given by URL).
    pub(crate) observed: PgPool,
    pub(crate) observed_url: String,
    /// The store on the service's database.
    pub(crate) store: mcp_tasks_store::Store,
    pub(crate) config: Config,
}

impl Env {
    pub(crate) async fn start(config: &Config) -> anyhow::Result<Self> {
        // The raw baselines' clients share at most this many connections, as the
        // service's requests share its pool (the server is shared: its connection limit
        // is not ours alone).
        let pool = mcp_tasks_store::PoolConfig {
            max_connections: 4,
            ..Default::default()
        };
        let db = ScratchDatabase::create(&config.database_url, &pool).await?;
        let service_db = if config.url.is_some() {
            config.database_url.clone()
        } else {
            db.url.clone()
        };
        let service = match Service::start(&config.binary, &service_db, config.url.as_deref()).await
        {
            Ok(s) => s,
            Err(e) => {
                db.drop_database().await?;
                return Err(e);
            }
        };
        let target = Target::parse(&service.url)?;
        let (observed, store) = match config.url {
            Some(_) => (
                PgPoolOptions::new()
                    .max_connections(4)
                    .connect_lazy(&config.database_url)?,
                mcp_tasks_store::Store::connect(&config.database_url, &pool).await?,
            ),
            None => (db.sql.clone(), db.store.clone()),
        };
        Ok(Self {
            db,
            service,
            target,
            observed,
            observed_url: service_db,
            store,
            config: config.clone(),
        })
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.service.stop().await;
        self.db.drop_database().await
    }

    pub(crate) fn seconds(&self) -> Duration {
        Duration::from_secs_f64(self.config.seconds)
    }

    pub(crate) fn concurrencies(&self) -> &'static [usize] {
        &[1, 16, 64]
    }
}

pub async fn run(scenario: Scenario, config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    let env = Env::start(config).await?;
    let result = match scenario {
        Scenario::Create => create(&env, out).await,
        Scenario::Get => get(&env, out).await,
        Scenario::Lifecycle => crate::lifecycle::lifecycle(&env, out).await.map(|_| ()),
        Scenario::Pickup => crate::lifecycle::pickup(&env, out).await,
        Scenario::Scale => crate::scale::scale(&env, out).await,
        Scenario::Efficiency => crate::lifecycle::efficiency(&env, out).await,
        Scenario::Console => crate::console::console(&env, out).await,
    };
    let stopped = env.stop().await;
    result.and(stopped)
}

/// Every scenario, one after the other.
pub async fn run_all(config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    for scenario in Scenario::ALL {
        if matches!(scenario, Scenario::Scale | Scenario::Console) && config.url.is_some() {
            writeln!(
                out,
                "{scenario:?}: skipped (it bulk-loads the database; not with --url)"
            )?;
            continue;
        }
        run(scenario, config, out).await?;
    }
    Ok(())
}

/// `label: 1234/s p50 .. p99 ..` for one run.
pub(crate) fn figures(run: &Run) -> String {
    let mut s = format!("{:>8.0}/s", run.rate());
    if let Some(l) = run.latency {
        s += &format!("  p50 {:>6.2} ms  p99 {:>6.2} ms", ms(l.p50), ms(l.p99));
    }
    if run.errors > 0 {
        s += &format!(
            "  errors {} (first: {})",
            run.errors,
            run.first_error.as_deref().unwrap_or("?")
        );
    }
    s
}

pub(crate) fn p99_ms(run: &Run) -> f64 {
    run.latency.map_or(f64::INFINITY, |l| ms(l.p99))
}

/// Prints whether a target is met; in short mode they are shown but never asserted.
pub(crate) fn target(
    out: &mut dyn Write,
    what: &str,
    met: bool,
    measured: &str,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "target: {what}: {measured}: {}",
        if met { "met" } else { "NOT met" }
    )?;
    Ok(())
}

pub(crate) fn meta() -> &'static str {
    r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#
}

/// The id in a `CreateTaskResult`.
pub(crate) fn task_id(body: &[u8]) -> Option<uuid::Uuid> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("\"taskId\":\"")? + 10;
    uuid::Uuid::try_parse(text.get(start..start + 36)?).ok()
}

/// `tools/call` of `slow_compute` for `seconds`, as a task; `on_created` sees each new id.
pub(crate) struct CreateScript<F> {
    pub(crate) target: Target,
    pub(crate) seconds: u32,
    pub(crate) on_created: F,
}

impl<F: Fn(uuid::Uuid, Instant) + Send + Sync + 'static> Script for CreateScript<F> {
    fn request(&self, n: u64) -> Vec<u8> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"slow_compute","arguments":{{"seconds":{}}},"_meta":{}}}}}"#,
            self.seconds,
            meta()
        );
        self.target.request("tools/call", "slow_compute", &body)
    }

    fn answer(&self, _n: u64, sent: Instant, body: &[u8]) -> Result<(), String> {
        match task_id(body) {
            Some(id) => {
                (self.on_created)(id, sent);
                Ok(())
            }
            None => Err(format!(
                "not a task: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )),
        }
    }
}

struct GetScript {
    target: Target,
    id: uuid::Uuid,
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
    for &c in env.concurrencies() {
        let cpu0 = env.service.replica_cpu();
        let started = Instant::now();
        let (ours, raw) = create_at(env, c).await?;
        let cpu = cpu_share(env, cpu0, started.elapsed(), ours.elapsed);
        writeln!(
            out,
            "create c{c:<3} raw one-row INSERT        {}",
            figures(&raw)
        )?;
        writeln!(
            out,
            "create c{c:<3} tools/call -> task       {}{cpu}   ratio {:.3}",
            figures(&ours),
            ours.rate() / raw.rate().max(1e-9)
        )?;
        if c == 16 {
            at16 = Some((ours, raw));
        }
    }
    let (ours, raw) = at16.ok_or_else(|| anyhow::anyhow!("no c16 run"))?;
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
    )
}

/// The replica's CPU while ours ran, as a share of one core (the raw baseline, run in the
/// same stretch, costs the replica nothing).
pub(crate) fn cpu_share(
    env: &Env,
    before: Option<Duration>,
    _total: Duration,
    ours: Duration,
) -> String {
    let after = env.service.replica_cpu();
    match (before, after) {
        (Some(b), Some(a)) => format!(
            "  replica CPU {:>3.0} %",
            100.0 * (a - b).as_secs_f64() / ours.as_secs_f64()
        ),
        _ => String::new(),
    }
}

/// The result `get` reads back: a short text, as `slow_compute` answers.
fn small_result() -> serde_json::Value {
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
async fn completed_task(env: &Env, result: serde_json::Value) -> anyhow::Result<uuid::Uuid> {
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
    let script = Arc::new(GetScript {
        target: env.target.clone(),
        id,
    });
    let ours = load::drive(&env.target, c, env.seconds(), None, script).await?;
    Ok((ours, raw))
}

/// Gets of one completed task at each concurrency, beside the raw primary-key select.
pub(crate) async fn get(env: &Env, out: &mut dyn Write) -> anyhow::Result<()> {
    let id = completed_task(env, small_result()).await?;
    let mut at16 = None;
    for &c in env.concurrencies() {
        let cpu0 = env.service.replica_cpu();
        let started = Instant::now();
        let (ours, raw) = get_of(env, id, c).await?;
        let cpu = cpu_share(env, cpu0, started.elapsed(), ours.elapsed);
        writeln!(
            out,
            "get    c{c:<3} raw primary-key select   {}",
            figures(&raw)
        )?;
        writeln!(
            out,
            "get    c{c:<3} tasks/get                {}{cpu}   ratio {:.3}",
            figures(&ours),
            ours.rate() / raw.rate().max(1e-9)
        )?;
        if c == 16 {
            at16 = Some((ours, raw));
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
    )
}
