//! `mcp-tasks serve`: one stateless HTTP replica.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use mcp_tasks_observe::Metrics;
use mcp_tasks_server::{
    AdminClaim, AllowedHosts, AppState, ConnectionConfig, ConsoleConfig, ProtectedResource,
    RateLimit, ServerConfig, StateKeys, Stores,
};
use mcp_tasks_store::Store;
use mcp_tasks_tools::LiveRegistry;
use mcp_tasks_tools::scheduling::Scheduling;
use tokio_util::sync::CancellationToken;

use super::args::{Database, Tools, server_info};
use super::auth::AuthArgs;
use super::ready::ReadyLine;
use crate::App;

#[derive(Debug, Args)]
pub(super) struct ServeCommand {
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    tools: Tools,
    #[command(flatten)]
    server: ServerArgs,
    /// Apply migrations before serving.
    #[arg(long, env = "MCP_TASKS_MIGRATE")]
    migrate: bool,
    /// Address to serve Prometheus metrics on (GET /metrics only), so the port clients
    /// reach need not show them: the replica's listener then answers 404 there. Unset,
    /// the replica's listener serves them.
    #[arg(long, env = "MCP_TASKS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

pub(super) async fn run(
    command: ServeCommand,
    app: &App,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    command.server.refuse_unsafe()?;
    let store = command.database.connect().await?;
    if command.migrate {
        store.migrate().await.context("migrating")?;
    }
    // The LISTEN connection of the push hub, beside the pools.
    super::args::check_connection_budget(&store, 1).await;
    let metrics = super::worker::install_metrics(&store)?;
    let tools = command.tools.load(app).await?;
    metrics.set_limits(super::worker::limits_source(
        tools.scheduling.clone(),
        tools.registry.clone(),
    ));
    serve(
        store,
        tools.registry.clone(),
        tools.scheduling.clone(),
        &command.server,
        Some(metrics),
        command.metrics_listen,
        shutdown,
    )
    .await
}

#[derive(Debug, Args)]
pub(super) struct ServerArgs {
    /// Address to listen on (port 0 picks a free port; the address is logged).
    #[arg(long, env = "MCP_TASKS_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Host names accepted in Host and Origin headers, comma-separated, or `*` for any.
    /// Defaults to localhost names on a loopback address and `*` otherwise; required
    /// beyond loopback with --auth none.
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
    /// Keys that sign MRTR requestState and the sessions of 2025-era clients: hex or base64, at least 32 bytes, comma-separated;
    /// the first signs, all verify (for rotation). Every replica must share them; when
    /// unset, a random per-process key is used.
    #[arg(long, env = "MCP_TASKS_STATE_KEY", hide_env_values = true)]
    state_key: Option<String>,
    /// How long a session of a 2025-era client (Mcp-Session-Id) lasts before it must
    /// initialize again (ms). Sessions are signed with the state keys.
    #[arg(long, env = "MCP_TASKS_SESSION_TTL_MS", default_value_t = 86_400_000)]
    session_ttl_ms: u64,
    /// Name reported as serverInfo.
    #[arg(long, env = "MCP_TASKS_SERVER_NAME", default_value = "mcp-tasks")]
    pub(super) server_name: String,
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
    /// Longest any SSE stream stays open (listen streams, 2025-era waits, the console's
    /// live parts) before it ends and its client reconnects (ms).
    #[arg(
        long,
        env = "MCP_TASKS_MAX_STREAM_LIFETIME_MS",
        default_value_t = 1_800_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    max_stream_lifetime_ms: u64,
    /// Deepest JSON nesting accepted in a request body.
    #[arg(long, env = "MCP_TASKS_MAX_JSON_DEPTH", default_value_t = 64)]
    max_json_depth: usize,
    /// Largest tools/call arguments, serialized, in bytes.
    #[arg(long, env = "MCP_TASKS_MAX_ARGUMENT_BYTES", default_value_t = 256 * 1024)]
    max_argument_bytes: usize,
    /// Largest inputResponses of one request, serialized, in bytes.
    #[arg(long, env = "MCP_TASKS_MAX_INPUT_RESPONSE_BYTES", default_value_t = 256 * 1024)]
    max_input_response_bytes: usize,
    /// Most unfinished tasks one principal may have (0 turns the limit off).
    #[arg(long, env = "MCP_TASKS_MAX_TASKS_IN_FLIGHT", default_value_t = 1000)]
    max_tasks_in_flight: i64,
    /// Requests per second per principal per replica (0 turns the limit off).
    #[arg(long, env = "MCP_TASKS_RATE_LIMIT", default_value_t = 100.0)]
    rate_limit: f64,
    /// Requests a principal may send at once before the rate applies.
    #[arg(long, env = "MCP_TASKS_RATE_BURST", default_value_t = 300.0)]
    rate_burst: f64,
    #[command(flatten)]
    connections: ConnectionArgs,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    pub(super) console: ConsoleArgs,
    #[command(flatten)]
    pub(super) ready: ReadyLine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

/// The web console at /console.
#[derive(Debug, Args)]
pub(super) struct ConsoleArgs {
    /// Serve the web console at /console: `on` or `off` (`--console` alone is `on`)
    /// [default: off with serve, on with dev].
    #[arg(long = "console", env = "MCP_TASKS_CONSOLE", value_enum, num_args = 0..=1, default_missing_value = "on")]
    switch: Option<Switch>,
    /// The claim that makes a principal an admin of its tenant in the console (sees every
    /// task of its tenant, never others' arguments or results): `NAME=VALUE` (the claim
    /// is that string, or an array holding it) or `NAME` (the claim is `true`).
    #[arg(long = "console-admin-claim", env = "MCP_TASKS_CONSOLE_ADMIN_CLAIM", value_parser = AdminClaim::parse)]
    admin_claim: Option<AdminClaim>,
    /// The console's OAuth client id at the authorization server; when unset, the console
    /// registers itself there (RFC 7591).
    #[arg(
        long = "console-oauth-client-id",
        env = "MCP_TASKS_CONSOLE_OAUTH_CLIENT_ID"
    )]
    oauth_client_id: Option<String>,
    /// The URL browsers reach this server at, behind any proxy (`https://…` or
    /// `http://…`); its scheme decides whether the console's cookies are `Secure`
    /// [default: the scheme of --resource, else https unless listening on loopback].
    #[arg(long = "public-url", env = "MCP_TASKS_PUBLIC_URL", value_parser = public_url)]
    public_url: Option<url::Url>,
    /// Whether the console is on when neither flag nor variable says (set by `dev`).
    #[arg(skip)]
    pub(super) by_default: bool,
}

/// `--public-url`: an absolute http or https URL.
fn public_url(spec: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(spec).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("give an http:// or https:// URL with a host".into());
    }
    Ok(url)
}

/// Connection-level timeouts and limits: what keeps slow, idle and excess clients from
/// holding a replica.
#[derive(Debug, Args)]
pub(super) struct ConnectionArgs {
    /// Most client connections served at once; past it, the connection idle longest is
    /// closed to make room, or new ones get 503 with Retry-After. Defaults to what the
    /// open-file limit leaves after the database pool and the process; a larger value is
    /// refused.
    #[arg(long, env = "MCP_TASKS_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// How long a request's head may take to arrive, from its first byte (from the
    /// accept on a new connection); then the connection is closed (ms).
    #[arg(long, env = "MCP_TASKS_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// How long a request's body may take to arrive once its head is in; then 408 and
    /// the connection is closed (ms).
    #[arg(long, env = "MCP_TASKS_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    body_timeout_ms: u64,
    /// How long a connection may stay open with no request in progress, or with a client
    /// that reads nothing of its answers (ms). Listen streams and waits for a task are in
    /// progress.
    #[arg(long, env = "MCP_TASKS_IDLE_TIMEOUT_MS", default_value_t = 65_000)]
    idle_timeout_ms: u64,
    /// Longest a request may take from its head to its answer, then 503 (ms); must exceed
    /// the sync wait. Listen streams are not counted once answered.
    #[arg(long, env = "MCP_TASKS_REQUEST_TIMEOUT_MS", default_value_t = 90_000)]
    request_timeout_ms: u64,
    /// HTTP/2 streams one connection may have open at once.
    #[arg(long, env = "MCP_TASKS_H2_MAX_STREAMS", default_value_t = 100)]
    h2_max_streams: u32,
}

impl ConnectionArgs {
    fn config(&self) -> ConnectionConfig {
        ConnectionConfig {
            max_connections: self
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            h2_max_concurrent_streams: self.h2_max_streams,
            ..ConnectionConfig::default()
        }
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
        c.session_ttl = Duration::from_millis(self.session_ttl_ms);
        c.max_listen_tasks = self.max_listen_tasks;
        c.max_streams_per_principal = self.max_streams_per_principal;
        c.max_stream_lifetime = Duration::from_millis(self.max_stream_lifetime_ms);
        c.json_limits.max_depth = self.max_json_depth;
        c.max_argument_bytes = self.max_argument_bytes;
        c.max_input_response_bytes = self.max_input_response_bytes;
        c.max_tasks_in_flight = self.max_tasks_in_flight;
        c.rate_limit = (self.rate_limit > 0.0).then_some(RateLimit {
            per_second: self.rate_limit,
            burst: self.rate_burst.max(1.0),
        });
        c.connections = self.connections.config();
        let console = self
            .console
            .switch
            .map_or(self.console.by_default, |s| s == Switch::On);
        c.console = console.then(|| ConsoleConfig {
            admin_claim: self.console.admin_claim.clone(),
            secure_cookies: self.secure_cookies(None),
            oauth_client_id: self.console.oauth_client_id.clone(),
        });
        c
    }

    /// Why these settings must not be served, before anything is connected.
    pub(super) fn refuse_unsafe(&self) -> anyhow::Result<()> {
        self.auth
            .refuse_unsafe(self.listen, self.allowed_hosts.as_deref())
    }

    /// Whether the console's cookies are `Secure`: when the public scheme is https. That
    /// is the scheme of --public-url, else of the resource (`MCP_TASKS_RESOURCE`);
    /// without either, only a loopback address is taken for plain http (`dev`).
    fn secure_cookies(&self, resource: Option<&ProtectedResource>) -> bool {
        match (&self.console.public_url, resource) {
            (Some(url), _) => url.scheme() == "https",
            (None, Some(resource)) => resource.resource.starts_with("https://"),
            (None, None) => !self.listen.ip().is_loopback(),
        }
    }

    fn state_keys(&self) -> anyhow::Result<StateKeys> {
        match &self.state_key {
            Some(spec) => StateKeys::parse(spec)
                .map_err(anyhow::Error::msg)
                .context("MCP_TASKS_STATE_KEY"),
            None => {
                tracing::warn!(
                    "MCP_TASKS_STATE_KEY is unset: using a random key, so MRTR requestState and sessions of 2025-era clients only verify on this replica"
                );
                Ok(StateKeys::random())
            }
        }
    }
}

/// Serves `args` until `shutdown`; `metrics` on `GET /metrics`, of the replica's listener
/// or, with `metrics_listen`, of a listener of their own.
pub(super) async fn serve(
    store: Store,
    registry: LiveRegistry,
    scheduling: Scheduling,
    args: &ServerArgs,
    metrics: Option<Metrics>,
    metrics_listen: Option<SocketAddr>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    args.refuse_unsafe()?;
    let (auth, protected_resource) = args.auth.authenticator(args.listen).await?;
    let mut config = args.config();
    config.metrics = metrics;
    config.metrics_on_listener = metrics_listen.is_none();
    config.scheduling = scheduling;
    if config.connections.request_timeout <= config.sync_wait {
        bail!(
            "MCP_TASKS_REQUEST_TIMEOUT_MS ({} ms) must be longer than MCP_TASKS_SYNC_WAIT_MS ({} ms), or every wait for a task would be cut short",
            config.connections.request_timeout.as_millis(),
            config.sync_wait.as_millis()
        );
    }
    if let Some(console) = config.console.as_mut() {
        console.secure_cookies = args.secure_cookies(protected_resource.as_ref());
    }
    config.protected_resource = protected_resource;
    let state = AppState::new(
        Stores {
            tasks: store.replica(),
            console: store.console(),
            sessions: store.sessions(),
        },
        registry,
        config,
        auth,
        args.state_keys()?,
        shutdown.child_token(),
    );
    let limit = state
        .connection_limit()
        .map_err(anyhow::Error::msg)
        .context("MCP_TASKS_MAX_CONNECTIONS")?;
    // Bound first: once "listening on" is logged, scrapes find it too.
    let (metrics_listener, metrics_addr) = match metrics_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} for metrics"))?;
            let bound = listener.local_addr()?;
            tracing::info!(addr = %bound, "metrics on http://{bound}/metrics");
            (Some(listener), Some(bound))
        }
        None => (None, None),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        max_connections = limit.max_connections,
        "listening on http://{addr}/mcp"
    );
    if state.config().console.is_some() {
        tracing::info!("web console on http://{addr}/console");
    }
    args.ready.announce(serde_json::json!({
        "listen": addr,
        "url": format!("http://{addr}/mcp"),
        "metrics": metrics_addr,
    }));
    if !addr.ip().is_loopback() && matches!(args.config().allowed_hosts, AllowedHosts::Any) {
        tracing::warn!(
            "listening beyond loopback with any Host allowed; set MCP_TASKS_ALLOWED_HOSTS to the names clients use"
        );
    }
    // Scrapes go on while the replica drains, and end with it however it ends.
    let metrics_stop = CancellationToken::new();
    let metrics_served = {
        let (state, stop) = (state.clone(), metrics_stop.clone());
        async move {
            match metrics_listener {
                Some(listener) => mcp_tasks_server::serve_metrics(listener, state, stop).await,
                None => Ok(()),
            }
        }
    };
    let stop = shutdown.clone();
    // The API with the console beside it (its routes are none when it is off).
    let app =
        mcp_tasks_server::router(state.clone()).merge(mcp_tasks_console::routes(state.clone()));
    let served =
        mcp_tasks_server::serve(listener, state, app, async move { stop.cancelled().await });
    // In-flight requests finish, listen streams end with their result; a connection that
    // still lingers after the drain does not keep the process alive.
    let drain_limit = Duration::from_millis(args.drain_grace_ms) + Duration::from_secs(5);
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(drain_limit).await;
    };
    let serving = async {
        let served = tokio::select! {
            served = served => served.context("serving"),
            () = deadline => {
                tracing::warn!("connections still open after the drain; exiting anyway");
                Ok(())
            }
        };
        metrics_stop.cancel();
        served
    };
    let (served, metrics_served) = tokio::join!(serving, metrics_served);
    served?;
    metrics_served.context("serving metrics")?;
    if shutdown.is_cancelled() {
        tracing::info!("replica stopped");
        Ok(())
    } else {
        bail!("the server stopped unexpectedly")
    }
}
