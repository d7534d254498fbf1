//! A PgBouncer in transaction mode in front of a throwaway cluster (the `scratch`
//! feature): what a fleet behind a pooler connects through, for the tests and the chaos
//! harness. Needs PgBouncer 1.21 or later, the first that carries prepared statements in
//! transaction mode (`tests/pooler/setup` builds one where the system's is older);
//! stopped and deleted when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::DevDatabase;

/// A running PgBouncer; stopped (and its directory deleted) when dropped.
#[derive(Debug)]
pub struct DevPooler {
    dir: PathBuf,
    child: Child,
    url: String,
}

impl DevPooler {
    /// The `postgres://` URL of the cluster's `postgres` database through the pooler.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether `pgbouncer` can be found (in PATH or where Debian puts it).
    pub fn can_start() -> anyhow::Result<()> {
        program().map(drop)
    }
}

impl Drop for DevPooler {
    fn drop(&mut self) {
        crate::stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first PgBouncer that can carry prepared statements: `MCP_TASKS_PGBOUNCER`, the one
/// `tests/pooler/setup` builds (`~/.cache/mcp-tasks-pgbouncer`), then PATH and
/// Debian's place.
fn program() -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let candidates = std::env::var_os("MCP_TASKS_PGBOUNCER")
        .map(PathBuf::from)
        .into_iter()
        .chain(cache.map(|c| c.join("mcp-tasks-pgbouncer/bin/pgbouncer")))
        .chain(
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
                .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
                .map(|dir| dir.join("pgbouncer")),
        );
    let mut too_old = Vec::new();
    for program in candidates.filter(|p| p.is_file()) {
        match version(&program) {
            Some(v) if v >= (1, 21) => return Ok(program),
            v => too_old.push(format!("{} ({v:?})", program.display())),
        }
    }
    if too_old.is_empty() {
        bail!("no pgbouncer found; tests/pooler/setup installs one");
    }
    bail!(
        "no PgBouncer 1.21 or later (the first to carry prepared statements in transaction mode) found, only {}; tests/pooler/setup builds one",
        too_old.join(", ")
    )
}

/// `PgBouncer 1.24.1` → (1, 24).
fn version(program: &std::path::Path) -> Option<(u32, u32)> {
    let out = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split_whitespace().nth(1)?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

impl DevDatabase {
    /// PgBouncer in transaction mode in front of this cluster's `postgres` database (see
    /// [`DevPooler::start`]).
    pub fn pooler(&self) -> anyhow::Result<DevPooler> {
        DevPooler::start("127.0.0.1", self.port(), "postgres", "postgres")
    }
}

impl DevPooler {
    /// PgBouncer in transaction mode in front of `database` on `host:port`, for `user`
    /// (trusted: the pooler asks no password, and must reach the server without one), as
    /// a fleet behind a pooler runs: prepared statements carried across server
    /// connections (`max_prepared_statements`), server connections made with
    /// `synchronous_commit = on` (its `connect_query`, since a pooler cannot carry a
    /// client's startup settings).
    pub fn start(host: &str, port: u16, database: &str, user: &str) -> anyhow::Result<Self> {
        let upstream = port;
        let upstream_host = host;
        let program = program()?;
        let run_as = crate::run_as_user()?;
        let dir = crate::new_dir(run_as)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let users = dir.join("users.txt");
        std::fs::write(&users, format!("\"{user}\" \"\"\n"))?;
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]
{database} = host={upstream_host} port={upstream} dbname={database} connect_query='SET synchronous_commit = on; SET jit = off'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {users}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
max_prepared_statements = 200
logfile = {log}
pidfile = {pid}
",
                users = users.display(),
                log = dir.join("pgbouncer.log").display(),
                pid = dir.join("pgbouncer.pid").display(),
            ),
        )?;
        if let Some((uid, gid)) = run_as {
            for file in [&users, &ini] {
                nix::unistd::chown(file, Some(uid.into()), Some(gid.into()))?;
            }
        }
        // A copy the user it runs as can reach (a build under root's home is not).
        let copy = dir.join("pgbouncer");
        std::fs::copy(&program, &copy).with_context(|| format!("copying {}", program.display()))?;
        let mut command = Command::new(&copy);
        command
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        crate::as_user(&mut command, run_as);
        let child = command.spawn().context("starting pgbouncer")?;
        let pooler = DevPooler {
            dir,
            child,
            url: format!("postgres://{user}@127.0.0.1:{port}/{database}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() >= deadline {
                let log =
                    std::fs::read_to_string(pooler.dir.join("pgbouncer.log")).unwrap_or_default();
                bail!("pgbouncer did not listen within 10 s: {}", log.trim());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(pooler)
    }
}
