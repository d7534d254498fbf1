//! `mcp-tasks worker`: claims and runs tasks.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use mcp_tasks_observe::Metrics;
use mcp_tasks_store::Store;
use mcp_tasks_worker::WorkerConfig;
use tokio_util::sync::CancellationToken;

use super::args::{Database, Tools, server_info};
use super::ready::ReadyLine;
use crate::App;

#[derive(Debug, Args)]
pub(super) struct WorkerCommand {
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    tools: Tools,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    ready: ReadyLine,
}

pub(super) async fn run(
    mut command: WorkerCommand,
    app: &App,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    command.ready.role = "worker";
    // One connection per running handler at most (status writes, checkpoints), and a few
    // for the claim, heartbeat and maintenance loops.
    let connections =
        u32::try_from(command.worker.concurrency.saturating_add(4)).unwrap_or(u32::MAX);
    let store = command.database.connect_at_least(connections).await?;
    // LISTEN and the wake-up duty's connection, beside the pools.
    super::args::check_connection_budget(&store, 2).await;
    let metrics = match command.worker.metrics_listen {
        Some(_) => install_metrics(&store)?,
        None => return worker(store, &command, app, None, shutdown).await,
    };
    let registry = metrics.clone();
    with_metrics_listener(command.worker.metrics_listen, metrics, |bound| {
        worker(
            store.clone(),
            &command,
            app,
            bound.map(|b| (b, registry)),
            shutdown,
        )
    })
    .await?
}

async fn worker(
    store: Store,
    command: &WorkerCommand,
    app: &App,
    metrics: Option<(SocketAddr, Metrics)>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tools = command.tools.load(app).await?;
    let mut config = command.worker.config("mcp-tasks");
    config.scheduling = tools.scheduling.clone();
    let metrics = metrics.map(|(addr, registry)| {
        registry.set_limits(limits_source(
            tools.scheduling.clone(),
            tools.registry.clone(),
        ));
        addr
    });
    command.ready.announce(serde_json::json!({
        "worker_id": config.worker_id,
        "metrics": metrics,
    }));
    mcp_tasks_worker::run(store.worker(), tools.registry.clone(), config, shutdown).await?;
    Ok(())
}

/// The limits the process claims within (or would), for the metrics' held-back counts:
/// the scheduling policy over the tools of the registry as it is at the scrape.
pub(super) fn limits_source(
    scheduling: mcp_tasks_tools::scheduling::Scheduling,
    registry: mcp_tasks_tools::LiveRegistry,
) -> mcp_tasks_observe::LimitsSource {
    std::sync::Arc::new(move || mcp_tasks_tools::claim_limits(&scheduling, &registry.current()))
}

/// The process's metrics registry, sampling the task table through `store` at scrapes.
pub(super) fn install_metrics(store: &Store) -> anyhow::Result<Metrics> {
    let metrics = Metrics::install()
        .map_err(anyhow::Error::msg)
        .context("installing the metrics recorder")?;
    Ok(metrics.with_store(store.shared()))
}

/// Runs `work` (given the metrics listener's address) with `GET /metrics` served on
/// `listen` (when set) until `work` is done.
async fn with_metrics_listener<T, F: Future<Output = T>>(
    listen: Option<SocketAddr>,
    metrics: Metrics,
    work: impl FnOnce(Option<SocketAddr>) -> F,
) -> anyhow::Result<T> {
    let Some(addr) = listen else {
        return Ok(work(None).await);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for metrics"))?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "metrics on http://{bound}/metrics");
    let stop = CancellationToken::new();
    let serving = mcp_tasks_observe::serve_metrics(listener, metrics, stop.clone());
    let working = async {
        let done = work(Some(bound)).await;
        stop.cancel();
        done
    };
    let (done, served) = tokio::join!(working, serving);
    served.context("serving metrics")?;
    Ok(done)
}

#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    /// Tasks this worker runs at once.
    #[arg(long, env = "MCP_TASKS_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Lease length (ms); heartbeats run at a third of it.
    #[arg(long, env = "MCP_TASKS_LEASE_MS", default_value_t = 30_000)]
    lease_ms: u64,
    /// Backstop poll for new work when no notification arrives (ms).
    #[arg(long, env = "MCP_TASKS_POLL_MS", default_value_t = 1000)]
    poll_ms: u64,
    /// On SIGTERM, how long running tasks may take to finish before they are released
    /// to other workers (ms).
    #[arg(long, env = "MCP_TASKS_SHUTDOWN_GRACE_MS", default_value_t = 20_000)]
    shutdown_grace_ms: u64,
    /// How often the worker refreshes its row in the `workers` table (ms); the console
    /// shows a worker gone after three missed refreshes.
    #[arg(long, env = "MCP_TASKS_PRESENCE_MS", default_value_t = 15_000)]
    presence_ms: u64,
    /// Worker id recorded as lease owner (default: host-pid-random).
    #[arg(long, env = "MCP_TASKS_WORKER_ID")]
    worker_id: Option<String>,
    /// Address to serve Prometheus metrics on (GET /metrics only); none when unset. With
    /// dev, its replica's listener then answers 404 there.
    #[arg(long, env = "MCP_TASKS_METRICS_LISTEN")]
    pub(super) metrics_listen: Option<SocketAddr>,
}

impl WorkerArgs {
    pub(super) fn config(&self, server_name: &str) -> WorkerConfig {
        let mut c = WorkerConfig::new(server_info(server_name));
        c.concurrency = self.concurrency;
        c.lease = Duration::from_millis(self.lease_ms);
        c.presence_interval = Duration::from_millis(self.presence_ms.max(100));
        c.poll_interval = Duration::from_millis(self.poll_ms);
        c.shutdown_grace = Duration::from_millis(self.shutdown_grace_ms);
        if let Some(id) = &self.worker_id {
            c.worker_id.clone_from(id);
        }
        c
    }
}
