//! Hand-made attacks over real HTTP, against a replica and a worker on a real database.
//!
//! Each test first creates a few tasks (two owners; completed and waiting for input),
//! takes a digest of every task row, runs its attacks, and at the end checks that the
//! digest is unchanged: no attack may create, alter or delete a task. Every refusal is
//! checked for its exact HTTP status and JSON-RPC code, and for the id it echoes.
//!
//! Requests that an HTTP client library refuses to send (CR, LF, NUL in header values,
//! bodies that never end) go over a bare TCP connection (`harness::http::tcp`).

mod duplicates;
mod encodings;
mod inputs;
mod nesting;
mod numbers;
mod sizes;

use std::net::SocketAddr;

use mcp_tasks_wire::headers::encode_value;
use serde_json::{Value, json};

use crate::harness::fixtures::task_in_status;
use crate::harness::http::Request;
use crate::harness::spec::tasks_meta;
use crate::harness::{TestApp, TestDb};

/// The default `ServerConfig::max_body_bytes`.
const BODY_LIMIT: usize = 1024 * 1024;
/// The default `ServerConfig::json_limits.max_depth`.
const MAX_DEPTH: usize = 64;

// ---------------------------------------------------------------------------------------
// The target: a replica, a worker, and tasks whose rows must not change
// ---------------------------------------------------------------------------------------

struct Target {
    app: TestApp,
    /// Alice's completed task.
    done: String,
    /// Alice's task waiting for `confirm_delete` input.
    waiting: String,
    /// Bob's completed task.
    bobs: String,
    before: (i64, String),
}

impl Target {
    async fn start() -> Self {
        let app = TestApp::start(1).await;

        // Tasks of two owners, in states that stay put: completed, and waiting for input.
        let alice = app.client("alice");
        let bob = app.client("bob");
        let mut ids = Vec::new();
        for (client, tool, arguments, until) in [
            (
                &alice,
                "slow_compute",
                json!({ "seconds": 0, "label": "a" }),
                "completed",
            ),
            (
                &alice,
                "confirm_delete",
                json!({ "filename": "f" }),
                "input_required",
            ),
            (
                &bob,
                "slow_compute",
                json!({ "seconds": 0, "label": "b" }),
                "completed",
            ),
        ] {
            ids.push(task_in_status(client, tool, arguments, until).await);
        }
        let before = digest(&app.db).await;
        assert_eq!(before.0, 3, "three tasks before the attacks");
        let [done, waiting, bobs] = <[String; 3]>::try_from(ids).expect("three ids");
        Self {
            app,
            done,
            waiting,
            bobs,
            before,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.app.replica().addr
    }

    /// Checks that the replica still serves and that no task row changed, then stops.
    async fn finish(self) {
        let hello = self
            .app
            .client("alice")
            .call_tool("greet", json!({ "name": "after" }))
            .await
            .expect("greet after the attacks");
        assert_eq!(hello["content"][0]["text"], "Hello, after!", "{hello}");
        let after = digest(&self.app.db).await;
        assert_eq!(
            after, self.before,
            "the attacks changed the stored tasks (count, md5 of every row)"
        );
        self.app.stop().await;
    }
}

/// Number of task rows and an md5 of all of them, every column.
async fn digest(db: &TestDb) -> (i64, String) {
    let mut conn = db.sql().await;
    sqlx::query_as::<_, (i64, String)>(
        "SELECT count(*), md5(coalesce(string_agg(to_jsonb(t)::text, ',' ORDER BY id), '')) \
         FROM tasks t",
    )
    .fetch_one(&mut conn)
    .await
    .expect("digest of the tasks table")
}

// ---------------------------------------------------------------------------------------
// Requests, all as principal alice
// ---------------------------------------------------------------------------------------

/// The usual transport headers (as principal alice) around `body`.
fn raw(body: impl Into<Vec<u8>>) -> Request {
    Request::raw(body).principal("alice")
}

/// A well-formed request with `_meta` and the routing headers it needs.
fn rpc(id: Value, method: &str, params: Value) -> Request {
    Request::rpc(id, method, params).principal("alice")
}

/// `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{…}}` with `params` spliced
/// in as raw text, for JSON that `serde_json` cannot build.
fn call_raw(name: &str, params_text: &str) -> Request {
    raw(format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params_text}}}"#
    ))
    .set("mcp-method", "tools/call")
    .set("mcp-name", encode_value(name))
}

fn greet(id: Value, who: &str) -> Request {
    rpc(
        id,
        "tools/call",
        json!({ "name": "greet", "arguments": { "name": who } }),
    )
}

fn arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn objects(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

/// A greet call whose `arguments.pad` holds `pad`: the envelope, params and arguments
/// are three levels, so the whole body is nested `3 + depth(pad)` deep.
fn greet_padded(pad: &str) -> Request {
    call_raw(
        "greet",
        &format!(
            r#"{{"name":"greet","arguments":{{"name":"deep","pad":{pad}}},"_meta":{}}}"#,
            tasks_meta()
        ),
    )
}
