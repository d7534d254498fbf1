//! The client without a terminal, as scripts run it: exit codes, `--json`, tokens.

use serde_json::json;

use super::*;
use crate::harness::jwt::{Jwt, SECRET, claims, hs256};
use crate::harness::status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_the_outcomes_apart() {
    let fx = Fixture::start().await;

    let out = fx.run(&["call", "greet", "--arg", "name=Bo"]).await;
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "Hello, Bo!\n");

    let out = fx.run(&["call", "failing_job"]).await;
    assert_code(&out, 7);
    assert!(stdout(&out).contains("The job failed"), "{}", stdout(&out));

    let out = fx.run(&["call", "protocol_error_job"]).await;
    assert_code(&out, 3);
    assert!(
        stderr(&out).contains("protocol_error_job always ends with a protocol error"),
        "{}",
        stderr(&out)
    );

    // Input needed and no terminal: not finished (6), with the way to answer it.
    let out = fx.run(&["call", "generate_report"]).await;
    assert_code(&out, 6);
    assert!(
        stderr(&out).contains("mcp-tasks tasks answer"),
        "{}",
        stderr(&out)
    );
    let id = fx.state_ids().pop().expect("the task is resumable");
    assert_eq!(status(&fx.task(&id).await), "input_required");
    let out = fx.run(&["tasks", "get", &id]).await;
    assert_code(&out, 6);
    assert!(
        stdout(&out).contains("needs approve_outline"),
        "{}",
        stdout(&out)
    );

    // Declined by a script: exit 5; the task then completes without a report.
    let out = fx
        .run(&[
            "tasks",
            "answer",
            &id,
            "--response",
            r#"approve_outline={"action":"decline"}"#,
        ])
        .await;
    assert_code(&out, 5);
    let out = fx.run(&["tasks", "wait", &id]).await;
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("no report was generated"),
        "{}",
        stdout(&out)
    );
    assert!(fx.state_ids().is_empty());

    // Without a terminal the status line is one line per change, on stderr.
    let out = fx
        .run(&["call", "slow_compute", "--arg", "seconds=2"])
        .await;
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "Computed job in 2 s.\n");
    assert!(
        stderr(&out).contains("working: Computing job: "),
        "{}",
        stderr(&out)
    );

    let unknown = uuid::Uuid::new_v4().to_string();
    let out = fx.run(&["tasks", "get", &unknown]).await;
    assert_code(&out, 1);
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    let out = fx.run(&["call", "no_such_tool"]).await;
    assert_code(&out, 1);
    assert!(stderr(&out).contains("no tool named"), "{}", stderr(&out));
    let out = fx.run(&["call"]).await;
    assert_code(&out, 2);

    // A task of another server is left in the state file by a resume here.
    let other = json!({ "tasks": [{ "url": "http://127.0.0.1:1/mcp", "taskId": "elsewhere", "tool": "greet" }] });
    std::fs::write(fx.state_file(), other.to_string()).expect("state file");
    let out = fx.run(&["tasks", "resume"]).await;
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("1 unfinished task(s) of other servers left alone"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fx.state_ids(), ["elsewhere"]);

    // The codes are documented where a user looks.
    let out = fx.run(&["call", "--help"]).await;
    assert_code(&out, 0);
    let help = stdout(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for code in [
        "0 completed",
        "3 task failed",
        "4 task cancelled",
        "5 completed after input was declined",
        "6 not finished",
        "7 completed with a tool error",
    ] {
        assert!(help.contains(code), "--help lacks {code:?}: {help}");
    }
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_prints_json() {
    let fx = Fixture::start().await;

    let tools = json_out(&fx.run(&["tools", "--json"]).await);
    let report = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "generate_report")
        .expect("generate_report listed");
    assert_eq!(
        report["inputSchema"]["properties"]["size"]["enum"],
        json!(["small", "medium", "large"])
    );

    let greeted = json_out(
        &fx.run(&["call", "greet", "--json", r#"{"name":"Ann"}"#])
            .await,
    );
    assert_eq!(greeted["content"][0]["text"], "Hello, Ann!", "{greeted}");

    let out = fx
        .run(&["call", "slow_compute", "--json", r#"{"seconds":1}"#])
        .await;
    assert_code(&out, 0);
    let done = json_out(&out);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Computed job in 1 s.");
    assert!(
        stderr(&out).is_empty(),
        "no status lines with --json: {}",
        stderr(&out)
    );

    let created = json_out(
        &fx.run(&[
            "call",
            "slow_compute",
            "--arg",
            "seconds=1",
            "--no-wait",
            "--json",
        ])
        .await,
    );
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().expect("taskId").to_owned();
    let got = json_out(&fx.run(&["tasks", "get", &id, "--json"]).await);
    assert_eq!(got["taskId"], id.as_str());

    let out = fx.run(&["tasks", "resume", "--json"]).await;
    assert_code(&out, 0);
    let resumed = json_out(&out);
    assert_eq!(resumed["tasks"][0]["taskId"], id.as_str(), "{resumed}");
    assert_eq!(resumed["tasks"][0]["exitCode"], 0);
    assert_eq!(resumed["tasks"][0]["task"]["status"], "completed");
    assert_eq!(
        json_out(&fx.run(&["tasks", "resume", "--json"]).await),
        json!({ "tasks": [] })
    );

    let out = fx
        .run(&[
            "tasks",
            "cancel",
            &uuid::Uuid::new_v4().to_string(),
            "--json",
        ])
        .await;
    assert_code(&out, 1);
    let error = json_out(&out);
    assert_eq!(error["error"]["code"], -32602, "{error}");
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_comes_from_mcp_tasks_token() {
    let app = TestApp::builder()
        .packs(PACKS)
        .workers(1)
        .jwt(Jwt::hs256())
        .start()
        .await;
    let token = hs256(SECRET.as_bytes(), &claims(app.url(), "carol", "t1"));
    let mut fx = Fixture::with_app(app);

    let out = fx.run(&["tools"]).await;
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("authentication required"),
        "{}",
        stderr(&out)
    );

    fx.extra_env.push(("MCP_TASKS_TOKEN".into(), token.clone()));
    let out = fx
        .run(&["call", "slow_compute", "--arg", "seconds=1"])
        .await;
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "Computed job in 1 s.\n");
    let help = fx.run(&["call", "--help"]).await;
    assert!(!stdout(&help).contains(&token), "--help shows no token");
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listen_streams_the_status_comes_from_polling() {
    // No listen stream is allowed: the client falls back to tasks/get at pollIntervalMs.
    let app = TestApp::builder()
        .packs(PACKS)
        .workers(1)
        .config(|c| c.max_streams_per_principal = 0)
        .start()
        .await;
    let refused = app
        .client("anonymous")
        .listen(json!("probe"), json!({ "taskIds": [] }))
        .await;
    assert!(refused.is_err(), "listen was not refused");
    let fx = Fixture::with_app(app);
    let out = fx
        .run(&["call", "slow_compute", "--arg", "seconds=2"])
        .await;
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "Computed job in 2 s.\n");
    // Each status lasts a second and polls come every 500 ms: at least one is seen.
    assert!(
        stderr(&out).contains("working: Computing job: "),
        "{}",
        stderr(&out)
    );
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_exits_0_once_the_cancel_took() {
    let fx = Fixture::start().await;
    let start = |args: &'static [&'static str]| {
        let fx = &fx;
        async move {
            let created = json_out(&fx.run(args).await);
            created["taskId"].as_str().expect("taskId").to_owned()
        }
    };

    // A running task: the cancel is what was asked for, so it is success.
    let id = start(&[
        "call",
        "slow_compute",
        "--arg",
        "seconds=60",
        "--no-wait",
        "--json",
    ])
    .await;
    let out = fx.run(&["tasks", "cancel", &id]).await;
    assert_code(&out, 0);
    assert!(stderr(&out).contains("was cancelled"), "{}", stderr(&out));
    assert_eq!(status(&fx.task(&id).await), "cancelled");
    let out = fx.run(&["tasks", "cancel", &id, "--json"]).await;
    assert_code(&out, 0);
    assert_eq!(json_out(&out)["status"], "cancelled");
    // Waiting for it wanted it to finish: that one still says cancelled (4).
    let out = fx.run(&["tasks", "wait", &id]).await;
    assert_code(&out, 4);

    // One that had failed before the cancel keeps the code of how it ended.
    let id = start(&["call", "protocol_error_job", "--no-wait", "--json"]).await;
    assert_code(&fx.run(&["tasks", "wait", &id]).await, 3);
    let out = fx.run(&["tasks", "cancel", &id]).await;
    assert_code(&out, 3);
    assert_eq!(status(&fx.task(&id).await), "failed");

    let out = fx.run(&["tasks", "cancel", "--help"]).await;
    let help = stdout(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("`tasks cancel` exits 0 once the task is cancelled"),
        "{help}"
    );
    fx.stop().await;
}
