//! What several subcommands share: the server endpoint clients talk to, the database and
//! pool flags, the tools (packs, the configuration file's upstreams, an `App`'s own), and
//! the `serverInfo` replicas and workers report.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use mcp_tasks_store::{PoolConfig, Store};
use mcp_tasks_tools::{LiveRegistry, Registry};
use mcp_tasks_upstream::{Config, Options as UpstreamOptions, Scheduling, Upstreams};
use mcp_tasks_wire::results::Implementation;
use mcp_tasks_wire::secret::Secret;

use crate::App;

/// The MCP server a client command talks to.
#[derive(Debug, Args)]
pub(super) struct Endpoint {
    /// The server's MCP endpoint.
    #[arg(
        long,
        env = "MCP_TASKS_URL",
        default_value = "http://127.0.0.1:8080/mcp"
    )]
    pub(super) url: String,
}

#[derive(Debug, Args)]
pub(super) struct Database {
    /// PostgreSQL connection URL.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    url: Secret,
    #[command(flatten)]
    pool: PoolArgs,
}

#[derive(Debug, Args)]
pub(super) struct OptionalDatabase {
    /// PostgreSQL connection URL; when unset, a throwaway cluster is started.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    pub(super) url: Option<Secret>,
    #[command(flatten)]
    pub(super) pool: PoolArgs,
}

#[derive(Debug, Args)]
pub(super) struct PoolArgs {
    /// Largest number of database connections this process opens [default: 4 per core,
    /// between 8 and 64; for a worker, at least its concurrency + 4].
    #[arg(long, env = "MCP_TASKS_DB_MAX_CONNECTIONS")]
    db_max_connections: Option<u32>,
    /// How long a request waits for a database connection before failing (ms).
    #[arg(long, env = "MCP_TASKS_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 2000)]
    db_acquire_timeout_ms: u64,
    /// When DATABASE_URL is a pooler in transaction mode (PgBouncer): a URL straight to
    /// PostgreSQL, for LISTEN, the wake-up duty's lock and migrations.
    #[arg(long, env = "MCP_TASKS_DIRECT_DATABASE_URL", hide_env_values = true)]
    direct_database_url: Option<Secret>,
}

impl PoolArgs {
    fn config(&self) -> PoolConfig {
        PoolConfig {
            max_connections: self
                .db_max_connections
                .unwrap_or_else(mcp_tasks_store::default_max_connections),
            acquire_timeout: Duration::from_millis(self.db_acquire_timeout_ms),
            // Empty is unset: what a compose file's `${VAR:-}` gives when nobody set it.
            direct_url: self
                .direct_database_url
                .clone()
                .filter(|url| !url.expose().is_empty()),
            ..PoolConfig::default()
        }
    }
}

#[derive(Debug, Args)]
pub(super) struct Tools {
    /// Built-in tool packs to serve, comma-separated (demo, conformance), or `none`
    /// [default: demo; in a binary built with `App`, what it chose].
    #[arg(long, env = "MCP_TASKS_TOOLS")]
    tools: Option<String>,
    /// Configuration file (TOML): upstream MCP servers whose tools are served too.
    #[arg(long, env = "MCP_TASKS_CONFIG")]
    config: Option<std::path::PathBuf>,
}

/// A process's tools: the set (which may change while upstreams come and go) and the
/// upstream connections behind it, which live as long as this value.
pub(super) struct LoadedTools {
    pub(super) registry: LiveRegistry,
    /// How the queue is shared (the file's scheduling sections; the default without one).
    pub(super) scheduling: Scheduling,
    _upstreams: Option<Upstreams>,
}

impl Tools {
    /// The built-in packs, the `App`'s own tools, and the configuration file's upstreams
    /// (connected, with their first tool lists read or timed out).
    pub(super) async fn load(&self, app: &App) -> anyhow::Result<LoadedTools> {
        let packs = self.tools.as_deref().unwrap_or(&app.default_packs);
        let registry = Registry::from_packs(packs)
            .context("--tools")?
            .extended(app.tools.iter().cloned())
            .context("tools")?;
        let Some(path) = &self.config else {
            return Ok(LoadedTools {
                registry: registry.into(),
                scheduling: Scheduling::default(),
                _upstreams: None,
            });
        };
        let config = Config::load(path).with_context(|| format!("--config {}", path.display()))?;
        let scheduling = config.scheduling.clone();
        let (upstreams, registry) = Upstreams::start(config, registry, UpstreamOptions::default())
            .await
            .with_context(|| format!("--config {}", path.display()))?;
        Ok(LoadedTools {
            registry,
            scheduling,
            _upstreams: Some(upstreams),
        })
    }
}

impl Database {
    pub(super) async fn connect(&self) -> anyhow::Result<Store> {
        connect(self.url.expose(), &self.pool).await
    }

    /// Like [`Self::connect`], with a default pool of at least `connections` (a worker's
    /// handlers each write through it; an explicit size is taken as it is).
    pub(super) async fn connect_at_least(&self, connections: u32) -> anyhow::Result<Store> {
        let mut config = self.pool.config();
        if self.pool.db_max_connections.is_none() {
            config.max_connections = config.max_connections.max(connections);
        }
        Store::connect(self.url.expose(), &config)
            .await
            .context("DATABASE_URL is not a valid PostgreSQL URL")
    }
}

/// Logs, once the database answers, how many connections this process may open beside
/// what the server allows and has in use, and warns when they do not fit: a fleet past
/// `max_connections` fails requests under load with "too many clients" (see the README,
/// *Connection budget*). `long_lived`: the connections held outside the pools (LISTEN,
/// the wake-up duty). Start-up waits for it at most [`BUDGET_WAIT`]: a database that is
/// down is said so by everything after, and a process must start without it.
pub(super) async fn check_connection_budget(store: &Store, long_lived: u32) {
    let b = match tokio::time::timeout(BUDGET_WAIT, store.connection_budget(long_lived)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not read the server's connection limit");
            return;
        }
        Err(_) => {
            tracing::debug!("the server did not say its connection limit in time");
            return;
        }
    };
    if b.synchronous_commit != "on" {
        tracing::warn!(
            synchronous_commit = %b.synchronous_commit,
            "synchronous_commit is not on for this process's pooled connections: a task handle, answer or result acknowledged just before a crash can be lost; set it on in the pooler's connect_query or on the role (README: Behind a pooler)"
        );
    }
    if b.jit != "off" {
        tracing::warn!(
            jit = %b.jit,
            "jit is not off for this process's pooled connections: with a large queue, each claim can spend tens of milliseconds compiling itself; set it off in the pooler's connect_query or on the role (README: Behind a pooler)"
        );
    }
    if b.fits() {
        tracing::info!(
            this_process = b.this_process,
            server_allows = b.server_allows,
            in_use = b.in_use,
            "connection budget: this process opens at most {} connections; the server allows {}, {} in use",
            b.this_process,
            b.server_allows,
            b.in_use
        );
    } else {
        tracing::warn!(
            this_process = b.this_process,
            server_allows = b.server_allows,
            in_use = b.in_use,
            "connection budget: this process may open {} connections but the server has room for {} more ({} allowed, {} in use): under load it will refuse connections; lower --db-max-connections, raise max_connections, or put a pooler in front (README: Connection budget)",
            b.this_process,
            (b.server_allows - b.in_use).max(0),
            b.server_allows,
            b.in_use
        );
    }
}

/// How long start-up waits to read the server's connection limit.
const BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) async fn connect(url: &str, pool: &PoolArgs) -> anyhow::Result<Store> {
    Store::connect(url, &pool.config())
        .await
        .context("DATABASE_URL is not a valid PostgreSQL URL")
}

/// The configured name with this build's version.
pub(super) fn server_info(name: &str) -> Implementation {
    Implementation {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}
