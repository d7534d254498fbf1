//! Start-up refusals of the binary: no unauthenticated serving beyond loopback unless
//! told, and no JWT authentication without a resource.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::harness::jwt::SECRET;
use crate::harness::{TestDb, http, procs};

fn binary(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(procs::BIN);
    // Nothing from the test's own environment decides what the binary does.
    cmd.env_clear()
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("MCP_TASKS_LOG", "info,sqlx=warn")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the binary to its exit; returns whether it succeeded and its stderr.
async fn run_to_exit(cmd: &mut tokio::process::Command) -> (bool, String) {
    let output = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("the process did not exit within 30 s")
        .expect("running the binary");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_to_serve_unauthenticated_beyond_loopback_unless_told() {
    let db = TestDb::new().await;
    let serve_all = ["serve", "--listen", "0.0.0.0:0", "--tools", "demo"];

    let (ok, stderr) = run_to_exit(&mut binary(&db.url, &serve_all, &[])).await;
    assert!(!ok, "--auth none on 0.0.0.0 must not start: {stderr}");
    assert!(stderr.contains("without authentication"), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");

    let (ok, stderr) = run_to_exit(&mut binary(
        &db.url,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools",
            "demo",
            "--auth",
            "jwt",
        ],
        &[("MCP_TASKS_JWT_HS256_SECRET", SECRET)],
    ))
    .await;
    assert!(
        !ok,
        "--auth jwt without a resource must not start: {stderr}"
    );
    assert!(stderr.contains("MCP_TASKS_RESOURCE"), "{stderr}");
    assert!(
        !stderr.contains(SECRET),
        "the secret must not be logged: {stderr}"
    );

    // With the explicit opt-out it serves.
    let mut args = serve_all.to_vec();
    args.push("--allow-unauthenticated");
    let mut child = binary(&db.url, &args, &[]).spawn().expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut log = Vec::new();
    let port: u16 = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            log.push(line.clone());
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let authority = rest.split("/mcp").next().expect("address");
                return authority
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse().ok())
                    .expect("a port");
            }
        }
        panic!("the replica exited before listening: {log:#?}");
    })
    .await
    .expect("the replica did not start listening within 30 s");
    let health = http::client()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let pid = child.id().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let exit = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("no exit within 15 s of SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
}
