//! `mcp-tasks bench`: benchmarks that print their figures next to a baseline.

use anyhow::Context;
use clap::Subcommand;
use mcp_tasks_wire::secret::Secret;

#[derive(Debug, Subcommand)]
pub(super) enum Bench {
    /// Push latency (commit to frame at the client) with many concurrent listen streams,
    /// and the memory of idle streams. Creates and drops a scratch database.
    Push {
        /// PostgreSQL server URL (a scratch database is created on it).
        #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
        database_url: Secret,
        /// Concurrent listen streams during the latency run.
        #[arg(long, default_value_t = 1000)]
        streams: usize,
        /// Task changes made during the latency run.
        #[arg(long, default_value_t = 5000)]
        changes: usize,
        /// Changes per second.
        #[arg(long, default_value_t = 500)]
        rate: u32,
        /// Idle streams opened for the memory measurement.
        #[arg(long, default_value_t = 10_000)]
        idle_streams: usize,
    },
    /// Task transitions per second with and without NOTIFY. Creates and drops a scratch
    /// database.
    NotifyCost {
        /// PostgreSQL server URL (a scratch database is created on it).
        #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
        database_url: Secret,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 1000)]
        tasks: usize,
        /// Seconds per design per round.
        #[arg(long, default_value_t = 4.0)]
        seconds: f64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
}

pub(super) async fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Push {
            database_url,
            streams,
            changes,
            rate,
            idle_streams,
        } => {
            let config = mcp_tasks_bench::push::Config {
                database_url: database_url.expose().to_owned(),
                binary: std::env::current_exe().context("locating this executable")?,
                streams,
                changes,
                rate,
                idle_streams,
            };
            mcp_tasks_bench::push::run(&config, &mut std::io::stdout()).await
        }
        Bench::NotifyCost {
            database_url,
            clients,
            tasks,
            seconds,
            rounds,
        } => {
            let config = mcp_tasks_bench::notify_cost::Config {
                database_url: database_url.expose().to_owned(),
                clients,
                tasks,
                seconds,
                rounds,
            };
            mcp_tasks_bench::notify_cost::run(&config, &mut std::io::stdout()).await
        }
    }
}
