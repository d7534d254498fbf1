//! A running child: what its ready line said, how to end it, what it costs.

use std::net::SocketAddr;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::task::JoinSet;

use crate::Ready;

/// A started process; killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
    pid: u32,
    name: String,
    ready: Option<Ready>,
    /// The tasks reading its output; each ends when the process's pipe closes.
    readers: JoinSet<()>,
}

impl Process {
    pub(crate) fn new(
        child: Child,
        pid: u32,
        name: String,
        ready: Option<Ready>,
        readers: JoinSet<()>,
    ) -> Self {
        Self {
            child,
            pid,
            name,
            ready,
            readers,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its ready line, when [`crate::Spawn::ready_within`] waited for one.
    pub fn ready(&self) -> Option<&Ready> {
        self.ready.as_ref()
    }

    /// Where it listens, from its ready line.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.ready.as_ref()?.listen
    }

    /// Its MCP endpoint, from its ready line.
    pub fn url(&self) -> Option<String> {
        let ready = self.ready.as_ref()?;
        ready
            .url
            .clone()
            .or_else(|| ready.listen.map(|a| format!("http://{a}/mcp")))
    }

    /// Whether it has exited (without waiting).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// SIGKILL, as a crash: no chance to clean up. Returns once it is reaped and its log
    /// read to the end (a few seconds at most: a child of its own may hold the pipe).
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        crate::drain(&mut self.readers).await;
    }

    /// SIGTERM, as an operator stops it; its exit status if it exits within `within`.
    pub async fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .ok()?
            .ok()?;
        crate::drain(&mut self.readers).await;
        Some(status)
    }

    /// CPU time (user + system) it has used so far, from `/proc`.
    pub fn cpu(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // USER_HZ is 100 on every Linux this runs on.
        Some(Duration::from_millis(ticks * 10))
    }

    /// Resident memory in bytes, from `/proc`.
    pub fn rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())?;
        Some(kib * 1024)
    }
}
