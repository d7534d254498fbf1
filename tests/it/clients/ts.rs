//! The TypeScript SDK (`@modelcontextprotocol/sdk` 1.x) against two replicas and a worker.

use serde_json::{Value, json};

use super::{
    Fleet, assert_increasing, assert_spread, call_and_answer, clients_dir, installed, messages,
    run_client,
};
use crate::harness::{Need, skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_runs_every_tool_and_the_tasks_client_over_two_replicas() {
    if skip(Need::ClientLibraries).await {
        return;
    }
    let cache = installed().await;
    let fleet = Fleet::start().await;
    let mut command = tokio::process::Command::new("node");
    command
        .arg(clients_dir().join("ts").join("client.cjs"))
        .arg(&fleet.proxy.url)
        .env("NODE_PATH", cache.join("ts").join("node_modules"));
    let report = run_client(command).await;

    let connected = report.step("connected");
    assert_eq!(connected["protocolVersion"], "2025-11-25", "{connected}");
    assert_eq!(connected["hasSession"], true);
    let caps = &connected["capabilities"];
    assert!(caps["tools"].is_object(), "{caps}");
    assert!(
        caps["tasks"]["requests"]["tools"]["call"].is_object(),
        "{caps}"
    );
    assert!(
        caps["tasks"]["list"].is_object() && caps["tasks"]["cancel"].is_object(),
        "{caps}"
    );
    assert!(caps.get("extensions").is_none(), "{caps}");

    let tools = report.step("tools");
    let names: Vec<&str> = tools["names"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for tool in ["greet", "slow_compute", "generate_report", "confirm_delete"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    let support = &tools["taskSupport"];
    assert_eq!(support["greet"], Value::Null, "{support}");
    assert_eq!(support["slow_compute"], "optional", "{support}");
    assert_eq!(support["generate_report"], "optional", "{support}");
    assert_eq!(support["failing_job"], "required", "{support}");

    assert!(report.steps.contains_key("ping"));
    assert_eq!(report.step("greet")["text"], "Hello, TypeScript!");

    let slow = report.step("slow_compute");
    assert_eq!(slow["text"], "Computed ts in 2 s.", "{slow}");
    assert_increasing(&slow["progress"]);
    let said = messages(&slow["progress"]);
    assert!(
        said.iter().any(|m| m == "Computing ts: 1 of 2 s"),
        "the status messages travel as progress: {said:?}"
    );

    let report_step = report.step("generate_report");
    assert_eq!(
        report_step["text"], "Generated small report with approved outline.",
        "{report_step}"
    );
    assert_eq!(report_step["structured"]["approved"], true, "{report_step}");
    let asked = report_step["elicitations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        asked.len(),
        1,
        "one elicitation, answered by the handler: {asked:?}"
    );
    assert_eq!(asked[0]["field"], "approved");
    assert_eq!(asked[0]["mode"], "form");
    assert_eq!(
        asked[0]["relatedTask"],
        Value::Null,
        "no task is visible to the call"
    );

    let deletion = report.step("confirm_delete");
    assert_eq!(deletion["text"], "Deleted notes.txt.", "{deletion}");
    assert_eq!(
        deletion["elicitations"][0]["field"], "confirm",
        "{deletion}"
    );

    // The experimental tasks client: created, polled, result read, listed.
    let task = report.step("task");
    let id = task["created"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!id.is_empty(), "{task}");
    assert_eq!(task["created"]["status"], "working", "{task}");
    assert!(
        task["created"].get("ttl").is_some(),
        "2025-11-25 names it ttl: {task}"
    );
    assert!(task["created"].get("ttlMs").is_none(), "{task}");
    let seen: Vec<&str> = task["seen"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(seen.first(), Some(&"taskCreated"), "{seen:?}");
    assert!(seen.contains(&"status:completed"), "{seen:?}");
    assert_eq!(seen.last(), Some(&"result"), "{seen:?}");
    assert_eq!(task["text"], "Computed task in 1 s.", "{task}");
    assert_eq!(task["fetched"]["status"], "completed", "{task}");
    assert_eq!(task["resultText"], "Computed task in 1 s.", "{task}");
    assert_eq!(task["relatedTask"], json!(id), "{task}");
    assert!(
        task["listed"]
            .as_array()
            .is_some_and(|l| l.contains(&json!(id))),
        "{task}"
    );

    // Input for a task arrives on tasks/result, tagged with the task.
    let with_input = report.step("task_with_input");
    assert_eq!(
        with_input["text"], "Generated medium report with approved outline.",
        "{with_input}"
    );
    let related = with_input["elicitations"][0]["relatedTask"]
        .as_str()
        .unwrap_or_default();
    assert!(!related.is_empty(), "{with_input}");

    let cancel = report.step("cancel");
    assert_eq!(cancel["cancelled"]["status"], "cancelled", "{cancel}");
    assert_eq!(cancel["afterCancel"]["status"], "cancelled", "{cancel}");
    assert_eq!(cancel["cancelAgain"]["code"], -32602, "{cancel}");

    // Ended: both replicas refuse the session from now on.
    assert_eq!(report.step("deleted")["statuses"], json!([404, 404]));

    // Where everything went: both replicas served the session, and each elicitation's
    // answer reached the replica that was not streaming the call waiting for it.
    let hops = fleet.proxy.hops();
    assert_spread(&hops);
    let mut from = 0;
    for tool in ["generate_report", "confirm_delete"] {
        let (call, answer) = call_and_answer(&hops, tool, from);
        assert_ne!(
            hops[call].backend, hops[answer].backend,
            "{tool}: the answer went to the streaming replica: {hops:#?}"
        );
        from = answer;
    }
    let delete = hops
        .iter()
        .position(|h| h.http_method == "DELETE")
        .unwrap_or_else(|| panic!("no DELETE: {hops:#?}"));
    let after: Vec<usize> = hops[delete + 1..].iter().map(|h| h.backend).collect();
    assert_eq!(after.len(), 2, "{hops:#?}");
    assert_ne!(
        after[0], after[1],
        "the ended session was tried on both replicas"
    );

    // The store agrees: the cancelled task is cancelled, the tasks with input got it.
    let mut conn = fleet.db.sql().await;
    let cancelled: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1::uuid")
        .bind(cancel["cancelled"]["taskId"].as_str().unwrap_or_default())
        .fetch_one(&mut conn)
        .await
        .expect("cancelled task");
    assert_eq!(cancelled, "cancelled");
    let answered: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE status = 'completed'
           AND (input_responses ? 'approve_outline' OR input_responses ? 'confirm_delete')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(
        answered, 3,
        "generate_report twice and confirm_delete, each answered once"
    );
    drop(conn);
    fleet.stop().await;
}
