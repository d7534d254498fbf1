//! A private, throwaway PostgreSQL cluster for `mcp-tasks dev` (and for the tests when no
//! `DATABASE_URL` is set): initdb into a temporary directory, start `postgres` on a free
//! loopback port, delete everything on drop. Needs the PostgreSQL server binaries.
//!
//! With the `scratch` feature, what only the harnesses use (the tests, the benchmarks and
//! the chaos harness, none of which ships in the serving binary): scratch databases on one
//! server ([`with_database`], [`create_database_sql`]), a cluster that minds itself
//! (`DevDatabase::start_watched`), and an outage (`DevDatabase::stop`, `start_again`).

#[cfg(feature = "scratch")]
mod pooler;
#[cfg(feature = "scratch")]
mod scratch;

#[cfg(feature = "scratch")]
pub use pooler::DevPooler;
#[cfg(feature = "scratch")]
pub use scratch::{create_database_sql, with_database};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running throwaway cluster; stopped and deleted when dropped.
#[derive(Debug)]
pub struct DevDatabase {
    dir: PathBuf,
    child: Child,
    url: String,
    version: String,
    /// The port and how to start the server again on it (not for watched clusters).
    #[cfg(feature = "scratch")]
    port: u16,
    #[cfg(feature = "scratch")]
    restart: Option<Command>,
}

impl DevDatabase {
    /// The `postgres://` URL of the cluster's `postgres` database.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Finds the server binaries, creates and starts a cluster, and waits until it
    /// accepts connections.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(false)
    }

    /// Whether [`DevDatabase::start`] can work on this machine: the server binaries are
    /// there and, as root, a `postgres` user to run them as. The error says what is not.
    pub fn can_start() -> anyhow::Result<()> {
        bindir()?;
        run_as_user()?;
        Ok(())
    }

    pub(crate) fn start_with(watch_parent: bool) -> anyhow::Result<Self> {
        let bin = bindir()?;
        let run_as = run_as_user()?;
        let dir = new_dir(run_as)?;
        let data = dir.join("data");

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_user(&mut initdb, run_as);
        let out = initdb.output().context("running initdb")?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Self::launch(dir, watch_parent, &[])
    }

    /// Starts `postgres` on the cluster in `dir`/data, on a free port, with `settings`
    /// (`name=value`) beside the throwaway ones, and waits until it accepts connections.
    pub(crate) fn launch(
        dir: PathBuf,
        watch_parent: bool,
        settings: &[String],
    ) -> anyhow::Result<Self> {
        let bin = bindir()?;
        let run_as = run_as_user()?;
        let data = dir.join("data");
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut postgres_args: Vec<String> = [
            "-D",
            &data.display().to_string(),
            "-c",
            "listen_addresses=127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            &format!("unix_socket_directories={}", dir.display()),
            // A throwaway cluster needs no crash safety, and runs much faster without.
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        for setting in settings {
            postgres_args.extend(["-c".to_owned(), setting.clone()]);
        }
        let mut postgres = if watch_parent {
            // A shell minds the cluster: when this process is gone, it stops postgres
            // and deletes the directory. /proc is checked rather than `kill -0`, which
            // fails across users.
            let script = r#"
                pg="$1"; dir="$2"; parent="$3"; shift 3
                "$pg" "$@" & child=$!
                stop() { kill -INT "$child" 2>/dev/null; wait "$child"; rm -rf "$dir"; exit 0; }
                trap stop TERM INT
                while [ -d "/proc/$parent" ] && kill -0 "$child" 2>/dev/null; do sleep 1; done
                stop
            "#;
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(script)
                .arg("mcp-tasks-pg")
                .arg(bin.join("postgres"))
                .arg(&dir)
                .arg(std::process::id().to_string())
                .args(&postgres_args);
            sh
        } else {
            let mut pg = Command::new(bin.join("postgres"));
            pg.args(&postgres_args);
            pg
        };
        postgres.stdout(Stdio::null()).stderr(Stdio::null());
        as_user(&mut postgres, run_as);
        let child = postgres.spawn().context("starting postgres")?;
        #[cfg(feature = "scratch")]
        let restart = (!watch_parent).then(|| {
            let mut again = Command::new(bin.join("postgres"));
            again
                .args(&postgres_args)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            as_user(&mut again, run_as);
            again
        });
        let version = std::fs::read_to_string(data.join("PG_VERSION"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default();
        let db = Self {
            dir,
            child,
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            version,
            #[cfg(feature = "scratch")]
            port,
            #[cfg(feature = "scratch")]
            restart,
        };
        db.wait_ready(port)?;
        Ok(db)
    }

    fn wait_ready(&self, port: u16) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                // The port opens slightly before the server accepts logins; the
                // connection pools retry, so this is close enough.
                std::thread::sleep(Duration::from_millis(200));
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the throwaway PostgreSQL did not start within 30 s")
    }
}

impl Drop for DevDatabase {
    fn drop(&mut self) {
        stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGINT is PostgreSQL's "fast shutdown" (and stops the minding shell too).
pub(crate) fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A new directory for a cluster, owned by the user that runs it.
pub(crate) fn new_dir(run_as: Option<(u32, u32)>) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "mcp-tasks-pg-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some((uid, gid)) = run_as {
        nix::unistd::chown(&dir, Some(uid.into()), Some(gid.into()))
            .with_context(|| format!("handing {} to the postgres user", dir.display()))?;
    }
    Ok(dir)
}

pub(crate) fn bindir() -> anyhow::Result<PathBuf> {
    find_bindir().context(
        "no PostgreSQL server binaries found (looked in PATH, `pg_config --bindir` and /usr/lib/postgresql/*/bin); install PostgreSQL or set DATABASE_URL",
    )
}

fn find_bindir() -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_server(d))
    {
        // Where the links in PATH lead (as Debian's do): the other server programs
        // (pg_basebackup) are there.
        return Some(
            std::fs::canonicalize(dir.join("postgres"))
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .filter(|d| has_server(d))
                .unwrap_or(dir),
        );
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_server(&dir) {
            return Some(dir);
        }
    }
    // Debian and Ubuntu keep server binaries out of PATH; take the newest version.
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_server(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// PostgreSQL refuses to run as root; when we are root, run it as the `postgres` user.
pub(crate) fn run_as_user() -> anyhow::Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name("postgres")?.context(
        "PostgreSQL cannot run as root and there is no `postgres` user to run it as; run as another user or set DATABASE_URL",
    )?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

pub(crate) fn as_user(command: &mut Command, user: Option<(u32, u32)>) {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
}
