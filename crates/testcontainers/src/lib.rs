//! mcp-tasks as a test dependency: [`McpTasks::start`] runs PostgreSQL, one replica
//! (which applies the migrations) and one worker from the mcp-tasks image on a private
//! container network, and hands back the MCP endpoint. Dropping the [`Stack`] removes the
//! containers.
//!
//! ```no_run
//! # async fn example() -> Result<(), mcp_tasks_testcontainers::Error> {
//! let stack = mcp_tasks_testcontainers::McpTasks::default()
//!     .with_tools("conformance")
//!     .start()
//!     .await?;
//! let url = stack.url(); // http://127.0.0.1:PORT/mcp
//! # Ok(()) }
//! ```
//!
//! Works on Docker and on Podman's Docker API: the host ports are chosen here and mapped
//! explicitly, because Podman reports published ports in a shape testcontainers cannot read
//! back.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use testcontainers_modules::postgres::Postgres;

/// Why a stack did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the {what} container: {source}")]
    Start {
        what: &'static str,
        #[source]
        source: testcontainers::TestcontainersError,
    },
    #[error("no free host port: {0}")]
    Port(#[source] std::io::Error),
    #[error("the replica was not ready within {0:?} (its /readyz never answered 200)")]
    NotReady(Duration),
}

/// What to start. The defaults: the image `mcp-tasks:latest` (build it with
/// `docker build -t mcp-tasks .`), the `demo` tool pack, PostgreSQL `postgres:17`.
#[derive(Debug, Clone)]
pub struct McpTasks {
    image: (String, String),
    postgres: (String, String),
    tools: String,
    config: Option<PathBuf>,
    env: Vec<(String, String)>,
    ready_within: Duration,
}

impl Default for McpTasks {
    fn default() -> Self {
        Self {
            image: ("mcp-tasks".into(), "latest".into()),
            postgres: ("postgres".into(), "17".into()),
            tools: "demo".into(),
            config: None,
            env: Vec::new(),
            ready_within: Duration::from_secs(60),
        }
    }
}

impl McpTasks {
    /// The mcp-tasks image to run.
    #[must_use]
    pub fn with_image(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        self.image = (name.into(), tag.into());
        self
    }

    /// The PostgreSQL image (the official one, or one laid out like it).
    #[must_use]
    pub fn with_postgres_image(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        self.postgres = (name.into(), tag.into());
        self
    }

    /// Tool packs, comma-separated (`MCP_TASKS_TOOLS`).
    #[must_use]
    pub fn with_tools(mut self, packs: impl Into<String>) -> Self {
        self.tools = packs.into();
        self
    }

    /// A configuration file copied into the replica and the worker (`MCP_TASKS_CONFIG`).
    #[must_use]
    pub fn with_config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// Any other setting of the replica and the worker (`MCP_TASKS_*`).
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts PostgreSQL, then the replica (migrating), then the worker; returns once the
    /// replica's `/readyz` answers 200.
    pub async fn start(self) -> Result<Stack, Error> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let network = format!("mcp-tasks-tc-{}", &id[..12]);
        let pg_name = format!("{network}-postgres");
        let postgres = Postgres::default()
            .with_name(&self.postgres.0)
            .with_tag(&self.postgres.1)
            .with_network(&network)
            .with_container_name(&pg_name)
            .start()
            .await
            .map_err(|source| Error::Start {
                what: "PostgreSQL",
                source,
            })?;
        let database_url = format!("postgres://postgres:postgres@{pg_name}:5432/postgres");

        let port = free_port()?;
        let mut server = self
            .app(&network, &database_url, "serve")
            .with_env_var("MCP_TASKS_MIGRATE", "true")
            .with_env_var("MCP_TASKS_ALLOW_UNAUTHENTICATED", "true");
        // Unauthenticated beyond loopback (inside its container), the replica must be
        // told which Host names to accept: the ones the mapped port is reached by.
        if !self
            .env
            .iter()
            .any(|(name, _)| name == "MCP_TASKS_ALLOWED_HOSTS")
        {
            server = server.with_env_var("MCP_TASKS_ALLOWED_HOSTS", "localhost,127.0.0.1");
        }
        let server = server
            .with_mapped_port(port, 8080.tcp())
            .start()
            .await
            .map_err(|source| Error::Start {
                what: "mcp-tasks replica",
                source,
            })?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        wait_ready(
            &format!("http://127.0.0.1:{port}/readyz"),
            self.ready_within,
        )
        .await?;

        let worker = self
            .app(&network, &database_url, "worker")
            .start()
            .await
            .map_err(|source| Error::Start {
                what: "mcp-tasks worker",
                source,
            })?;
        Ok(Stack {
            url,
            network,
            _worker: worker,
            _server: server,
            _postgres: postgres,
        })
    }

    fn app(
        &self,
        network: &str,
        database_url: &str,
        command: &str,
    ) -> testcontainers::ContainerRequest<GenericImage> {
        let mut request = GenericImage::new(&self.image.0, &self.image.1)
            .with_wait_for(WaitFor::Nothing)
            .with_cmd([command])
            .with_network(network)
            .with_env_var("DATABASE_URL", database_url)
            .with_env_var("MCP_TASKS_TOOLS", &self.tools);
        if let Some(config) = &self.config {
            request = request
                .with_copy_to("/etc/mcp-tasks/config.toml", config.clone())
                .with_env_var("MCP_TASKS_CONFIG", "/etc/mcp-tasks/config.toml");
        }
        for (name, value) in &self.env {
            request = request.with_env_var(name, value);
        }
        request
    }
}

/// A running stack; dropping it removes its containers.
#[derive(Debug)]
pub struct Stack {
    url: String,
    network: String,
    // Dropped in field order: the worker and the replica before their database.
    _worker: ContainerAsync<GenericImage>,
    _server: ContainerAsync<GenericImage>,
    _postgres: ContainerAsync<Postgres>,
}

impl Stack {
    /// The replica's MCP endpoint on the host: `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The container network the stack runs on (for more containers of the test's own).
    pub fn network(&self) -> &str {
        &self.network
    }
}

fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::Port)?;
    listener.local_addr().map(|a| a.port()).map_err(Error::Port)
}

async fn wait_ready(url: &str, within: Duration) -> Result<(), Error> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let ok = client
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK);
        if ok {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(Error::NotReady(within))
}
