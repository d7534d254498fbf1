//! What every hot-path scenario shares: its configuration, its world (a scratch
//! database, the service on it, where to send load), the create script, and how figures
//! and targets are printed. A leaf: the scenarios and their dispatcher (`scenarios.rs`)
//! all use it.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::load::{Run, Script, Target};
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
