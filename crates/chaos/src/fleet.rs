//! The processes under test: replicas and workers started from this executable, killed
//! with SIGKILL and started again. Replicas come back on the port they had, so their
//! URL never changes; workers come back under a new id (`w<index>-<generation>`), so the
//! audit trail tells the generations apart.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

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
    child: Option<Child>,
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
    /// The tasks reading each process's stderr: each ends when its process does, and
    /// [`Fleet::kill_all`] waits for them.
    readers: TaskTracker,
}

#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) binary: PathBuf,
    pub(crate) database_url: String,
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

    /// SIGKILLs everything (the end of the run; dropping the fleet does the same).
    pub(crate) async fn kill_all(&mut self) {
        for p in self.replicas.iter_mut().chain(self.workers.iter_mut()) {
            kill(p).await;
        }
        // Their stderr is closed now; a reader still going is only finishing its buffer.
        self.logs.readers.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.logs.readers.wait()).await;
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

/// SIGKILL, then reap. Returns the name the process had.
async fn kill(p: &mut Proc) -> String {
    let name = p.name();
    if let Some(mut child) = p.child.take() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    name
}

/// Starts the next generation of `p`; a replica is started only once it logs that it
/// listens (a few tries, in case its port is briefly unavailable).
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

async fn spawn(settings: &Settings, logs: &Arc<LogStats>, p: &Proc) -> anyhow::Result<Child> {
    let mut command = Command::new(&settings.binary);
    // Nothing from the caller's environment configures the processes under test.
    for (name, _) in std::env::vars_os() {
        if let Some(name) = name.to_str()
            && (name.starts_with("MCP_TASKS_") || name == "DATABASE_URL")
        {
            command.env_remove(name);
        }
    }
    command
        .env("DATABASE_URL", &settings.database_url)
        .env("MCP_TASKS_LOG_FORMAT", "text")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
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
    let mut child = command
        .spawn()
        .with_context(|| format!("running {}", settings.binary.display()))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let (tx, rx) = oneshot::channel();
    let listening = (p.role == Role::Replica).then_some(tx);
    logs.readers
        .spawn(forward_logs(p.name(), stderr, logs.clone(), listening));
    if p.role == Role::Replica {
        let addr = match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_)) => {
                let status = child.wait().await.map(describe).unwrap_or_default();
                bail!("exited before it listened ({status})")
            }
            Err(_) => bail!("did not log \"listening on\" within 30 s"),
        };
        let expected = format!("127.0.0.1:{}", p.port);
        if addr != expected {
            bail!("listens on {addr}, not {expected}");
        }
    }
    Ok(child)
}

/// Drains a process's stderr until it closes, so its pipe never fills: hands the
/// replica's address over once it is logged, and forwards WARN and ERROR lines.
async fn forward_logs(
    name: String,
    stderr: ChildStderr,
    logs: Arc<LogStats>,
    mut listening: Option<oneshot::Sender<String>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if listening.is_some()
            && let Some(addr) = line
                .split("listening on http://")
                .nth(1)
                .and_then(|rest| rest.split("/mcp").next())
            && let Some(tx) = listening.take()
        {
            let _ = tx.send(addr.to_owned());
            continue;
        }
        // Text format: `<timestamp> <LEVEL> <target>: <message>`.
        let level = line.split_whitespace().nth(1).unwrap_or_default();
        if level == "ERROR" {
            logs.error.fetch_add(1, Ordering::Relaxed);
            let mut kept = logs.errors.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() < KEPT_ERRORS {
                kept.push(format!("{name}: {line}"));
            }
        } else if level == "WARN" {
            logs.warn.fetch_add(1, Ordering::Relaxed);
        } else {
            continue;
        }
        eprintln!("{name}: {line}");
    }
}
