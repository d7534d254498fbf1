//! `mcp-tasks chaos`: real processes killed under load, then every task checked.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub(super) struct ChaosCommand {
    /// Task scripts to drive (quick, slow, answered input, cancelled).
    #[arg(long, default_value_t = 100)]
    tasks: usize,
    /// Replica processes.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Seconds of chaos; the scripts' starts are spread over it.
    #[arg(long, default_value_t = 45)]
    duration: u64,
    /// Scripts driven at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seed of every random choice (default: random; printed, to replay a run).
    #[arg(long)]
    seed: Option<u64>,
    /// The workers' lease (ms).
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// Instead of restarting PostgreSQL in place, fail it over once: a synchronous
    /// standby beside it, every process given both hosts, then the primary stopped and
    /// the standby promoted; every replica must be ready again within 5 s of the
    /// promotion.
    #[arg(long)]
    failover: bool,
    /// Put every replica and worker behind PgBouncer (transaction mode, Debian's
    /// `pgbouncer`), with a direct URL for LISTEN, the wake-up duty and migrations.
    #[arg(long)]
    pooler: bool,
}

pub(super) async fn run(command: ChaosCommand, shutdown: CancellationToken) -> anyhow::Result<()> {
    let ChaosCommand {
        tasks,
        replicas,
        workers,
        duration,
        concurrency,
        seed,
        lease_ms,
        failover,
        pooler,
    } = command;
    let config = mcp_tasks_chaos::Config {
        binary: std::env::current_exe().context("locating this executable")?,
        tasks,
        replicas,
        workers,
        duration: Duration::from_secs(duration),
        concurrency,
        seed,
        lease_ms,
        failover,
        pooler,
    };
    mcp_tasks_chaos::run(&config, shutdown).await
}
