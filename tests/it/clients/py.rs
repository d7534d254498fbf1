//! The Python SDK (`mcp` 1.x) against two replicas and a worker.

use serde_json::{Value, json};

use super::{
    Fleet, assert_increasing, assert_spread, call_and_answer, clients_dir, installed, messages,
    run_client,
};
use crate::harness::{Need, skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_runs_every_tool_over_two_replicas() {
    if skip(Need::ClientLibraries).await {
        return;
    }
    let cache = installed().await;
    let fleet = Fleet::start().await;
    let mut command = tokio::process::Command::new(cache.join("py").join("bin").join("python"));
    command
        .arg(clients_dir().join("py").join("client.py"))
        .arg(&fleet.proxy.url);
    let report = run_client(command).await;

    let connected = report.step("connected");
    assert_eq!(connected["protocolVersion"], "2025-11-25", "{connected}");
    assert_eq!(connected["hasSession"], true, "{connected}");
    let names: Vec<&str> = report.step("tools")["names"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for tool in ["greet", "slow_compute", "generate_report", "confirm_delete"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    assert!(report.steps.contains_key("ping"));
    assert_eq!(report.step("greet")["text"], "Hello, Python!");

    let slow = report.step("slow_compute");
    assert_eq!(slow["text"], "Computed py in 2 s.", "{slow}");
    assert_increasing(&slow["progress"]);
    assert!(
        messages(&slow["progress"])
            .iter()
            .any(|m| m == "Computing py: 1 of 2 s"),
        "{slow}"
    );

    let generated = report.step("generate_report");
    assert_eq!(
        generated["text"], "Generated small report with approved outline.",
        "{generated}"
    );
    assert_eq!(generated["structured"]["approved"], true, "{generated}");
    assert_eq!(
        generated["elicitations"].as_array().map(Vec::len),
        Some(1),
        "{generated}"
    );
    assert_eq!(
        generated["elicitations"][0]["field"], "approved",
        "{generated}"
    );

    let deletion = report.step("confirm_delete");
    assert_eq!(deletion["text"], "Deleted notes.txt.", "{deletion}");
    assert_eq!(
        deletion["elicitations"][0]["field"], "confirm",
        "{deletion}"
    );

    let failing = report.step("failing_job");
    assert_eq!(failing["error"]["code"], -32601, "{failing}");
    assert!(
        failing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("task")),
        "{failing}"
    );

    assert_eq!(report.step("deleted")["statuses"], json!([404, 404]));

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
    assert!(
        hops.iter().any(|h| h.http_method == "DELETE"),
        "the library ended its session: {hops:#?}"
    );
    fleet.stop().await;
}
