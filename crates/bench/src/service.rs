//! The service under test: a replica (and, for the scenarios that run tasks, a worker) as
//! real `mcp-tasks` processes on loopback, with the conformance tools and the rate and
//! in-flight limits lifted, as a new user would try it; or a service already running at a
//! given URL.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use mcp_tasks_spawn::{Logs, Process, Spawn};
use sqlx::PgPool;

/// A child process of the benchmark (a replica or a worker), killed when dropped.
pub(crate) struct Child(Process);

impl Child {
    /// Starts `mcp-tasks <args>` with `env`, and returns once it has printed its ready
    /// line; its WARN and ERROR lines are shown.
    async fn start(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let process = Spawn::new(binary)
            .name(args.first().copied().unwrap_or("child"))
            .args(args)
            .env("MCP_TASKS_LOG", "warn,mcp_tasks::cli=info")
            .env("MCP_TASKS_LOG_FORMAT", "text")
            .envs(env.iter().copied())
            .logs(Logs::Problems)
            .ready_within(Duration::from_secs(60))
            .start()
            .await?;
        Ok(Self(process))
    }

    /// A replica on `database_url` with `env`; with its `http://…/mcp` URL.
    async fn replica(
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<(Self, String)> {
        let replica = Self::start(binary, args, env).await?;
        let url = replica
            .0
            .url()
            .context("the replica's ready line has no URL")?;
        Ok((replica, url))
    }

    /// A replica with the web console on, on `database_url`; with its `http://…/mcp` URL.
    pub(crate) async fn start_console_replica(
        binary: &Path,
        database_url: &str,
    ) -> anyhow::Result<(Self, String)> {
        Self::replica(
            binary,
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tools",
                "conformance",
                "--console",
            ],
            &[
                ("DATABASE_URL", database_url),
                ("MCP_TASKS_RATE_LIMIT", "0"),
            ],
        )
        .await
    }

    pub(crate) async fn stop(mut self) {
        self.0.kill().await;
    }

    /// CPU time (user + system) this process has used.
    pub(crate) fn cpu(&self) -> Option<Duration> {
        self.0.cpu()
    }
}

/// The service: where to send requests, and the processes behind it when we started them.
pub(crate) struct Service {
    pub(crate) url: String,
    replica: std::sync::Mutex<Option<Child>>,
    worker: std::sync::Mutex<Option<Child>>,
    binary: PathBuf,
    database_url: String,
}

impl Service {
    /// Starts a replica on `database_url`, or uses the one at `url`.
    pub(crate) async fn start(
        binary: &Path,
        database_url: &str,
        url: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut service = Self {
            url: url.unwrap_or_default().to_owned(),
            replica: std::sync::Mutex::new(None),
            worker: std::sync::Mutex::new(None),
            binary: binary.to_owned(),
            database_url: database_url.to_owned(),
        };
        if url.is_none() {
            let (replica, url) = Child::replica(
                binary,
                &["serve", "--listen", "127.0.0.1:0", "--tools", "conformance"],
                &[
                    ("DATABASE_URL", database_url),
                    ("MCP_TASKS_RATE_LIMIT", "0"),
                    ("MCP_TASKS_MAX_TASKS_IN_FLIGHT", "0"),
                ],
            )
            .await?;
            service.url = url;
            service.replica = std::sync::Mutex::new(Some(replica));
        }
        Ok(service)
    }

    /// Another replica on the same database, with a per-principal in-flight limit, so
    /// that every create runs the limit's check; `None` when the service was given by URL.
    pub(crate) async fn start_limited_replica(
        &self,
        limit: u64,
    ) -> anyhow::Result<Option<(Child, String)>> {
        let limit = limit.to_string();
        self.start_replica_with(&[
            ("DATABASE_URL", &self.database_url),
            ("MCP_TASKS_MAX_TASKS_IN_FLIGHT", &limit),
        ])
        .await
    }

    /// Another replica with these variables (`DATABASE_URL` among them), limits lifted
    /// as on the others; `None` when the service was given by URL.
    pub(crate) async fn start_replica_with(
        &self,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Option<(Child, String)>> {
        if !self.started_here() {
            return Ok(None);
        }
        let mut vars = vec![("MCP_TASKS_RATE_LIMIT", "0")];
        vars.extend_from_slice(env);
        let replica = Child::replica(
            &self.binary,
            &["serve", "--listen", "127.0.0.1:0", "--tools", "conformance"],
            &vars,
        )
        .await?;
        Ok(Some(replica))
    }

    /// Starts a worker running `concurrency` tasks at once (nothing when the service was
    /// given by URL: its workers are its own), and waits for its LISTEN connection.
    pub(crate) async fn start_worker(
        &self,
        concurrency: usize,
        sql: &PgPool,
    ) -> anyhow::Result<()> {
        if !self.started_here() || self.lock_worker().is_some() {
            return Ok(());
        }
        let listeners = || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(mcp_tasks_store::LISTENER_APPLICATION_NAME)
            .fetch_one(sql)
            .await
        };
        let before = listeners().await?;
        let concurrency = concurrency.to_string();
        let worker = Child::start(
            &self.binary,
            &["worker", "--tools", "conformance"],
            &[
                ("DATABASE_URL", &self.database_url),
                ("MCP_TASKS_CONCURRENCY", &concurrency),
            ],
        )
        .await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if listeners().await? > before {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the worker did not connect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        *self.lock_worker() = Some(worker);
        Ok(())
    }

    /// Whether this benchmark started the service (rather than being given its URL).
    pub(crate) fn started_here(&self) -> bool {
        self.replica
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The replica's CPU time so far.
    pub(crate) fn replica_cpu(&self) -> Option<Duration> {
        self.replica
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(Child::cpu)
    }

    /// Stops the replica (and so closes its connections, whose backends then report
    /// their counters).
    pub(crate) async fn stop_replica(&self) {
        let replica = self
            .replica
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(replica) = replica {
            replica.stop().await;
        }
    }

    fn lock_worker(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.worker.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) async fn stop_worker(&self) {
        let worker = self.lock_worker().take();
        if let Some(worker) = worker {
            worker.stop().await;
        }
    }

    pub(crate) async fn stop(self) {
        self.stop_worker().await;
        self.stop_replica().await;
    }
}
