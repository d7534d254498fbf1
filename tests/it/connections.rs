//! Slow, idle and excess clients over real sockets: header, body and idle timeouts, a
//! client that stops reading, the request deadline, the connection cap (idle connections
//! make room; busy ones get a fast 503 while health probes are still answered), a
//! lowered open-file limit, and (in submodules) the HTTP/2 limits and start-up checks.
//!
//! Timeouts are short in these replicas' configs, and every wait is bounded by `BOUND`,
//! which fails the test on a hang; nothing asserts how long anything took.

use std::net::SocketAddr;
use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_client::{Client, ClientError, status_of};
use mcp_tasks_server::{ServerConfig, StateKeys};
use mcp_tasks_store::{Finish, Lease, NewTask, Owner, Store, TaskId};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::procs::Proc;

mod http2;
mod pool;
mod startup;
use crate::harness::{Replica, TestDb, Worker, eventually, registry, server_config, task_id};

/// The longest any single wait may take before the test counts it as a hang.
const BOUND: Duration = Duration::from_secs(20);

fn keys() -> StateKeys {
    StateKeys::parse(&"cd".repeat(32)).expect("key")
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {BOUND:?}"))
}

/// A config with short connection timeouts.
fn short_timeouts() -> ServerConfig {
    let mut c = server_config();
    c.connections.header_timeout = Duration::from_secs(1);
    c.connections.body_timeout = Duration::from_secs(1);
    c.connections.idle_timeout = Duration::from_secs(2);
    c
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// Reads until the replica closes the connection, and returns what it sent first.
async fn until_closed(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let read = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
                Err(e) => panic!("{what}: reading failed: {e}"),
            }
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .unwrap_or_else(|_| panic!("{what}: the replica left the connection open"))
}

/// Whether the replica closes the connection within `within` (a connection it keeps
/// open reads nothing).
async fn is_closed_within(mut stream: TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// One HTTP/1.1 answer: status, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn parse(bytes: &[u8], what: &str) -> Self {
        let text = String::from_utf8_lossy(bytes);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{what}: not an HTTP answer: {text:?}"));
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no status line: {head:?}"));
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Self {
            status,
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// Sends a `GET /healthz` and reads its whole answer, leaving the connection open.
async fn healthz(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let read = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"}") {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before answering /healthz");
            got.extend_from_slice(&buf[..n]);
        }
        got
    };
    let answer = Answer::parse(&bounded("/healthz", read).await, "/healthz");
    assert_eq!(answer.status, 200);
}

fn post_head(content_length: usize) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {content_length}\r\n\r\n"
    )
}

/// A normal client's work, which must be answered while slow connections are open.
async fn normal_requests(client: &Client) {
    let hello = bounded("greet", client.call_tool("greet", json!({ "name": "x" })))
        .await
        .expect("greet");
    assert_eq!(hello["content"][0]["text"], "Hello, x!", "{hello}");
    let created = bounded(
        "tools/call",
        client.call_tool("slow_compute", json!({ "seconds": 0 })),
    )
    .await
    .expect("tools/call");
    let got = bounded("tasks/get", client.get_task(&task_id(&created)))
        .await
        .expect("tasks/get");
    assert_eq!(got["taskId"], created["taskId"], "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_stalled_bodies_and_idle_connections_are_closed_after_their_timeouts() {
    let db = TestDb::new().await;
    let replica =
        Replica::start_with(&db.store, registry("conformance"), short_timeouts(), keys()).await;
    let addr = replica.addr;

    let mut silent = connect(addr).await;
    let mut partial_head = connect(addr).await;
    partial_head
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
        .await
        .expect("write");
    let mut stalled_body = connect(addr).await;
    stalled_body
        .write_all(format!("{}{{\"jsonrpc\":", post_head(200)).as_bytes())
        .await
        .expect("write");
    let mut idle = connect(addr).await;
    healthz(&mut idle).await;
    // A kept-alive connection whose next head starts and stops.
    let mut second_head = connect(addr).await;
    healthz(&mut second_head).await;
    // (Should the replica already have closed it, the outcome is the same.)
    let _ = second_head.write_all(b"GET /hea").await;

    // Meanwhile a normal client is answered.
    normal_requests(&replica.client("alice")).await;

    for (stream, what) in [
        (&mut silent, "a connection that sends nothing"),
        (&mut partial_head, "a head that stops half-way"),
        (&mut idle, "an idle kept-alive connection"),
        (&mut second_head, "a second head that stops half-way"),
    ] {
        let sent = until_closed(stream, what).await;
        assert!(
            sent.is_empty(),
            "{what}: closed without an answer: {sent:?}"
        );
    }

    let sent = until_closed(&mut stalled_body, "a stalled body").await;
    let answer = Answer::parse(&sent, "a stalled body");
    assert_eq!(answer.status, 408, "{:?}", String::from_utf8_lossy(&sent));
    assert_eq!(answer.header("connection"), Some("close"));
    let body = answer.json();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "body_ms", "{body}");
    assert_eq!(body["error"]["data"]["max"], 1000, "{body}");

    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_and_waits_for_a_task_outlive_the_idle_and_header_timeouts() {
    let db = TestDb::new().await;
    let replica =
        Replica::start_with(&db.store, registry("conformance"), short_timeouts(), keys()).await;
    let worker = Worker::start(&db.store, registry("conformance"));

    // A stream on a task that works for 5 s: over twice the idle timeout with nothing but
    // frames, and five header timeouts.
    let client = replica.client("alice");
    let created = bounded(
        "tools/call",
        client.call_tool("slow_compute", json!({ "seconds": 5 })),
    )
    .await
    .expect("tools/call");
    let id = task_id(&created);
    let mut stream = bounded(
        "listen",
        client.listen(json!("s"), json!({ "taskIds": [id] })),
    )
    .await
    .expect("listen");
    // A client without the Tasks extension, whose call the replica waits on for 3 s.
    let plain = Client::new(&replica.url, json!({}));
    let waited = tokio::spawn(async move {
        plain
            .call_tool("slow_compute", json!({ "seconds": 3 }))
            .await
    });

    let mut last = Value::Null;
    while let Some(frame) = bounded("a frame", stream.next()).await.expect("stream") {
        last = frame;
    }
    assert_eq!(
        last["id"], "s",
        "the stream ends with the listen result: {last}"
    );
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    let task = bounded("tasks/get", client.get_task(&task_id(&created)))
        .await
        .expect("tasks/get");
    assert_eq!(status_of(&task), "completed", "{task}");

    let result = bounded("the waited call", waited)
        .await
        .expect("join")
        .expect("the call waited on is answered");
    assert_eq!(result["resultType"], "complete", "{result}");
    worker.stop().await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_deadline_is_answered_503_while_a_stream_goes_on() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.connections.request_timeout = Duration::from_secs(1);
    let replica = Replica::start_with(&db.store, registry("conformance"), config, keys()).await;
    let worker = Worker::start(&db.store, registry("conformance"));

    let client = replica.client("alice");
    let created = bounded(
        "tools/call",
        client.call_tool("slow_compute", json!({ "seconds": 3 })),
    )
    .await
    .expect("tools/call");
    let mut stream = bounded(
        "listen",
        client.listen(json!("s"), json!({ "taskIds": [task_id(&created)] })),
    )
    .await
    .expect("listen");

    // A wait longer than the deadline.
    let plain = Client::new(&replica.url, json!({}));
    let error = bounded(
        "a call past its deadline",
        plain.call_tool("slow_compute", json!({ "seconds": 10 })),
    )
    .await
    .expect_err("the deadline ends the wait");
    let ClientError::Rpc {
        status, code, data, ..
    } = &error
    else {
        panic!("not a JSON-RPC error: {error}");
    };
    assert_eq!((*status, *code), (503, -32603), "{error}");
    let data = data.clone().unwrap_or_default();
    assert_eq!(data["limit"], "request_ms", "{data}");
    assert_eq!(data["max"], 1000, "{data}");

    // The stream, answered long before, is not cut by the deadline.
    let mut last = Value::Null;
    while let Some(frame) = bounded("a frame", stream.next()).await.expect("stream") {
        last = frame;
    }
    assert_eq!(last["id"], "s", "{last}");
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    worker.stop().await;
    replica.stop().await;
}

fn new_task() -> NewTask {
    NewTask {
        tool: "slow_compute".into(),
        arguments: json!({ "seconds": 1 }),
        status_message: Some("Queued".into()),
        ttl_ms: Some(3_600_000),
        poll_interval_ms: Some(500),
        retention_ms: 60_000,
        max_attempts: 3,
        input_responses: Map::new(),
        trace_context: None,
        client_capabilities: None,
        idempotency: None,
    }
}

async fn stored_task(store: &Store, who: &str) -> TaskId {
    store
        .replica()
        .create_task(&Owner::new("default", who), new_task())
        .await
        .expect("create")
        .id
}

async fn claim(store: &Store, id: TaskId) -> Lease {
    let claimed = store
        .worker()
        .claim("test-worker", 10, 60_000)
        .await
        .expect("claim");
    claimed
        .into_iter()
        .find(|c| c.lease.id == id)
        .expect("the task was claimable")
        .lease
}

/// The next frame of a listen stream whose `params.statusMessage` is `message`.
async fn frame_with(stream: &mut mcp_tasks_client::Subscription, message: &str) -> Value {
    bounded(&format!("a frame saying {message:?}"), async {
        loop {
            let frame = stream
                .next()
                .await
                .expect("stream")
                .expect("the stream ended early");
            if frame["params"]["statusMessage"] == message {
                return frame;
            }
        }
    })
    .await
}

async fn get_status(url: &str) -> u16 {
    let response = bounded(url, reqwest::get(url)).await.expect("GET");
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_idle_connections_make_room_for_new_clients() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.connections.max_connections = Some(4);
    let replica = Replica::start_with(&db.store, registry("conformance"), config, keys()).await;
    let base = format!("http://{}", replica.addr);

    let mut idle = Vec::new();
    for _ in 0..10 {
        let mut stream = connect(replica.addr).await;
        healthz(&mut stream).await;
        idle.push(stream);
    }

    // A new client: readiness, a call, a task, and a stream that hears a change.
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    let client = replica.client("alice");
    normal_requests(&client).await;
    let id = stored_task(&db.store, "alice").await;
    let mut stream = bounded(
        "listen",
        client.listen(json!(1), json!({ "taskIds": [id.to_string()] })),
    )
    .await
    .expect("listen");
    let lease = claim(&db.store, id).await;
    assert!(
        db.store
            .worker()
            .set_status_message(&lease, "heard past the cap")
            .await
            .expect("status")
    );
    frame_with(&mut stream, "heard past the cap").await;

    let closed = join_all(
        idle.into_iter()
            .map(|s| is_closed_within(s, Duration::from_secs(2))),
    )
    .await;
    let closed = closed.iter().filter(|c| **c).count();
    assert!(
        closed >= 7,
        "ten idle connections and new clients cannot all fit a cap of 4: only {closed} were closed"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_of_busy_connections_new_ones_get_a_fast_503_and_probes_still_answer() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.connections.max_connections = Some(4);
    let replica = Replica::start_with(&db.store, registry("conformance"), config, keys()).await;
    let base = format!("http://{}", replica.addr);

    // Four listen streams, each on its own connection, fill the cap with work.
    let id = stored_task(&db.store, "alice").await;
    let mut streams = Vec::new();
    for n in 0..4 {
        let client = replica.client("alice");
        let mut stream = bounded(
            "listen",
            client.listen(json!(n), json!({ "taskIds": [id.to_string()] })),
        )
        .await
        .expect("listen");
        frame_with(&mut stream, "Queued").await;
        streams.push((client, stream));
    }

    let http = reqwest::Client::new();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {} });
    let refused = bounded(
        "a request past the cap",
        http.post(&replica.url).json(&body).send(),
    )
    .await
    .expect("an answer, not a hang");
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let error: Value = refused.json().await.expect("json");
    assert_eq!(error["error"]["data"]["limit"], "connections", "{error}");
    assert_eq!(error["error"]["data"]["max"], 4, "{error}");
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    assert_eq!(get_status(&format!("{base}/healthz")).await, 200);

    // The streams in progress are untouched.
    let lease = claim(&db.store, id).await;
    assert!(
        db.store
            .worker()
            .set_status_message(&lease, "still streaming")
            .await
            .expect("status")
    );
    for (_, stream) in &mut streams {
        frame_with(stream, "still streaming").await;
    }

    // When one ends, a new client gets in.
    drop(streams.pop());
    let client = replica.client("bob");
    eventually(BOUND, "a slot freed by the closed stream", || async {
        client
            .call_tool("greet", json!({ "name": "in" }))
            .await
            .ok()
    })
    .await;
    assert!(
        db.store
            .worker()
            .finish(&lease, &Finish::Completed(json!({ "content": [] })), None)
            .await
            .expect("finish")
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_off_after_the_idle_timeout() {
    let db = TestDb::new().await;
    let config = short_timeouts();
    let idle = config.connections.idle_timeout;
    let replica = Replica::start_with(&db.store, registry("conformance"), config, keys()).await;
    let id = stored_task(&db.store, "alice").await;
    let mut stream = bounded(
        "listen",
        replica
            .client("alice")
            .listen(json!(1), json!({ "taskIds": [id.to_string()] })),
    )
    .await
    .expect("listen");
    frame_with(&mut stream, "Queued").await;

    // Far more than socket buffers hold, while the client reads nothing (the same as
    // push.rs's slow subscriber, whose stream, with the default timeouts, goes on).
    let lease = claim(&db.store, id).await;
    let padding = "x".repeat(8 * 1024);
    for i in 0..2000 {
        let message = format!("{i:05} {padding}");
        assert!(
            db.store
                .worker()
                .set_status_message(&lease, &message)
                .await
                .expect("status")
        );
    }
    assert!(
        db.store
            .worker()
            .finish(&lease, &Finish::Completed(json!({ "content": [] })), None)
            .await
            .expect("finish")
    );
    // The reader stays away well past the idle timeout.
    tokio::time::sleep(3 * idle).await;
    while let Ok(Some(frame)) = bounded("the rest of the stream", stream.next()).await {
        assert!(
            frame.get("result").is_none(),
            "the replica kept the stream of a client that stopped reading: {frame}"
        );
    }
    // The replica is unharmed.
    normal_requests(&replica.client("alice")).await;
    replica.stop().await;
}

/// PostgreSQL backend pids of the LISTEN connections on this test's database.
async fn listener_pids(pool: &sqlx::PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
         WHERE application_name = $1 AND datname = current_database() ORDER BY pid",
    )
    .bind(mcp_tasks_store::LISTENER_APPLICATION_NAME)
    .fetch_all(pool)
    .await
    .expect("pg_stat_activity")
}

/// Sixteen requests at once, each on a connection of its own: the pool opens connections
/// for them.
async fn concurrent_gets(url: &str, id: &str) {
    let gets = (0..16).map(|_| async {
        let client = Client::with_tasks(url);
        bounded("tasks/get", client.get_task(id))
            .await
            .expect("tasks/get")
    });
    for task in join_all(gets).await {
        assert_eq!(task["taskId"], id, "{task}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_file_limit_the_replica_keeps_its_database_and_recovers() {
    let db = TestDb::new().await;
    let env = [
        ("MCP_TASKS_RATE_LIMIT", "0"),
        // Silent connections stay until they are pushed out, for the most pressure.
        ("MCP_TASKS_HEADER_TIMEOUT_MS", "60000"),
    ];
    let replica = Proc::serve_with_file_limit(&db.url, "conformance", &env, 256).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", replica.pid()))
        .expect("/proc/<pid>/limits");
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .expect("Max open files");
    assert_eq!(
        soft, "256",
        "the replica runs with the lowered limit:\n{limits}"
    );

    let url = replica.url();
    let base = url.trim_end_matches("/mcp").to_owned();
    let client = Client::with_tasks(&url);
    let id = stored_task(&db.store, "anonymous").await;
    let ids = json!({ "taskIds": [id.to_string()] });
    let mut stream = bounded("listen", client.listen(json!(1), ids.clone()))
        .await
        .expect("listen");
    frame_with(&mut stream, "Queued").await;
    let before = eventually(BOUND, "the hub's LISTEN connection", || async {
        let pids = listener_pids(&db.pool).await;
        (!pids.is_empty()).then_some(pids)
    })
    .await;

    // More connections than the process has descriptors.
    let mut flood = Vec::new();
    for _ in 0..400 {
        flood.push(connect(replica.addr.expect("addr")).await);
    }
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    concurrent_gets(&url, &id.to_string()).await;
    let lease = claim(&db.store, id).await;
    assert!(
        db.store
            .worker()
            .set_status_message(&lease, "heard in the flood")
            .await
            .expect("status")
    );
    frame_with(&mut stream, "heard in the flood").await;
    let mut second = bounded("listen", Client::with_tasks(&url).listen(json!(2), ids))
        .await
        .expect("a new stream in the flood");
    frame_with(&mut second, "heard in the flood").await;
    assert_eq!(
        listener_pids(&db.pool).await,
        before,
        "the hub kept its LISTEN connection"
    );

    let closed = join_all(
        flood
            .into_iter()
            .map(|s| is_closed_within(s, Duration::from_secs(3))),
    )
    .await;
    let closed = closed.iter().filter(|c| **c).count();
    assert!(
        closed >= 400 - 256,
        "a process with 256 descriptors cannot hold 400 connections; only {closed} were closed"
    );

    // The clients are gone: everything works as before.
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    concurrent_gets(&url, &id.to_string()).await;
    assert!(
        db.store
            .worker()
            .finish(&lease, &Finish::Completed(json!({ "content": [] })), None)
            .await
            .expect("finish")
    );
    for s in [&mut stream, &mut second] {
        let mut last = Value::Null;
        while let Some(frame) = bounded("a frame", s.next()).await.expect("stream") {
            last = frame;
        }
        assert_eq!(last["result"]["resultType"], "complete", "{last}");
    }
    assert_eq!(listener_pids(&db.pool).await, before);
    assert!(
        replica.terminate(BOUND).await,
        "the replica exits cleanly on SIGTERM"
    );
}
