//! The spawner with real child processes (a shell standing in for `mcp-tasks`, printing
//! what a replica would): the scrubbed environment, the ready line, the errors when a
//! child never gets there, and its log handed over line by line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_spawn::{Error, INHERITED, Logs, READY_LINE_ENV, Ready, Spawn, level};

fn sh(script: &str) -> Spawn {
    let mut spawn = Spawn::new("sh");
    spawn.args(["-c", script]).name("child");
    spawn
}

#[tokio::test]
async fn children_see_only_the_inherited_variables_and_what_is_set() {
    let out = Spawn::new("env")
        .env("MCP_TASKS_SET_BY_THE_TEST", "1")
        .output(Duration::from_secs(30))
        .await
        .expect("running env");
    assert!(out.status.success(), "{out:?}");
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.to_owned()))
        .collect();
    assert!(
        names.contains(&"MCP_TASKS_SET_BY_THE_TEST".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"NO_COLOR".to_owned()), "{names:?}");
    for name in &names {
        assert!(
            INHERITED.contains(&name.as_str())
                || name == "NO_COLOR"
                || name == "MCP_TASKS_SET_BY_THE_TEST",
            "{name} reached a child from our environment: {names:?}"
        );
    }
}

#[tokio::test]
async fn start_returns_with_what_the_ready_line_says_and_the_log_goes_to_the_sink() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    // The variable is set only when the ready line is waited for.
    let script = format!(
        r#"echo "2026-01-01T00:00:00Z  INFO mcp_tasks::cli: starting ${READY_LINE_ENV}" >&2
        echo '{{"listen":"127.0.0.1:4321","metrics":null,"ready":"replica","url":"http://127.0.0.1:4321/mcp"}}'
        echo "2026-01-01T00:00:01Z  WARN mcp_tasks::cli: after" >&2
        exec sleep 30"#
    );
    let mut process = sh(&script)
        .logs(Logs::To(Arc::new(move |name, line| {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{name}: {line}"));
        })))
        .ready_within(Duration::from_secs(30))
        .start()
        .await
        .expect("ready");
    assert_eq!(
        process.listen(),
        Some("127.0.0.1:4321".parse().expect("addr"))
    );
    assert_eq!(process.url().as_deref(), Some("http://127.0.0.1:4321/mcp"));
    assert_eq!(process.ready().map(|r| r.role.as_str()), Some("replica"));
    assert!(
        process.try_wait().expect("try_wait").is_none(),
        "still running"
    );
    // The child writes its next line after the ready line, and the sink reads it on its
    // own: wait for it, or a kill can come before the child has written it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lines.lock().unwrap_or_else(|e| e.into_inner()).len() < 2
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.kill().await;
    let lines = lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        lines,
        [
            "child: 2026-01-01T00:00:00Z  INFO mcp_tasks::cli: starting true",
            "child: 2026-01-01T00:00:01Z  WARN mcp_tasks::cli: after",
        ],
        "every stderr line, in order, and never the ready line"
    );
}

#[tokio::test]
async fn a_child_that_exits_or_stays_silent_is_an_error_that_says_which() {
    let exited = sh("echo 'cannot listen' >&2; exit 3")
        .logs(Logs::Discard)
        .ready_within(Duration::from_secs(30))
        .start()
        .await
        .expect_err("it exited");
    assert!(
        matches!(&exited, Error::ExitedBeforeReady { name, status } if name == "child" && status == "exit code 3"),
        "{exited:?}"
    );

    let silent = sh("exec sleep 30")
        .ready_within(Duration::from_millis(300))
        .start()
        .await
        .expect_err("no ready line");
    assert!(matches!(silent, Error::NotReady { .. }), "{silent:?}");
    assert!(
        silent.to_string().contains("MCP_TASKS_READY_LINE"),
        "{silent}"
    );

    let slow = sh("exec sleep 30")
        .output(Duration::from_millis(300))
        .await
        .expect_err("it runs on");
    assert!(matches!(slow, Error::DidNotExit { .. }), "{slow:?}");
}

#[tokio::test]
async fn terminate_is_a_sigterm_the_child_may_answer() {
    let mut process = sh("trap 'exit 0' TERM; echo '{\"ready\":\"worker\",\"worker_id\":\"w\",\"metrics\":null}'; while :; do sleep 0.1; done")
        .ready_within(Duration::from_secs(30))
        .start()
        .await
        .expect("ready");
    assert_eq!(process.listen(), None);
    assert_eq!(
        process.ready().and_then(|r| r.worker_id.as_deref()),
        Some("w")
    );
    assert!(process.cpu().is_some() && process.rss().is_some_and(|b| b > 0));
    let status = process
        .terminate(Duration::from_secs(30))
        .await
        .expect("it exits on SIGTERM");
    assert!(status.success(), "{status}");
}

#[test]
fn levels_and_ready_lines_are_read_in_either_log_format() {
    assert_eq!(
        level("2026-01-01T00:00:00.1Z  WARN mcp_tasks::cli: x"),
        Some("WARN")
    );
    assert_eq!(
        level(r#"{"timestamp":"t","level":"ERROR","target":"x"}"#),
        Some("ERROR")
    );
    assert_eq!(level("listening on http://127.0.0.1:1/mcp"), None);
    assert_eq!(Ready::parse("listening on"), None);
    assert_eq!(Ready::parse(r#"{"level":"INFO"}"#), None);
    let ready = Ready::parse(r#"{"ready":"dev","listen":"127.0.0.1:8080"}"#).expect("parses");
    assert_eq!(ready.role, "dev");
    assert_eq!(ready.url, None);
}
