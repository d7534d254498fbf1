//! Settings that cannot work are refused at start-up with the reason, and every
//! connection setting has a flag and a variable.

use super::{BOUND, bounded};
use crate::harness::TestDb;

/// Runs `mcp-tasks serve` (under a soft open-file limit of `nofile`) until it exits;
/// returns whether it succeeded, and its log.
async fn serve_until_exit(db: &TestDb, nofile: u64, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = mcp_tasks_spawn::Spawn::new("sh");
    cmd.args(["-c", r#"ulimit -S -n "$0" && exec "$@""#])
        .arg(nofile.to_string())
        .args([
            crate::harness::procs::BIN,
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("DATABASE_URL", &db.url)
        .envs(env.iter().copied());
    let out = bounded("serve exits instead of serving", cmd.output(2 * BOUND))
        .await
        .expect("running serve");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_that_cannot_work_are_refused_at_start_up_with_the_reason() {
    let db = TestDb::new().await;

    let (ok, log) = serve_until_exit(&db, 256, &[("MCP_TASKS_MAX_CONNECTIONS", "1000")]).await;
    assert!(!ok, "a cap over the file limit is refused: {log}");
    assert!(
        log.contains("MCP_TASKS_MAX_CONNECTIONS")
            && log.contains("open-file limit is 256")
            && log.contains("lower the cap to"),
        "the error names the setting, the limit and what would fit: {log}"
    );
    assert!(
        !log.contains("listening on"),
        "refused before listening: {log}"
    );

    let (ok, log) = serve_until_exit(&db, 96, &[]).await;
    assert!(
        !ok,
        "a file limit that leaves no room for clients is refused: {log}"
    );
    assert!(
        log.contains("open-file limit is 96") && log.contains("ulimit -n"),
        "{log}"
    );

    let (ok, log) = serve_until_exit(&db, 4096, &[("MCP_TASKS_REQUEST_TIMEOUT_MS", "30000")]).await;
    assert!(
        !ok,
        "a request timeout shorter than the sync wait is refused: {log}"
    );
    assert!(
        log.contains("MCP_TASKS_REQUEST_TIMEOUT_MS") && log.contains("MCP_TASKS_SYNC_WAIT_MS"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_setting_has_a_flag_and_a_variable_in_the_help() {
    for command in ["serve", "dev"] {
        let out = bounded(
            "--help",
            crate::harness::procs::mcp_tasks(&[command, "--help"], &[]).output(2 * BOUND),
        )
        .await
        .expect("--help");
        let help = String::from_utf8_lossy(&out.stdout);
        for (flag, variable, default) in [
            ("--max-connections", "MCP_TASKS_MAX_CONNECTIONS", None),
            (
                "--header-timeout-ms",
                "MCP_TASKS_HEADER_TIMEOUT_MS",
                Some("10000"),
            ),
            (
                "--body-timeout-ms",
                "MCP_TASKS_BODY_TIMEOUT_MS",
                Some("30000"),
            ),
            (
                "--idle-timeout-ms",
                "MCP_TASKS_IDLE_TIMEOUT_MS",
                Some("65000"),
            ),
            (
                "--request-timeout-ms",
                "MCP_TASKS_REQUEST_TIMEOUT_MS",
                Some("90000"),
            ),
            ("--h2-max-streams", "MCP_TASKS_H2_MAX_STREAMS", Some("100")),
        ] {
            assert!(
                help.contains(&format!("{flag} <")),
                "{command}: {flag}:\n{help}"
            );
            assert!(help.contains(variable), "{command}: {variable}:\n{help}");
            if let Some(default) = default {
                // clap may wrap between the variable and its default.
                let squeezed: String = help.split_whitespace().collect();
                assert!(
                    squeezed.contains(&format!("[default:{default}]")),
                    "{command}: {flag} defaults to {default}:\n{help}"
                );
            }
        }
    }
}
