//! The local state file: the unfinished tasks this client started, so that `tasks resume`
//! can follow them after the client was closed or killed.
//!
//! Every change is a read-modify-write under an exclusive `flock` on a lock file beside
//! it (two clients starting tasks at once never drop each other's entries), written to a
//! temporary file, synced and renamed over the old one (a crash leaves the old file or the
//! new one, never half of either). The file is owner-only: task ids are capabilities.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Entry {
    /// The MCP endpoint the task lives on: a resume follows only the current server's.
    pub(super) url: String,
    pub(super) task_id: String,
    pub(super) tool: String,
    /// RFC 3339, as the server stamped the task's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) created_at: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    #[serde(default)]
    tasks: Vec<Entry>,
}

#[derive(Debug, Clone)]
pub(super) struct State {
    path: PathBuf,
}

impl State {
    pub(super) fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// `$XDG_STATE_HOME/mcp-tasks/tasks.json`, else `~/.local/state/mcp-tasks/tasks.json`.
    pub(super) fn default_path() -> Option<PathBuf> {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))?;
        Some(state.join("mcp-tasks").join("tasks.json"))
    }

    /// The unfinished tasks started against `url`, oldest first.
    pub(super) fn tasks(&self, url: &str) -> anyhow::Result<Vec<Entry>> {
        Ok(self.all()?.into_iter().filter(|e| e.url == url).collect())
    }

    /// Every unfinished task, whatever its server, oldest first.
    pub(super) fn all(&self) -> anyhow::Result<Vec<Entry>> {
        let _lock = self.lock()?;
        Ok(self.read()?.tasks)
    }

    pub(super) fn add(&self, entry: Entry) -> anyhow::Result<()> {
        self.change(|file| {
            if !file
                .tasks
                .iter()
                .any(|e| e.url == entry.url && e.task_id == entry.task_id)
            {
                file.tasks.push(entry);
            }
        })
    }

    /// Forgets a task (it finished, or the server no longer knows it); a task that was
    /// never recorded is no error.
    pub(super) fn remove(&self, url: &str, task_id: &str) -> anyhow::Result<()> {
        self.change(|file| {
            file.tasks
                .retain(|e| !(e.url == url && e.task_id == task_id))
        })
    }

    fn change(&self, f: impl FnOnce(&mut StateFile)) -> anyhow::Result<()> {
        let _lock = self.lock()?;
        let mut file = self.read()?;
        let before = file.tasks.len();
        let existed = self.path.exists();
        f(&mut file);
        if existed || file.tasks.len() != before {
            self.write_atomically(&file)?;
        }
        Ok(())
    }

    fn lock(&self) -> anyhow::Result<Flock<File>> {
        self.create_dir()?;
        let mut name = self.path.clone().into_os_string();
        name.push(".lock");
        let file = owner_only()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&name)
            .with_context(|| format!("cannot open the lock file {}", Path::new(&name).display()))?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", Path::new(&name).display()))
    }

    fn create_dir(&self) -> anyhow::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the folder {}", dir.display()))?;
        }
        Ok(())
    }

    fn read(&self) -> anyhow::Result<StateFile> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) if text.trim().is_empty() => Ok(StateFile::default()),
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a task state file (move it away to start afresh)",
                    self.path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StateFile::default()),
            Err(e) => bail!("cannot read {}: {e}", self.path.display()),
        }
    }

    fn write_atomically(&self, file: &StateFile) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(file)?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let result = (|| {
            let mut out = owner_only()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            out.write_all(text.as_bytes())?;
            out.write_all(b"\n")?;
            out.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            // The rename is durable only once the folder's entry is.
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)?.sync_all()?;
            }
            Ok::<_, std::io::Error>(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            bail!("cannot write {}: {e}", self.path.display());
        }
        Ok(())
    }
}

fn owner_only() -> OpenOptions {
    let mut options = OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(url: &str, id: &str) -> Entry {
        Entry {
            url: url.into(),
            task_id: id.into(),
            tool: "slow_compute".into(),
            created_at: None,
        }
    }

    #[test]
    fn entries_are_kept_per_server_and_removed_once() {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-state-{}", std::process::id()));
        let path = dir.join("nested").join("tasks.json");
        let state = State::new(path.clone());
        state.add(entry("http://a/mcp", "1")).expect("add");
        state.add(entry("http://a/mcp", "1")).expect("add again");
        state.add(entry("http://b/mcp", "2")).expect("add");
        state.add(entry("http://a/mcp", "3")).expect("add");
        let ids = |url| {
            state
                .tasks(url)
                .expect("read")
                .into_iter()
                .map(|e| e.task_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("http://a/mcp"), ["1", "3"]);
        assert_eq!(ids("http://b/mcp"), ["2"]);
        state.remove("http://a/mcp", "1").expect("remove");
        state.remove("http://a/mcp", "404").expect("remove unknown");
        assert_eq!(ids("http://a/mcp"), ["3"]);
        let mode = std::fs::metadata(&path).expect("stat").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        std::fs::write(&path, "not json").expect("write");
        assert!(state.tasks("http://a/mcp").is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn concurrent_clients_keep_each_others_entries() {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-state-c-{}", std::process::id()));
        let path = dir.join("tasks.json");
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let state = State::new(path.clone());
                std::thread::spawn(move || {
                    for i in 0..15 {
                        state
                            .add(entry("http://a/mcp", &format!("{t}-{i}")))
                            .expect("add");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let state = State::new(path);
        assert_eq!(state.tasks("http://a/mcp").expect("read").len(), 90);
        let _ = std::fs::remove_dir_all(dir);
    }
}
