//! Command-line interface. Every flag of the service's commands (`migrate`, `serve`, `worker`,
//! `dev`, `demo`) has an environment variable, shown in `--help` and listed in the README
//! (`tests/readme_env.rs` keeps the two in step); the harnesses take flags only.
//!
//! One module per subcommand, each with its flags and what it runs; `args` holds the
//! flag groups several share, `logging` and `shutdown` what every process sets up.

mod args;
mod auth;
#[cfg(feature = "harness")]
mod bench;
#[cfg(feature = "harness")]
mod chaos;
mod client;
mod demo;
mod dev;
mod health;
mod logging;
mod migrate;
mod ready;
mod serve;
mod shutdown;
#[cfg(not(feature = "harness"))]
mod without_harness;
mod worker;

use clap::{Parser, Subcommand};

use crate::App;

#[cfg(feature = "harness")]
use self::bench::Bench;
#[cfg(feature = "harness")]
use self::chaos::ChaosCommand;
use self::client::ClientCommand;
use self::demo::DemoCommand;
use self::dev::DevCommand;
use self::health::HealthCommand;
use self::logging::{LogFormat, init_logging};
use self::serve::ServeCommand;
use self::worker::WorkerCommand;

#[derive(Debug, Parser)]
#[command(
    name = "mcp-tasks",
    version,
    about = "Durable MCP tasks (2026-07-28 + io.modelcontextprotocol/tasks) on PostgreSQL: stateless HTTP replicas and leased workers."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Log filter (tracing-subscriber EnvFilter syntax).
    #[arg(
        long,
        env = "MCP_TASKS_LOG",
        default_value = "info,sqlx=warn,rmcp=warn",
        global = true
    )]
    log: String,

    /// Log format.
    #[arg(long, env = "MCP_TASKS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,

    /// Threads that run requests and tasks (default: one per core). Where the process
    /// shares its cores (with PostgreSQL, or several replicas on one machine), 1 costs
    /// less CPU per request: threads hand work to each other with wake-ups. Scale out
    /// with more processes instead (README, *Performance*).
    #[arg(long, env = "MCP_TASKS_THREADS", global = true, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply database migrations (safe to run from several processes at once).
    Migrate(migrate::MigrateCommand),
    /// Run one stateless HTTP replica.
    Serve(ServeCommand),
    /// Run a worker that claims and runs tasks.
    Worker(WorkerCommand),
    /// Migrate, serve and run one worker in one process; starts a throwaway PostgreSQL
    /// when DATABASE_URL is unset and PostgreSQL is installed.
    Dev(DevCommand),
    /// Benchmarks; each prints its figures next to a baseline measured in the same run.
    #[cfg(feature = "harness")]
    #[command(subcommand)]
    Bench(Bench),
    /// Chaos harness: real replicas, workers and a throwaway PostgreSQL on loopback, killed
    /// and restarted at random while tasks run; checks that no task is lost, finalized
    /// twice or overwritten, and measures how long a dead worker's task waits.
    #[cfg(feature = "harness")]
    Chaos(ChaosCommand),
    #[cfg(not(feature = "harness"))]
    #[command(hide = true, disable_help_flag = true)]
    Bench(without_harness::Absent),
    #[cfg(not(feature = "harness"))]
    #[command(hide = true, disable_help_flag = true)]
    Chaos(without_harness::Absent),
    /// Run the demo sequence against a server with the `demo` tool pack.
    Demo(DemoCommand),
    #[command(flatten)]
    Client(ClientCommand),
    /// Exit 0 when a replica's `/readyz` answers 200 (the container health check).
    Health(HealthCommand),
}

impl App {
    /// Parses the command line and runs the subcommand; the process's exit code.
    pub fn run(self) -> std::process::ExitCode {
        main(&self)
    }
}

fn main(app: &App) -> std::process::ExitCode {
    let cli = Cli::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = cli.threads {
        runtime.worker_threads(usize::from(threads));
    }
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // The gRPC exporter needs the runtime around it when it is built.
    let provider = {
        let _inside = runtime.enter();
        mcp_tasks_observe::otel::provider_from_env()
    };
    let provider = match provider {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("mcp-tasks: trace export: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&cli.log, cli.log_format, provider.as_ref()) {
        eprintln!("mcp-tasks: {e:#}");
        return std::process::ExitCode::from(2);
    }
    let outcome = runtime.block_on(run(cli.command, app));
    // Spans still buffered are sent before the process exits (the runtime, which the
    // gRPC exporter runs on, is still up).
    if let Some(provider) = provider
        && let Err(e) = provider.shutdown()
    {
        eprintln!("mcp-tasks: trace export: {e}");
    }
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<client::Exited>() {
                return exit.code();
            }
            tracing::error!("{e:#}");
            eprintln!("mcp-tasks: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, app: &App) -> anyhow::Result<()> {
    // The client commands answer Ctrl-C themselves (cancel the task or detach).
    let shutdown = match &command {
        Command::Client(_) => tokio_util::sync::CancellationToken::new(),
        _ => shutdown::shutdown_on_signal(),
    };
    match command {
        Command::Migrate(command) => migrate::run(command).await,
        Command::Serve(command) => serve::run(command, app, shutdown).await,
        Command::Worker(command) => worker::run(command, app, shutdown).await,
        Command::Dev(command) => dev::run(command, app, shutdown).await,
        #[cfg(feature = "harness")]
        Command::Bench(bench) => bench::run(bench).await,
        #[cfg(feature = "harness")]
        Command::Chaos(command) => chaos::run(command, shutdown).await,
        #[cfg(not(feature = "harness"))]
        Command::Bench(_) => without_harness::refuse("bench"),
        #[cfg(not(feature = "harness"))]
        Command::Chaos(_) => without_harness::refuse("chaos"),
        Command::Demo(command) => demo::run(command).await,
        Command::Client(command) => client::run(command).await,
        Command::Health(command) => health::run(command).await,
    }
}
