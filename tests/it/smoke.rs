//! The front door, end to end through an in-process replica and worker: the demo
//! sequence, and README's client example (`crates/client/examples/quickstart.rs`).

use crate::harness::TestApp;

#[path = "../../crates/client/examples/quickstart.rs"]
#[allow(
    dead_code,
    reason = "its main is the example's; the test calls what main calls"
)]
mod quickstart;

#[tokio::test]
async fn demo_prints_the_sequence() {
    let app = TestApp::builder().packs("demo").workers(1).start().await;

    let mut out = Vec::new();
    let mut log = Vec::new();
    mcp_tasks_client::run_demo(app.url(), &mut out, &mut log)
        .await
        .expect("demo run");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "id=0 resultType=complete status=ack\n\
         id=1 resultType=task status=working\n\
         id=2 resultType=complete status=working\n\
         id=3 resultType=complete status=input_required\n\
         id=4 resultType=complete status=ack\n\
         id=5 resultType=complete status=completed\n"
    );
    let log = String::from_utf8(log).unwrap();
    for method in ["tasks/status", "tasks/result", "tasks/list"] {
        assert!(
            log.contains(&format!("check {method}: HTTP 404 code -32601")),
            "{log}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn the_readme_client_example_completes_a_task_after_answering_its_question() {
    let app = TestApp::builder().packs("demo").workers(1).start().await;
    let client = mcp_tasks_client::Client::with_tasks(app.url());
    let task = quickstart::report(&client).await.expect("the example runs");
    assert_eq!(task["status"], "completed", "{task}");
    let text = task["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        text, "Generated small report with approved outline.",
        "{task}"
    );
    app.stop().await;
}

/// README shows the example as the file is (from its first `use` on), so what a reader
/// copies is what the test above ran.
#[test]
fn the_readme_shows_the_client_example_as_it_is() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let example = read("crates/client/examples/quickstart.rs");
    let code = &example[example.find("\nuse ").expect("a use line") + 1..];
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("```rust\n{code}```\n")),
        "README.md does not show crates/client/examples/quickstart.rs as it is; paste from \
         its first `use` line on into README's client example:\n{code}"
    );
}
