//! Start-up refusals of the binary: no unauthenticated serving beyond loopback unless
//! told, and then only with the hosts clients use named (DNS rebinding); no JWT
//! authentication without a resource.

use std::time::Duration;

use crate::harness::TestDb;
use crate::harness::http::{self, Request};
use crate::harness::jwt::SECRET;
use crate::harness::procs::{self, Proc};

/// Runs `mcp-tasks args…` to its exit; returns whether it succeeded and its stderr.
async fn run_to_exit(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = procs::mcp_tasks(
        args,
        &[
            ("DATABASE_URL", database_url),
            ("MCP_TASKS_LOG", "info,sqlx=warn"),
        ],
    );
    cmd.envs(env.iter().copied());
    let output = procs::output(cmd, Duration::from_secs(30)).await;
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_to_serve_unauthenticated_beyond_loopback_unless_told() {
    let db = TestDb::new().await;
    let serve_all = ["serve", "--listen", "0.0.0.0:0", "--tools", "demo"];

    let (ok, stderr) = run_to_exit(&db.url, &serve_all, &[]).await;
    assert!(!ok, "--auth none on 0.0.0.0 must not start: {stderr}");
    assert!(stderr.contains("without authentication"), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");

    let (ok, stderr) = run_to_exit(
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
    )
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

    // With the explicit opt-out and the hosts named it serves.
    let mut args = serve_all.to_vec();
    args.push("--allow-unauthenticated");
    let replica =
        Proc::serve_args(&db.url, &args, &[("MCP_TASKS_ALLOWED_HOSTS", "127.0.0.1")]).await;
    let port = replica.addr.expect("listening").port();
    let health = Request::get()
        .send(&http::client(), &format!("http://127.0.0.1:{port}/healthz"))
        .await;
    assert_eq!(health.status, 200);
    assert!(
        replica.terminate(Duration::from_secs(15)).await,
        "no clean exit within 15 s of SIGTERM"
    );
}

/// A `tools/list` to `url` naming `host` in its Host header: its HTTP status.
async fn list_with_host(url: &str, host: &str) -> u16 {
    Request::rpc(serde_json::json!(1), "tools/list", serde_json::json!({}))
        .set("host", host)
        .send(&http::client(), url)
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_beyond_loopback_needs_the_allowed_hosts_named() {
    let db = TestDb::new().await;
    // Told that something in front authenticates, but not which names clients use: any
    // Host would be accepted, so a page on any site could reach it by DNS rebinding.
    for command in ["serve", "dev"] {
        let args = [
            command,
            "--listen",
            "0.0.0.0:0",
            "--tools",
            "demo",
            "--allow-unauthenticated",
        ];
        let (ok, stderr) = run_to_exit(&db.url, &args, &[]).await;
        assert!(!ok, "{command} must not start: {stderr}");
        assert!(stderr.contains("MCP_TASKS_ALLOWED_HOSTS"), "{stderr}");
        assert!(stderr.contains("DNS rebinding"), "{stderr}");
        assert!(!stderr.contains("listening on"), "{stderr}");
    }

    // Named, it serves, and only those names.
    for command in ["serve", "dev"] {
        let args = [
            command,
            "--listen",
            "0.0.0.0:0",
            "--tools",
            "demo",
            "--allow-unauthenticated",
        ];
        let replica = Proc::serve_args(
            &db.url,
            &args,
            &[("MCP_TASKS_ALLOWED_HOSTS", "mcp.example.com")],
        )
        .await;
        let port = replica.addr.expect("listening").port();
        let url = format!("http://127.0.0.1:{port}/mcp");
        assert_eq!(list_with_host(&url, "mcp.example.com").await, 200);
        assert_eq!(list_with_host(&url, "evil.example.com").await, 403);
        assert!(
            replica.terminate(Duration::from_secs(15)).await,
            "{command}: no clean exit within 15 s of SIGTERM"
        );
    }

    // On loopback nothing needs naming: the localhost names are the default.
    let replica = Proc::serve_args(
        &db.url,
        &["serve", "--listen", "127.0.0.1:0", "--tools", "demo"],
        &[],
    )
    .await;
    let url = replica.url();
    assert_eq!(list_with_host(&url, "localhost").await, 200);
    assert_eq!(list_with_host(&url, "evil.example.com").await, 403);
    assert!(
        replica.terminate(Duration::from_secs(15)).await,
        "no clean exit within 15 s of SIGTERM"
    );
}
