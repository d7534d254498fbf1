//! Command-line interface. Every flag has an environment variable, shown in `--help`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use mcp_tasks_server::{
    AllowedHosts, AppState, Authenticator, JwtAuth, JwtConfig, KeySource, NoAuth,
    ProtectedResource, RateLimit, ServerConfig, StateKeys,
};
use mcp_tasks_store::{PoolConfig, Store};
use mcp_tasks_tools::Registry;
use mcp_tasks_wire::results::Implementation;
use mcp_tasks_wire::secret::Secret;
use mcp_tasks_worker::WorkerConfig;
use tokio_util::sync::CancellationToken;

use mcp_tasks_devdb::DevDatabase;

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
        default_value = "info,sqlx=warn",
        global = true
    )]
    log: String,

    /// Log format.
    #[arg(long, env = "MCP_TASKS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply database migrations (safe to run from several processes at once).
    Migrate(Database),
    /// Run one stateless HTTP replica.
    Serve {
        #[command(flatten)]
        database: Database,
        #[command(flatten)]
        tools: Tools,
        #[command(flatten)]
        server: ServerArgs,
        /// Apply migrations before serving.
        #[arg(long, env = "MCP_TASKS_MIGRATE")]
        migrate: bool,
    },
    /// Run a worker that claims and runs tasks.
    Worker {
        #[command(flatten)]
        database: Database,
        #[command(flatten)]
        tools: Tools,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// Migrate, serve and run one worker in one process; starts a throwaway PostgreSQL
    /// when DATABASE_URL is unset and PostgreSQL is installed.
    Dev {
        #[command(flatten)]
        database: OptionalDatabase,
        #[command(flatten)]
        tools: Tools,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// Benchmarks; each prints its figures next to a baseline measured in the same run.
    #[command(subcommand)]
    Bench(Bench),
    /// Chaos harness: real replicas, workers and a throwaway PostgreSQL on loopback, killed
    /// and restarted at random while tasks run; checks that no task is lost, finalized
    /// twice or overwritten, and measures how long a dead worker's task waits.
    Chaos {
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
    },
    /// Run the lessons' demo sequence against a server with the `demo` tool pack.
    Demo {
        /// The server's MCP endpoint.
        #[arg(
            long,
            env = "MCP_TASKS_URL",
            default_value = "http://127.0.0.1:8080/mcp"
        )]
        url: String,
    },
}

#[derive(Debug, Subcommand)]
enum Bench {
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

#[derive(Debug, Args)]
struct Database {
    /// PostgreSQL connection URL.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    url: Secret,
    #[command(flatten)]
    pool: PoolArgs,
}

#[derive(Debug, Args)]
struct OptionalDatabase {
    /// PostgreSQL connection URL; when unset, a throwaway cluster is started.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    url: Option<Secret>,
    #[command(flatten)]
    pool: PoolArgs,
}

#[derive(Debug, Args)]
struct PoolArgs {
    /// Largest number of database connections this process opens.
    #[arg(long, env = "MCP_TASKS_DB_MAX_CONNECTIONS", default_value_t = 16)]
    db_max_connections: u32,
    /// How long a request waits for a database connection before failing (ms).
    #[arg(long, env = "MCP_TASKS_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 2000)]
    db_acquire_timeout_ms: u64,
}

impl PoolArgs {
    fn config(&self) -> PoolConfig {
        PoolConfig {
            max_connections: self.db_max_connections,
            acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms),
            ..PoolConfig::default()
        }
    }
}

#[derive(Debug, Args)]
struct Tools {
    /// Tool packs to serve, comma-separated (demo, conformance).
    #[arg(long, env = "MCP_TASKS_TOOLS", default_value = "demo")]
    tools: String,
}

impl Tools {
    fn registry(&self) -> anyhow::Result<Registry> {
        Registry::from_packs(&self.tools).context("--tools")
    }
}

#[derive(Debug, Args)]
struct ServerArgs {
    /// Address to listen on (port 0 picks a free port; the address is logged).
    #[arg(long, env = "MCP_TASKS_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Host names accepted in Host and Origin headers, comma-separated, or `*` for any.
    /// Defaults to localhost names on a loopback address and `*` otherwise.
    #[arg(long, env = "MCP_TASKS_ALLOWED_HOSTS")]
    allowed_hosts: Option<String>,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "MCP_TASKS_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    max_body_bytes: usize,
    /// How long a replica waits for a worker to finish a task for a client that did not
    /// declare the tasks extension (ms).
    #[arg(long, env = "MCP_TASKS_SYNC_WAIT_MS", default_value_t = 60_000)]
    sync_wait_ms: u64,
    /// On SIGTERM, how long requests waiting for a task may go on before answering 503
    /// (ms).
    #[arg(long, env = "MCP_TASKS_DRAIN_GRACE_MS", default_value_t = 10_000)]
    drain_grace_ms: u64,
    /// Minimum time a finished task stays readable (ms).
    #[arg(long, env = "MCP_TASKS_RETENTION_MS", default_value_t = 3_600_000)]
    retention_ms: u64,
    /// Keys that sign MRTR requestState: hex or base64, at least 32 bytes, comma-separated;
    /// the first signs, all verify (for rotation). Every replica must share them; when
    /// unset, a random per-process key is used.
    #[arg(long, env = "MCP_TASKS_STATE_KEY", hide_env_values = true)]
    state_key: Option<String>,
    /// Name reported as serverInfo.
    #[arg(long, env = "MCP_TASKS_SERVER_NAME", default_value = "mcp-tasks")]
    server_name: String,
    /// Most task ids one subscriptions/listen may name.
    #[arg(long, env = "MCP_TASKS_MAX_LISTEN_TASKS", default_value_t = 100)]
    max_listen_tasks: usize,
    /// Most listen streams one principal may hold open on one replica.
    #[arg(
        long,
        env = "MCP_TASKS_MAX_STREAMS_PER_PRINCIPAL",
        default_value_t = 64
    )]
    max_streams_per_principal: usize,
    /// Deepest JSON nesting accepted in a request body.
    #[arg(long, env = "MCP_TASKS_MAX_JSON_DEPTH", default_value_t = 64)]
    max_json_depth: usize,
    /// Largest tools/call arguments, serialized, in bytes.
    #[arg(long, env = "MCP_TASKS_MAX_ARGUMENT_BYTES", default_value_t = 256 * 1024)]
    max_argument_bytes: usize,
    /// Largest inputResponses of one request, serialized, in bytes.
    #[arg(long, env = "MCP_TASKS_MAX_INPUT_RESPONSE_BYTES", default_value_t = 256 * 1024)]
    max_input_response_bytes: usize,
    /// Most unfinished tasks one principal may have.
    #[arg(long, env = "MCP_TASKS_MAX_TASKS_IN_FLIGHT", default_value_t = 1000)]
    max_tasks_in_flight: i64,
    /// Requests per second per principal per replica (0 turns the limit off).
    #[arg(long, env = "MCP_TASKS_RATE_LIMIT", default_value_t = 100.0)]
    rate_limit: f64,
    /// Requests a principal may send at once before the rate applies.
    #[arg(long, env = "MCP_TASKS_RATE_BURST", default_value_t = 300.0)]
    rate_burst: f64,
    #[command(flatten)]
    auth: AuthArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AuthMode {
    /// One tenant, one anonymous principal: local use only.
    None,
    /// Bearer JWTs (OAuth 2.1 resource server).
    Jwt,
}

#[derive(Debug, Args)]
struct AuthArgs {
    /// How callers are authenticated.
    #[arg(long, env = "MCP_TASKS_AUTH", value_enum, default_value_t = AuthMode::None)]
    auth: AuthMode,
    /// With --auth none, allow listening on a non-loopback address.
    #[arg(long, env = "MCP_TASKS_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// JWK set with the RS256/ES256 verification keys: a file path or an http(s) URL.
    #[arg(long, env = "MCP_TASKS_JWT_JWKS")]
    jwt_jwks: Option<String>,
    /// Shared HS256 secret (at least 32 bytes), instead of a JWK set.
    #[arg(long, env = "MCP_TASKS_JWT_HS256_SECRET", hide_env_values = true)]
    jwt_hs256_secret: Option<Secret>,
    /// Required `iss` of tokens.
    #[arg(long, env = "MCP_TASKS_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// Required `aud` of tokens (defaults to --resource).
    #[arg(long, env = "MCP_TASKS_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// Claim that names the tenant.
    #[arg(long, env = "MCP_TASKS_TENANT_CLAIM", default_value = "tenant")]
    tenant_claim: String,
    /// This server's resource identifier (its public MCP endpoint URL), published as
    /// RFC 9728 metadata; required with --auth jwt.
    #[arg(long, env = "MCP_TASKS_RESOURCE")]
    resource: Option<String>,
    /// Authorization servers that issue tokens for this resource, comma-separated.
    #[arg(long, env = "MCP_TASKS_AUTHORIZATION_SERVERS", value_delimiter = ',')]
    authorization_servers: Vec<String>,
}

impl AuthArgs {
    /// The authenticator, or why the configuration cannot be served.
    async fn authenticator(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<(Arc<dyn Authenticator>, Option<ProtectedResource>)> {
        match self.auth {
            AuthMode::None => {
                if !listen.ip().is_loopback() && !self.allow_unauthenticated {
                    bail!(
                        "refusing to listen on {listen} without authentication: anyone who can reach it could read and cancel every task. Use --auth jwt, listen on a loopback address, or pass --allow-unauthenticated (MCP_TASKS_ALLOW_UNAUTHENTICATED=true) if something in front of this server authenticates callers"
                    );
                }
                tracing::warn!(
                    %listen,
                    "authentication is off (--auth none): every caller is the same anonymous principal"
                );
                Ok((Arc::new(NoAuth::default()), None))
            }
            AuthMode::Jwt => {
                let resource = self.resource.clone().context(
                    "--auth jwt needs --resource (MCP_TASKS_RESOURCE): this server's public MCP endpoint URL",
                )?;
                let keys = match (&self.jwt_jwks, &self.jwt_hs256_secret) {
                    (Some(jwks), None) => KeySource::jwks(jwks),
                    (None, Some(secret)) => KeySource::Hs256(secret.clone()),
                    (Some(_), Some(_)) => {
                        bail!(
                            "give either MCP_TASKS_JWT_JWKS or MCP_TASKS_JWT_HS256_SECRET, not both"
                        )
                    }
                    (None, None) => {
                        bail!("--auth jwt needs MCP_TASKS_JWT_JWKS or MCP_TASKS_JWT_HS256_SECRET")
                    }
                };
                let mut config = JwtConfig::new(keys);
                config.issuer.clone_from(&self.jwt_issuer);
                config.audience = Some(
                    self.jwt_audience
                        .clone()
                        .unwrap_or_else(|| resource.clone()),
                );
                config.tenant_claim.clone_from(&self.tenant_claim);
                let auth = JwtAuth::new(config).await.map_err(anyhow::Error::msg)?;
                tracing::info!(%resource, "authentication: bearer JWTs");
                Ok((
                    Arc::new(auth),
                    Some(ProtectedResource {
                        resource,
                        authorization_servers: self.authorization_servers.clone(),
                    }),
                ))
            }
        }
    }
}

#[derive(Debug, Args)]
struct WorkerArgs {
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
    /// Worker id recorded as lease owner (default: host-pid-random).
    #[arg(long, env = "MCP_TASKS_WORKER_ID")]
    worker_id: Option<String>,
}

fn server_info(name: &str) -> Implementation {
    Implementation {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

impl WorkerArgs {
    fn config(&self, server_name: &str) -> WorkerConfig {
        let mut c = WorkerConfig::new(server_info(server_name));
        c.concurrency = self.concurrency;
        c.lease = Duration::from_millis(self.lease_ms);
        c.poll_interval = Duration::from_millis(self.poll_ms);
        c.shutdown_grace = Duration::from_millis(self.shutdown_grace_ms);
        if let Some(id) = &self.worker_id {
            c.worker_id.clone_from(id);
        }
        c
    }
}

impl ServerArgs {
    fn config(&self) -> ServerConfig {
        let mut c = ServerConfig::new(server_info(&self.server_name));
        c.allowed_hosts = match &self.allowed_hosts {
            Some(spec) => AllowedHosts::parse(spec),
            None if self.listen.ip().is_loopback() => AllowedHosts::loopback(),
            None => AllowedHosts::Any,
        };
        c.max_body_bytes = self.max_body_bytes;
        c.sync_wait = Duration::from_millis(self.sync_wait_ms);
        c.retention = Duration::from_millis(self.retention_ms);
        c.drain_grace = Duration::from_millis(self.drain_grace_ms);
        c.max_listen_tasks = self.max_listen_tasks;
        c.max_streams_per_principal = self.max_streams_per_principal;
        c.json_limits.max_depth = self.max_json_depth;
        c.max_argument_bytes = self.max_argument_bytes;
        c.max_input_response_bytes = self.max_input_response_bytes;
        c.max_tasks_in_flight = self.max_tasks_in_flight;
        c.rate_limit = (self.rate_limit > 0.0).then_some(RateLimit {
            per_second: self.rate_limit,
            burst: self.rate_burst.max(1.0),
        });
        c
    }

    fn state_keys(&self) -> anyhow::Result<StateKeys> {
        match &self.state_key {
            Some(spec) => StateKeys::parse(spec)
                .map_err(anyhow::Error::msg)
                .context("MCP_TASKS_STATE_KEY"),
            None => {
                tracing::warn!(
                    "MCP_TASKS_STATE_KEY is unset: using a random key, so MRTR requestState only verifies on this replica"
                );
                Ok(StateKeys::random())
            }
        }
    }
}

pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logging(&cli.log, cli.log_format) {
        eprintln!("mcp-tasks: {e:#}");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("mcp-tasks: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).context("MCP_TASKS_LOG")?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

async fn connect(url: &str, pool: &PoolArgs) -> anyhow::Result<Store> {
    Store::connect(url, &pool.config())
        .await
        .context("DATABASE_URL is not a valid PostgreSQL URL")
}

async fn run(command: Command) -> anyhow::Result<()> {
    let shutdown = shutdown_on_signal();
    match command {
        Command::Migrate(db) => {
            let store = connect(db.url.expose(), &db.pool).await?;
            store.migrate().await.context("migrating")?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve {
            database,
            tools,
            server,
            migrate,
        } => {
            let store = connect(database.url.expose(), &database.pool).await?;
            if migrate {
                store.migrate().await.context("migrating")?;
            }
            serve(store, tools.registry()?, &server, shutdown).await
        }
        Command::Worker {
            database,
            tools,
            worker,
        } => {
            let store = connect(database.url.expose(), &database.pool).await?;
            mcp_tasks_worker::run(
                store,
                tools.registry()?,
                worker.config("mcp-tasks"),
                shutdown,
            )
            .await?;
            Ok(())
        }
        Command::Dev {
            database,
            tools,
            server,
            worker,
        } => {
            let registry = tools.registry()?;
            let throwaway;
            let url = match database.url {
                Some(url) => url.expose().to_owned(),
                None => {
                    throwaway = tokio::task::spawn_blocking(DevDatabase::start).await??;
                    tracing::info!(
                        url = throwaway.url(),
                        version = throwaway.version(),
                        data = %throwaway.data_dir().display(),
                        "DATABASE_URL is unset: started a throwaway PostgreSQL cluster; it is deleted on exit"
                    );
                    throwaway.url().to_owned()
                }
            };
            let store = connect(&url, &database.pool).await?;
            store.migrate().await.context("migrating")?;
            let worker_task = tokio::spawn(mcp_tasks_worker::run(
                store.clone(),
                registry.clone(),
                worker.config(&server.server_name),
                shutdown.clone(),
            ));
            let served = serve(store, registry, &server, shutdown.clone()).await;
            shutdown.cancel();
            worker_task.await??;
            served
        }
        Command::Bench(Bench::Push {
            database_url,
            streams,
            changes,
            rate,
            idle_streams,
        }) => {
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
        Command::Bench(Bench::NotifyCost {
            database_url,
            clients,
            tasks,
            seconds,
            rounds,
        }) => {
            let config = mcp_tasks_bench::notify_cost::Config {
                database_url: database_url.expose().to_owned(),
                clients,
                tasks,
                seconds,
                rounds,
            };
            mcp_tasks_bench::notify_cost::run(&config, &mut std::io::stdout()).await
        }
        Command::Chaos {
            tasks,
            replicas,
            workers,
            duration,
            concurrency,
            seed,
            lease_ms,
        } => {
            let config = mcp_tasks_chaos::Config {
                binary: std::env::current_exe().context("locating this executable")?,
                tasks,
                replicas,
                workers,
                duration: Duration::from_secs(duration),
                concurrency,
                seed,
                lease_ms,
            };
            mcp_tasks_chaos::run(&config, shutdown).await
        }
        Command::Demo { url } => {
            let mut out = std::io::stdout();
            let mut log = std::io::stderr();
            mcp_tasks_client::run_demo(&url, &mut out, &mut log).await?;
            Ok(())
        }
    }
}

async fn serve(
    store: Store,
    registry: Registry,
    args: &ServerArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (auth, protected_resource) = args.auth.authenticator(args.listen).await?;
    let mut config = args.config();
    config.protected_resource = protected_resource;
    let state = AppState::new(
        store,
        registry,
        config,
        auth,
        args.state_keys()?,
        shutdown.child_token(),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "listening on http://{addr}/mcp");
    if !addr.ip().is_loopback() && matches!(args.config().allowed_hosts, AllowedHosts::Any) {
        tracing::warn!(
            "listening beyond loopback with any Host allowed; set MCP_TASKS_ALLOWED_HOSTS to the names clients use"
        );
    }
    let stop = shutdown.clone();
    let served = mcp_tasks_server::serve(listener, state, async move { stop.cancelled().await });
    // In-flight requests finish, listen streams end with their result; a connection that
    // still lingers after the drain does not keep the process alive.
    let drain_limit = Duration::from_millis(args.drain_grace_ms) + Duration::from_secs(5);
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(drain_limit).await;
    };
    tokio::select! {
        served = served => served.context("serving")?,
        () = deadline => tracing::warn!("connections still open after the drain; exiting anyway"),
    }
    if shutdown.is_cancelled() {
        tracing::info!("replica stopped");
        Ok(())
    } else {
        bail!("the server stopped unexpectedly")
    }
}

/// The first SIGTERM or SIGINT starts a graceful shutdown; a second one exits at once.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!(
            "shutdown requested; finishing in-flight work (signal again to exit at once)"
        );
        t.cancel();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    token
}
