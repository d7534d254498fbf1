//! The processes under test: replicas and workers started from this executable, killed
//! with SIGKILL and started again. Replicas come back on the port they had, so their
//! URL never changes; workers come back under a new id (`w<index>-<generation>`), so the
//! audit trail tells the generations apart.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_tasks_spawn::{Logs, Process, Spawn, describe};

/// Most ERROR lines kept for the report.
const KEPT_ERRORS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Replica,
    Worker,
}

#[derive(Debug)]
struct Proc {
    role: Role,
    index: usize,
    /// Bumped by every start; the first start is generation 1.
    generation: u32,
    /// Replicas only.
    port: u16,
    child: Option<Process>,
}

impl Proc {
    fn name(&self) -> String {
        match self.role {
            Role::Replica => format!("replica-{}.{}", self.index, self.generation),
            Role::Worker => format!("worker-{}", self.worker_id()),
        }
    }

    fn worker_id(&self) -> String {
        format!("w{}-{}", self.index, self.generation)
    }
}

/// What the processes logged at WARN and ERROR.
#[derive(Debug, Default)]
pub(crate) struct LogStats {
    pub(crate) warn: AtomicU64,
    pub(crate) error: AtomicU64,
    /// The first ERROR lines, with the process name.
    pub(crate) errors: Mutex<Vec<String>>,
}

impl LogStats {
    /// Counts a WARN or ERROR line (and forwards it); the others are dropped.
    fn line(&self, name: &str, line: &str) {
        match mcp_tasks_spawn::level(line) {
            Some("ERROR") => {
                self.error.fetch_add(1, Ordering::Relaxed);
                let mut kept = self.errors.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() < KEPT_ERRORS {
                    kept.push(format!("{name}: {line}"));
                }
            }
            Some("WARN") => {
                self.warn.fetch_add(1, Ordering::Relaxed);
            }
            _ => return,
        }
        eprintln!("{name}: {line}");
    }
}

#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) binary: PathBuf,
    pub(crate) database_url: String,
    /// Behind a pooler: PostgreSQL itself, for LISTEN, the duty and migrations.
    pub(crate) direct_url: Option<String>,
    pub(crate) state_key: String,
    pub(crate) lease_ms: u64,
    pub(crate) poll_ms: u64,
}

#[derive(Debug)]
pub(crate) struct Fleet {
    settings: Settings,
    replicas: Vec<Proc>,
    workers: Vec<Proc>,
    pub(crate) logs: Arc<LogStats>,
}

impl Fleet {
    /// Picks a free loopback port for each replica, up front, and starts everything.
    pub(crate) async fn start(
        settings: Settings,
        replicas: usize,
        workers: usize,
    ) -> anyhow::Result<Self> {
        let mut ports = Vec::with_capacity(replicas);
        {
            // Held together, so no two replicas get the same port.
            let mut held = Vec::with_capacity(replicas);
            for _ in 0..replicas {
                let l = std::net::TcpListener::bind("127.0.0.1:0")
                    .context("picking a port for a replica")?;
                ports.push(l.local_addr()?.port());
                held.push(l);
            }
        }
        let mut fleet = Self {
            settings,
            replicas: ports
                .into_iter()
                .enumerate()
                .map(|(index, port)| Proc {
                    role: Role::Replica,
                    index,
                    generation: 0,
                    port,
                    child: None,
                })
                .collect(),
            workers: (0..workers)
                .map(|index| Proc {
                    role: Role::Worker,
                    index,
                    generation: 0,
                    port: 0,
                    child: None,
                })
                .collect(),
            logs: Arc::new(LogStats::default()),
        };
        fleet.ensure_running().await?;
        Ok(fleet)
    }

    /// The MCP endpoint of every replica, in index order.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|r| format!("http://127.0.0.1:{}/mcp", r.port))
            .collect()
    }

    pub(crate) fn replica_count(&self) -> usize {
        self.replicas.len()
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The lease owner name of worker `index`'s current generation.
    pub(crate) fn worker_id(&self, index: usize) -> String {
        self.workers[index].worker_id()
    }

    pub(crate) async fn kill_replica(&mut self, index: usize) -> String {
        kill(&mut self.replicas[index]).await
    }

    pub(crate) async fn kill_worker(&mut self, index: usize) -> String {
        kill(&mut self.workers[index]).await
    }

    pub(crate) async fn start_replica(&mut self, index: usize) -> anyhow::Result<()> {
        let logs = self.logs.clone();
        start(&self.settings, &logs, &mut self.replicas[index]).await
    }

    pub(crate) async fn start_worker(&mut self, index: usize) -> anyhow::Result<()> {
        let logs = self.logs.clone();
        start(&self.settings, &logs, &mut self.workers[index]).await
    }

    /// Processes that exited although nobody killed them (a crash is a finding), each
    /// with its exit status. They are left stopped; [`Fleet::ensure_running`] restarts
    /// them.
    pub(crate) fn exited_on_their_own(&mut self) -> Vec<String> {
        let mut exited = Vec::new();
        for p in self.replicas.iter_mut().chain(self.workers.iter_mut()) {
            if let Some(child) = p.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        exited.push(format!(
                            "{} exited on its own ({})",
                            p.name(),
                            describe(status)
                        ));
                        p.child = None;
                    }
                    Ok(None) => {}
                    Err(e) => exited.push(format!("{}: cannot check on it: {e}", p.name())),
                }
            }
        }
        exited
    }

    /// Starts every process that is not running.
    pub(crate) async fn ensure_running(&mut self) -> anyhow::Result<()> {
        let logs = self.logs.clone();
        for p in self.replicas.iter_mut().chain(self.workers.iter_mut()) {
            if p.child.is_none() {
                start(&self.settings, &logs, p).await?;
            }
        }
        Ok(())
    }

    /// SIGKILLs everything (the end of the run; dropping the fleet does the same), each
    /// once its log is read to the end.
    pub(crate) async fn kill_all(&mut self) {
        for p in self.replicas.iter_mut().chain(self.workers.iter_mut()) {
            kill(p).await;
        }
    }
}

/// SIGKILL, then reap. Returns the name the process had.
async fn kill(p: &mut Proc) -> String {
    let name = p.name();
    if let Some(mut child) = p.child.take() {
        child.kill().await;
    }
    name
}

/// Starts the next generation of `p`, once it has printed its ready line (a replica:
/// listening; a few tries, in case its port is briefly unavailable).
async fn start(settings: &Settings, logs: &Arc<LogStats>, p: &mut Proc) -> anyhow::Result<()> {
    let mut tries = 0;
    loop {
        tries += 1;
        p.generation += 1;
        match spawn(settings, logs, p).await {
            Ok(child) => {
                p.child = Some(child);
                return Ok(());
            }
            Err(e) if tries < 5 => {
                eprintln!("[chaos] {} did not start ({e:#}); trying again", p.name());
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => return Err(e.context(format!("starting {}", p.name()))),
        }
    }
}

async fn spawn(settings: &Settings, logs: &Arc<LogStats>, p: &Proc) -> anyhow::Result<Process> {
    // A scrubbed environment: nothing of the caller's configures the processes under test.
    let mut command = Spawn::new(&settings.binary);
    let stats = logs.clone();
    command
        .name(p.name())
        .env("DATABASE_URL", &settings.database_url)
        .env("MCP_TASKS_LOG_FORMAT", "text")
        .envs(
            settings
                .direct_url
                .iter()
                .map(|url| ("MCP_TASKS_DIRECT_DATABASE_URL", url.as_str())),
        )
        .logs(Logs::To(Arc::new(move |name, line| stats.line(name, line))))
        .ready_within(Duration::from_secs(30));
    match p.role {
        Role::Replica => {
            let listen = format!("127.0.0.1:{}", p.port);
            command
                .args(["serve", "--listen", &listen, "--tools", "conformance"])
                .env("MCP_TASKS_LOG", "warn,mcp_tasks::cli=info")
                .env("MCP_TASKS_STATE_KEY", &settings.state_key)
                .env("MCP_TASKS_RATE_LIMIT", "0")
                .env("MCP_TASKS_MAX_TASKS_IN_FLIGHT", "1000000")
                // A killed replica must not keep the harness waiting at the end.
                .env("MCP_TASKS_DRAIN_GRACE_MS", "1000");
        }
        Role::Worker => {
            command
                .args(["worker", "--tools", "conformance"])
                .env("MCP_TASKS_LOG", "warn")
                .env("MCP_TASKS_LEASE_MS", settings.lease_ms.to_string())
                .env("MCP_TASKS_POLL_MS", settings.poll_ms.to_string())
                .env("MCP_TASKS_WORKER_ID", p.worker_id());
        }
    }
    let child = command
        .start()
        .await
        .with_context(|| format!("running {}", settings.binary.display()))?;
    if p.role == Role::Replica {
        let expected = format!("127.0.0.1:{}", p.port);
        let addr = child.listen().map(|a| a.to_string()).unwrap_or_default();
        if addr != expected {
            bail!("listens on {addr}, not {expected}");
        }
    }
    Ok(child)
}
