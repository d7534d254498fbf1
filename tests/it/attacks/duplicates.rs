//! Duplicate keys at every level, and ids of every JSON type.

use serde_json::json;

use super::{Target, greet, raw, rpc};
use crate::harness::spec::{CC, PV, TASKS, VERSION, tasks_meta};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_at_every_level_are_parse_errors() {
    let t = Target::start().await;
    let m = tasks_meta().to_string();
    let inner_meta = &m[1..m.len() - 1];
    for (what, body) in [
        (
            "method, then tools/list",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "id",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"id":"other","method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "jsonrpc",
            format!(
                r#"{{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{}},"params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params.name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"test_logging_tool","name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params.arguments",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{}},"arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params._meta",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "_meta protocolVersion",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{"{PV}":"v999.0.0",{inner_meta}}}}}}}"#
            ),
        ),
        (
            "_meta clientCapabilities.extensions",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{"extensions":{{}},"extensions":{{"{TASKS}":{{}}}}}}}}}}}}"#
            ),
        ),
        (
            "arguments.name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"a","name":"b"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "a key written with an escape",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","n\u0061me":"test_logging_tool","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "inputResponses keys",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"inputResponses":{{"k":{{}},"k":{{"action":"accept"}}}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "deep inside arguments",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x","pad":[{{"a":[{{"b":1,"b":2}}]}}]}},"_meta":{m}}}}}"#
            ),
        ),
    ] {
        raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send_to_app(&t.app)
            .await
            .error(&format!("duplicate {what}"), 400, -32700, None);
    }
    // The same key twice in a task method's params, naming a real task: nothing is
    // looked up or changed (the digest at the end says so).
    for (first, second) in [
        (t.waiting.clone(), t.waiting.clone()),
        (uuid::Uuid::new_v4().to_string(), t.waiting.clone()),
        (t.waiting.clone(), t.bobs.clone()),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{{"taskId":"{first}","taskId":"{second}","_meta":{m}}}}}"#
        );
        raw(body)
            .set("mcp-method", "tasks/cancel")
            .set("mcp-name", second.as_bytes())
            .send_to_app(&t.app)
            .await
            .error("duplicate taskId on tasks/cancel", 400, -32700, None);
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_every_json_type() {
    let t = Target::start().await;
    let long = "i".repeat(100_000);
    // Echoed exactly, with their JSON type.
    for id in [
        json!("abc"),
        json!(""),
        json!(long),
        json!("\u{0}\u{1f44b}\"\\"),
        json!(0),
        json!(7),
        json!(-7),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
    ] {
        let what = format!("id {}", id.to_string().chars().take(40).collect::<String>());
        let answer = greet(id.clone(), "id").send_to_app(&t.app).await;
        answer.result(&what, &id);
        // Lexically too: 7 stays 7, never 7.0.
        let lexical = format!("\"id\":{id}");
        assert!(
            String::from_utf8_lossy(&answer.body).contains(&lexical),
            "{what}: id must come back exactly"
        );
        // And on an error answer.
        rpc(id.clone(), "foo/bar", json!({}))
            .send_to_app(&t.app)
            .await
            .error(&what, 404, -32601, Some(&id));
    }
    // Not ids: refused before anything runs, with no id in the answer.
    for id in [
        "1.5",
        "1.0",
        "1e3",
        "-0",
        "0.0",
        "true",
        "false",
        "null",
        "{}",
        r#"{"a":1}"#,
        "[]",
        "[1]",
        "18446744073709551616",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{}}}}}"#,
            tasks_meta()
        );
        raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send_to_app(&t.app)
            .await
            .error(&format!("id {id}"), 400, -32600, None);
    }
    // The same for a task method on a real task: it is not cancelled.
    for id in ["{\"x\":1}", "null", "1.5", "[1]"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tasks/cancel","params":{{"taskId":"{}","_meta":{}}}}}"#,
            t.waiting,
            tasks_meta()
        );
        raw(body)
            .set("mcp-method", "tasks/cancel")
            .set("mcp-name", t.waiting.as_bytes())
            .send_to_app(&t.app)
            .await
            .error(&format!("id {id} on tasks/cancel"), 400, -32600, None);
    }
    t.finish().await;
}
