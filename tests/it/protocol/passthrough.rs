//! `tasks/get` carries a task's stored JSON (its result, its input requests) to the wire
//! as the bytes the store holds: nothing is lost or rewritten on the way, as parsing it
//! into values and serialising them again would (numbers beyond 64 bits or `f64`).

use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::assert_result;
use crate::harness::http::{self, Request};
use crate::harness::{TestApp, TestDb, task_id};

/// Unusual but valid JSON: escapes of every kind, astral characters, integers and
/// decimals no `i64`, `u64` or `f64` holds, an exponent, keys out of order, and nesting
/// (40 levels) far below the request limits.
fn result_json() -> String {
    let deep = format!(
        "{}{{\"bottom\": [true, false, null, \"\"]}}{}",
        "[".repeat(40),
        "]".repeat(40)
    );
    format!(
        r#"{{"content": [{{"type": "text", "text": "caf\u00e9 \ud83d\ude00 \"quoted\" back\\slash tab\t nl\n \u0007 ü 𝄞"}}],
 "structuredContent": {{"zeta": 1, "alpha": 2, "big": 123456789012345678901234567890123,
 "negative": -98765432109876543210, "precise": 0.100000000000000000000000000001,
 "exponent": 1.5e40, "tiny": 1e-30, "deep": {deep}}},
 "isError": false}}"#
    )
}

const INPUT_REQUESTS: &str = r#"{"zz-last": {"method": "elicitation/create", "params": {"mode": "form",
 "message": "Confirm \u00e9 \ud83d\ude00 budget 123456789012345678901234567890?",
 "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}},
 "aa-first": {"method": "elicitation/create", "params": {"mode": "form", "message": "Again",
 "requestedSchema": {"type": "object", "properties": {}}}}}"#;

/// The members of a JSON object, each as its exact text.
fn members(text: &str) -> HashMap<String, &RawValue> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not an object ({e}): {text}"))
}

/// What the store holds in `column`, as PostgreSQL prints it.
async fn stored(db: &TestDb, column: &str, id: &str) -> String {
    let mut conn = db.sql().await;
    let sql = match column {
        "result" => "SELECT result::text FROM tasks WHERE id = $1",
        _ => "SELECT input_requests::text FROM tasks WHERE id = $1",
    };
    sqlx::query_scalar(sql)
        .bind(uuid::Uuid::parse_str(id).expect("uuid"))
        .fetch_one(&mut conn)
        .await
        .expect("stored json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_json_comes_back_from_tasks_get_byte_for_byte() {
    let app = TestApp::start(0).await;
    let (db, replica) = (&app.db, app.replica());
    let http = http::client();
    let alice = replica.client("alice");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let created = alice
            .call_tool("slow_compute", json!({ "seconds": 30 }))
            .await
            .expect("create");
        ids.push(task_id(&created));
    }
    // No worker runs them: they are finished, and asked for input, as a worker would
    // leave them, with JSON no serde_json value could carry.
    let mut conn = db.sql().await;
    for (id, sql, json) in [
        (
            &ids[0],
            "UPDATE tasks SET status = 'completed', result = $2::jsonb, finished_at = now(),
                 run_after = NULL, updated_at = now(), version = version + 1 WHERE id = $1",
            result_json(),
        ),
        (
            &ids[1],
            "UPDATE tasks SET status = 'input_required', input_requests = $2::jsonb,
                 run_after = NULL, updated_at = now(), version = version + 1 WHERE id = $1",
            INPUT_REQUESTS.to_owned(),
        ),
    ] {
        sqlx::query(sql)
            .bind(uuid::Uuid::parse_str(id).expect("uuid"))
            .bind(&json)
            .execute(&mut conn)
            .await
            .expect("store the json");
    }

    for (id, column) in [(&ids[0], "result"), (&ids[1], "input_requests")] {
        let text = stored(db, column, id).await;
        // The case is one decoding loses: read into a value and written again, it differs.
        let reencoded = serde_json::from_str::<Value>(&text)
            .expect("json")
            .to_string();
        assert_ne!(
            reencoded, text,
            "{column}: the test's JSON must not survive decoding"
        );

        let answer = Request::rpc(json!(1), "tasks/get", json!({ "taskId": id }))
            .principal("alice")
            .send(&http, &replica.url)
            .await;
        let got = assert_result(&answer, "tasks/get", &json!(1));
        let body = answer.text();
        let envelope = members(&body);
        let result = members(envelope["result"].get());
        let (status, member) = match column {
            "result" => ("completed", "result"),
            _ => ("input_required", "inputRequests"),
        };
        assert_eq!(got["status"], status, "{got}");
        let sent = result
            .get(member)
            .unwrap_or_else(|| panic!("{member} missing: {got}"));
        assert_eq!(sent.get(), text, "{column} as sent and as stored");
    }
    // Big integers reach the client as written.
    assert!(
        String::from_utf8_lossy(
            &Request::rpc(json!(2), "tasks/get", json!({ "taskId": ids[0] }))
                .principal("alice")
                .send(&http, &replica.url)
                .await
                .body
        )
        .contains("123456789012345678901234567890123"),
    );

    app.stop().await;
}
