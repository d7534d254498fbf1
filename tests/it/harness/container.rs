//! The test suite's PostgreSQL in a container (testcontainers), used when `DATABASE_URL`
//! is unset and a Docker-compatible engine answers.
//!
//! Two engine differences are handled here rather than left to testcontainers:
//! - Podman's Docker API reports a published port with an empty `HostIp`, which
//!   `get_host_port_ipv4` refuses (`PortNotExposed`). The host port is chosen here and
//!   mapped explicitly, so nothing has to be read back.
//! - testcontainers-rs removes a container when its handle drops, but a handle in a
//!   process-wide static never drops, and it has no reaper (Ryuk). A small watcher process
//!   removes the container through the engine's API once this test process is gone, even
//!   when it was killed.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use testcontainers::ImageExt;
use testcontainers::core::IntoContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers_modules::postgres::Postgres;

/// The image, pinned: the official name, which `../shared/containers/setup` provides
/// locally on this machine type.
pub(crate) const IMAGE: (&str, &str) = ("postgres", "15");

/// The label on every container the suite starts (what cleanup and checks look for).
const LABEL: (&str, &str) = ("dev.mcp-tasks.tests", "postgres");

/// How long a container may take to start before the engine counts as unusable.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A Docker-compatible engine's API socket, when one is configured or present.
pub(crate) fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) => host.strip_prefix("unix://").map(PathBuf::from),
        Err(_) => {
            let default = PathBuf::from("/var/run/docker.sock");
            default.exists().then_some(default)
        }
    }
}

/// Starts PostgreSQL in a container and returns its URL, or why it could not (the engine
/// is absent, stopped or refuses): the caller falls back to a local cluster.
pub(crate) fn start() -> Result<String, String> {
    // A loaded Podman now and then fails one start ("write child: broken pipe", HTTP 500)
    // and succeeds the next; a stopped engine fails every attempt at once.
    let mut last = String::new();
    for attempt in 1..=3 {
        match start_once() {
            Ok(url) => return Ok(url),
            Err(why) => {
                super::announce(&format!(
                    "tests: attempt {attempt} to start a PostgreSQL container failed: {why}"
                ));
                last = why;
                remove_unstarted();
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(last)
}

fn start_once() -> Result<String, String> {
    let socket = engine_socket().ok_or("no Docker-compatible engine socket")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async {
        let port = free_port()?;
        // The module waits for the server's second ready message (the official image
        // restarts it once after initialising), with user, password and database
        // `postgres`.
        let image = Postgres::default()
            // Trust, not SCRAM: in a debug build, SCRAM's key derivation costs a client
            // about 60 ms of CPU per connection (2 ms without it), and every test opens
            // pools of its own; on a loaded machine that alone timed out pool acquires.
            .with_host_auth()
            .with_name(IMAGE.0)
            .with_tag(IMAGE.1)
            .with_mapped_port(port, 5432.tcp())
            .with_label(LABEL.0, LABEL.1)
            // The whole suite shares this one server, with several replicas' and workers'
            // pools per test: the image's default of 100 connections is too few.
            .with_cmd(["postgres", "-c", "max_connections=400", "-c", "fsync=off"]);
        let container =
            match tokio::time::timeout(START_TIMEOUT, image.start()).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("starting {}:{}: {e}", IMAGE.0, IMAGE.1)),
                Err(_) => return Err(format!("{}:{} did not start in time", IMAGE.0, IMAGE.1)),
            };
        let id = container.id().to_owned();
        if let Err(e) = spawn_reaper(&socket, &id) {
            // Without a reaper the container would outlive us: remove it now instead.
            drop(container);
            return Err(format!("cannot start the container reaper: {e}"));
        }
        super::announce(&format!(
            "tests: PostgreSQL from a container ({}:{}, {}, 127.0.0.1:{port}); removed when this test process ends",
            IMAGE.0,
            IMAGE.1,
            &id[..12.min(id.len())]
        ));
        // The reaper owns the container's end from here on: dropping the handle would
        // remove it while tests still run on it.
        std::mem::forget(container);
        Ok(format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres"))
    })
}

/// A start that failed can leave its container created but never started, which
/// testcontainers does not remove; remove ours (by label) so failures leave nothing behind.
fn remove_unstarted() {
    let Some(socket) = engine_socket() else {
        return;
    };
    let script = r#"
        socket="$1"; label="$2"
        for id in $(curl -fsS --unix-socket "$socket" -G "http://engine/containers/json" \
            --data-urlencode "all=true" \
            --data-urlencode "filters={\"label\":[\"$label\"],\"status\":[\"created\"]}" \
            | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
          curl -fsS --unix-socket "$socket" -X DELETE "http://engine/containers/$id?force=true&v=true" >/dev/null
        done
    "#;
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("mcp-tasks-test-cleanup")
        .arg(&socket)
        .arg(LABEL.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn free_port() -> Result<u16, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

/// A detached shell that waits for this process to end, then force-removes the container
/// (and its anonymous volume) through the engine's HTTP API on its Unix socket.
fn spawn_reaper(socket: &std::path::Path, id: &str) -> std::io::Result<()> {
    let script = r#"
        parent="$1"; socket="$2"; id="$3"
        while [ -d "/proc/$parent" ]; do sleep 1; done
        curl -fsS --unix-socket "$socket" -X DELETE "http://engine/containers/$id?force=true&v=true" >/dev/null 2>&1
    "#;
    Command::new("setsid")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("mcp-tasks-test-reaper")
        .arg(std::process::id().to_string())
        .arg(socket)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
}
