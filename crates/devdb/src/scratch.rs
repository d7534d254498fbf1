//! What only the harnesses use (the `scratch` feature): scratch databases on one server,
//! a cluster that minds itself, an outage, and a streaming standby (a failover).

use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::DevDatabase;

impl DevDatabase {
    /// Like [`DevDatabase::start`], but the cluster also stops and deletes itself when
    /// this process exits without dropping it (as a value kept in a `static` does).
    pub fn start_watched() -> anyhow::Result<Self> {
        Self::start_with(true)
    }

    /// Stops the server (fast shutdown: connections are cut, nothing committed is lost),
    /// as an outage would.
    pub fn stop(&mut self) {
        crate::stop(&mut self.child);
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A streaming standby of this cluster: a base backup of it, then `postgres` in
    /// recovery following it, on a port of its own. `name` is its `cluster_name`, which
    /// its connection to the primary carries, so the primary's
    /// `synchronous_standby_names` can name it. Promote it with `SELECT pg_promote()`.
    pub fn standby(&self, name: &str) -> anyhow::Result<Self> {
        let bin = crate::bindir()?;
        let run_as = crate::run_as_user()?;
        let dir = crate::new_dir(run_as)?;
        let mut backup = Command::new(bin.join("pg_basebackup"));
        backup
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(dir.join("data"))
            // -R: the standby's settings (standby.signal, primary_conninfo).
            .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        crate::as_user(&mut backup, run_as);
        let out = backup.output().context("running pg_basebackup")?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            bail!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Self::launch(dir, false, &[format!("cluster_name={name}")])
    }

    /// Stops the server as a crash would: immediate shutdown (SIGQUIT), no checkpoint, and
    /// nothing more sent to its standbys than they had.
    pub fn crash(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGQUIT);
        }
        crate::stop(&mut self.child);
    }

    /// Starts the server again on the same port and data after [`DevDatabase::stop`].
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        let Some(command) = self.restart.as_mut() else {
            bail!("a watched cluster cannot be restarted");
        };
        self.child = command.spawn().context("starting postgres again")?;
        self.wait_ready(self.port)
    }
}

/// The statement that creates a harness's scratch database `name` (an identifier the caller
/// made). UTF8 with the C locale whatever the server's defaults: a server initialised
/// without a locale (as some stand-ins for the official image are) defaults to
/// SQL_ASCII, where PostgreSQL refuses JSON text with `\u` escapes of non-ASCII
/// characters; template0 is the template that may take another encoding.
pub fn create_database_sql(name: &str) -> String {
    format!("CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'")
}

/// `postgres://host/db?x` with another database name (the path replaced, the query kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| i + scheme_end);
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn rewrites_database_names() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
