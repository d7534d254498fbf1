//! `mcp-tasks bench`: benchmarks that print their figures next to a baseline.

use anyhow::Context;
use clap::Subcommand;
use mcp_tasks_wire::secret::Secret;

/// What every hot-path scenario takes.
#[derive(Debug, clap::Args)]
pub(super) struct Scenario {
    /// PostgreSQL server URL (a scratch database is created on it for the service and the
    /// raw baselines). With --url, the database of that service.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    database_url: Secret,
    /// Measure the service at this URL (http://host:port/mcp) instead of starting one on
    /// loopback.
    #[arg(long)]
    url: Option<String>,
    /// Seconds per measurement (default 5, or 0.5 with --short).
    #[arg(long)]
    seconds: Option<f64>,
    /// CI mode: small sizes and short runs; figures and targets are printed, nothing is
    /// asserted.
    #[arg(long)]
    short: bool,
    /// Start the service (replicas and workers) from this `mcp-tasks` executable instead
    /// of this one: the same scenarios, and so the same figures, for two builds.
    #[arg(long, value_name = "PATH")]
    service_binary: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(super) enum Bench {
    /// tools/call -> task at concurrency 1, 16, 64, beside the raw one-row INSERT.
    Create(Scenario),
    /// tasks/get at concurrency 1, 16, 64, beside the raw primary-key select.
    Get(Scenario),
    /// Tasks created over HTTP and run to completion by a worker, beside the raw
    /// create -> claim -> complete transactions, unbatched.
    Lifecycle(Scenario),
    /// Commit of a new task to its handler starting, one task at a time.
    Pickup(Scenario),
    /// create, get and lifecycle with a million finished and 100,000 queued tasks in the
    /// table, against the empty store; and each maintenance statement at that size.
    Scale(Scenario),
    /// Commits and WAL bytes per task, dead tuples and table size after a run.
    Efficiency(Scenario),
    /// The web console's pages from a cold start (a new replica each) with 100,000 tasks
    /// in the table, beside a raw primary-key select and index read; and their plans.
    Console(Scenario),
    /// Many tenants on one queue: the fair claim beside the oldest-first one, and a light
    /// tenant's pickup while one tenant floods; again at 1,000,000 tasks of 10,000 tenants.
    Fairness(Scenario),
    /// create and get at c16 through PgBouncer in transaction mode (1.21+; the LISTEN
    /// connection direct) beside the same on direct connections.
    Pooler(Scenario),
    /// Every scenario above, in turn.
    All(Scenario),
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

fn scenario_config(s: Scenario) -> anyhow::Result<mcp_tasks_bench::scenarios::Config> {
    Ok(mcp_tasks_bench::scenarios::Config {
        database_url: s.database_url.expose().to_owned(),
        binary: match s.service_binary {
            Some(path) => path,
            None => std::env::current_exe().context("locating this executable")?,
        },
        url: s.url,
        seconds: s.seconds.unwrap_or(if s.short { 0.5 } else { 5.0 }),
        short: s.short,
    })
}

pub(super) async fn run(bench: Bench) -> anyhow::Result<()> {
    use mcp_tasks_bench::scenarios::{self, Scenario as S};
    let out = &mut std::io::stdout();
    match bench {
        Bench::Create(s) => scenarios::run(S::Create, &scenario_config(s)?, out).await,
        Bench::Get(s) => scenarios::run(S::Get, &scenario_config(s)?, out).await,
        Bench::Lifecycle(s) => scenarios::run(S::Lifecycle, &scenario_config(s)?, out).await,
        Bench::Pickup(s) => scenarios::run(S::Pickup, &scenario_config(s)?, out).await,
        Bench::Scale(s) => scenarios::run(S::Scale, &scenario_config(s)?, out).await,
        Bench::Efficiency(s) => scenarios::run(S::Efficiency, &scenario_config(s)?, out).await,
        Bench::Console(s) => scenarios::run(S::Console, &scenario_config(s)?, out).await,
        Bench::Fairness(s) => scenarios::run(S::Fairness, &scenario_config(s)?, out).await,
        Bench::Pooler(s) => scenarios::run(S::Pooler, &scenario_config(s)?, out).await,
        Bench::All(s) => scenarios::run_all(&scenario_config(s)?, out).await,
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
