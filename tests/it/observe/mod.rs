//! What an operator sees, from real processes: one trace from a replica's `tools/call` to
//! the worker's run of the task (exported over OTLP, HTTP/protobuf from the replica and
//! gRPC from the worker, to a receiver in this test), and `/metrics` values that move
//! as tasks are created, claimed and finished.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};

use crate::harness::http::{Request, client};
use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually, task_id};

mod scheduling_and_budget;

const PACK: &str = "conformance";

/// A span as the receiver got it.
#[derive(Debug, Clone)]
struct Seen {
    service: String,
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

impl Seen {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// Everything exported to either endpoint.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Seen>>>);

impl Received {
    fn spans(&self) -> Vec<Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn take(&self, request: ExportTraceServiceRequest) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for resource_spans in request.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    seen.push(Seen {
                        service: service.clone(),
                        name: span.name,
                        kind: span.kind,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        attributes: attributes(&span.attributes),
                    });
                }
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/HTTP receiver (`POST /v1/traces`, protobuf) on a free port.
async fn http_receiver(received: Received) -> SocketAddr {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|body: Bytes| async move {
            match ExportTraceServiceRequest::decode(body) {
                Ok(request) => {
                    received.take(request);
                    let answer = ExportTraceServiceResponse::default().encode_to_vec();
                    ([("content-type", "application/x-protobuf")], answer).into_response()
                }
                Err(e) => (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

use axum::response::IntoResponse;

/// An OTLP/gRPC receiver on a free port.
async fn grpc_receiver(received: Received) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(received))
            .serve_with_incoming(incoming),
    );
    addr
}

fn otlp_env(endpoint: SocketAddr, protocol: &str, service: &str) -> Vec<(String, String)> {
    vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
            format!("http://{endpoint}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), protocol.into()),
        ("OTEL_SERVICE_NAME".into(), service.into()),
        // Batches leave every 100 ms instead of every 5 s.
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
    ]
}

fn borrowed(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn slow_compute(id: u64) -> Request {
    Request::rpc(
        json!(id),
        "tools/call",
        json!({ "name": "slow_compute", "arguments": { "seconds": 0 } }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_spans_the_call_on_a_replica_and_the_run_on_a_worker() {
    let db = TestDb::new().await;
    let received = Received::default();
    let http_endpoint = http_receiver(received.clone()).await;
    let grpc_endpoint = grpc_receiver(received.clone()).await;
    let replica_env = otlp_env(http_endpoint, "http/protobuf", "replica-under-test");
    let worker_env = otlp_env(grpc_endpoint, "grpc", "worker-under-test");
    let replica = Proc::serve(&db.url, PACK, &borrowed(&replica_env)).await;

    // The caller's own span: the replica continues its trace.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let http = client();
    let created = slow_compute(1)
        .set("traceparent", format!("00-{trace}-{caller_span}-01"))
        .send(&http, &replica.url())
        .await;
    let id = task_id(&created.result("tools/call", &json!(1)));
    // The worker starts later, in another process: all it has is the stored context.
    let _worker = Proc::worker(&db.url, PACK, &borrowed(&worker_env)).await;
    eventually(Duration::from_secs(30), "the task to complete", || async {
        (db.count_tasks(&format!("id = '{id}' AND status = 'completed'"))
            .await
            == 1)
            .then_some(())
    })
    .await;

    let find = |spans: &[Seen], service: &str, name: &str| -> Option<Seen> {
        spans
            .iter()
            .find(|s| s.service == service && s.trace_id == trace && s.name == name)
            .cloned()
    };
    let (http_span, call, run, finish) = eventually(
        Duration::from_secs(30),
        "the spans of both processes",
        || {
            let spans = received.spans();
            async move {
                Some((
                    find(&spans, "replica-under-test", "POST /mcp")?,
                    find(&spans, "replica-under-test", "tools/call")?,
                    find(&spans, "worker-under-test", "task.run slow_compute")?,
                    find(&spans, "worker-under-test", "db.lease.finish")?,
                ))
            }
        },
    )
    .await;
    let spans = received.spans();

    // caller → HTTP server span → tools/call → (stored) → the worker's run → its SQL.
    assert_eq!(http_span.parent, caller_span, "{http_span:?}");
    assert_eq!(http_span.kind, 2, "a server span: {http_span:?}");
    assert_eq!(http_span.attr("http.request.method"), Some("POST"));
    assert_eq!(http_span.attr("http.response.status_code"), Some("200"));
    assert_eq!(call.parent, http_span.span_id, "{call:?}");
    assert_eq!(call.attr("rpc.system"), Some("jsonrpc"));
    assert_eq!(call.attr("rpc.method"), Some("tools/call"));
    assert_eq!(
        run.parent, call.span_id,
        "the run continues the call: {run:?}"
    );
    assert_eq!(run.kind, 5, "a consumer span: {run:?}");
    assert_eq!(run.attr("task_id"), Some(id.as_str()));
    assert_eq!(run.attr("tool"), Some("slow_compute"));
    assert_eq!(finish.parent, run.span_id, "{finish:?}");
    assert_eq!(finish.attr("db.system"), Some("postgresql"), "{finish:?}");
    assert_eq!(finish.kind, 3, "a client span: {finish:?}");
    let insert = find(&spans, "replica-under-test", "db.task.create")
        .expect("the replica's INSERT is in the trace");
    assert_eq!(insert.parent, call.span_id);
    assert_eq!(insert.attr("db.system"), Some("postgresql"));
    // No argument, answer or result reaches a span.
    for span in spans.iter().filter(|s| s.trace_id == trace) {
        for value in span.attributes.values() {
            assert!(!value.contains("Computed job"), "{span:?}");
        }
    }
}

/// The value of one series (`name{labels}` exactly as rendered) in a scrape.
fn series(scrape: &str, name: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

/// A scrape of `url`; `None` while nothing listens there yet.
async fn scrape(http: &reqwest::Client, url: &str) -> Option<String> {
    let response = http.get(url).send().await.ok()?;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Some(response.text().await.expect("scrape body"))
}

/// Waits until `check` holds for a scrape of `url`; the gauges read from the database
/// are refreshed at most every 2 s.
async fn wait_metrics(
    http: &reqwest::Client,
    url: &str,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    eventually(Duration::from_secs(30), what, || async {
        let text = scrape(http, url).await?;
        check(&text).then_some(text)
    })
    .await
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_when_tasks_are_created_claimed_and_finished() {
    let db = TestDb::new().await;
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let http = client();
    let replica_metrics = format!("http://{}/metrics", replica.addr.expect("addr"));

    let before = wait_metrics(&http, &replica_metrics, "an empty queue", |m| {
        series(m, "mcp_tasks_queue_depth") == Some(0.0)
    })
    .await;
    assert_eq!(
        series(&before, "mcp_tasks_tasks{status=\"working\"}"),
        Some(0.0)
    );
    assert_eq!(series(&before, "mcp_tasks_lease_lapses_total"), Some(0.0));

    // Created, with no worker yet: the queue fills.
    let mut ids = Vec::new();
    for n in 0..3 {
        let created = slow_compute(n).send(&http, &replica.url()).await;
        ids.push(task_id(&created.result("tools/call", &json!(n))));
    }
    let listen = Request::rpc(
        json!("listen"),
        "subscriptions/listen",
        json!({ "notifications": { "taskIds": [ids[0].clone()] } }),
    );
    let mut stream = listen.open_stream(&http, &replica.url()).await;
    let queued = wait_metrics(&http, &replica_metrics, "three queued tasks", |m| {
        series(m, "mcp_tasks_queue_depth") == Some(3.0)
            && series(m, "mcp_tasks_tasks{status=\"working\"}") == Some(3.0)
            && series(m, "mcp_tasks_listen_streams") == Some(1.0)
    })
    .await;
    assert_eq!(
        series(
            &queued,
            "mcp_tasks_http_requests_total{method=\"tools/call\",outcome=\"ok\"}"
        ),
        Some(3.0)
    );
    assert!(series(&queued, "mcp_tasks_queue_oldest_age_seconds").is_some_and(|age| age > 0.0));

    // A worker claims and finishes them.
    let worker_listen = free_port();
    let listen_env = worker_listen.to_string();
    let _worker = Proc::worker(&db.url, PACK, &[("MCP_TASKS_METRICS_LISTEN", &listen_env)]).await;
    let worker_metrics = format!("http://{worker_listen}/metrics");
    let worker = wait_metrics(&http, &worker_metrics, "three finished runs", |m| {
        series(
            m,
            "mcp_tasks_task_duration_seconds_count{tool=\"slow_compute\",outcome=\"completed\"}",
        ) == Some(3.0)
    })
    .await;
    assert_eq!(
        series(&worker, "mcp_tasks_pickup_delay_seconds_count"),
        Some(3.0)
    );
    assert_eq!(series(&worker, "mcp_tasks_reclaims_total"), Some(0.0));
    let pickup_sum = series(&worker, "mcp_tasks_pickup_delay_seconds_sum").expect("sum");
    assert!(
        pickup_sum > 0.0,
        "the tasks waited for the worker: {pickup_sum}"
    );

    // The listen stream saw its task finish; its replica measured the lag.
    loop {
        let Some(event) = stream.next_event(Duration::from_secs(30)).await else {
            break;
        };
        let Some(data) = event.data() else { continue };
        let message: Value = serde_json::from_str(&data).expect("JSON frame");
        if message.get("result").is_some() {
            break;
        }
    }
    let after = wait_metrics(&http, &replica_metrics, "an empty queue again", |m| {
        series(m, "mcp_tasks_queue_depth") == Some(0.0)
            && series(m, "mcp_tasks_tasks{status=\"working\"}") == Some(0.0)
            && series(m, "mcp_tasks_listen_streams") == Some(0.0)
    })
    .await;
    assert!(
        series(&after, "mcp_tasks_notification_lag_seconds_count").is_some_and(|n| n >= 1.0),
        "{after}"
    );
    // Finished tasks are the planner's estimate: there once the table is analyzed.
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .expect("ANALYZE");
    wait_metrics(
        &http,
        &replica_metrics,
        "the estimate of completed tasks",
        |m| {
            series(m, "mcp_tasks_tasks{status=\"completed\"}") == Some(3.0)
                && series(m, "mcp_tasks_tasks{status=\"failed\"}") == Some(0.0)
        },
    )
    .await;

    // Between them, the two scrapes show every metric of the contract.
    for (name, ..) in mcp_tasks_observe::names::ALL {
        assert!(
            after.contains(&format!("# TYPE {name} "))
                || worker.contains(&format!("# TYPE {name} ")),
            "{name} is in neither scrape:\n{after}\n{worker}"
        );
    }
}

/// A process whose log lines the test reads.
struct Logged {
    process: mcp_tasks_spawn::Process,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// Starts `mcp-tasks args…`; returns once it is ready.
    async fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let process = crate::harness::procs::mcp_tasks(args, env)
            .logs(mcp_tasks_spawn::Logs::To(Arc::new(move |_, line: &str| {
                eprintln!("{line}");
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(line.to_owned());
            })))
            .ready_within(Duration::from_secs(60))
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self { process, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first line, parsed, whose `message` is `message` and that names task `id`.
    async fn wait_line(&self, message: &str, id: &str) -> Value {
        eventually(Duration::from_secs(30), message, || async {
            self.lines().iter().find_map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                (value["message"] == message && value["task_id"] == id).then_some(value)
            })
        })
        .await
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_name_the_task_tool_and_trace_and_never_the_data() {
    let db = TestDb::new().await;
    let received = Received::default();
    let endpoint = http_receiver(received.clone()).await;
    let mut replica_env = otlp_env(endpoint, "http/protobuf", "replica-under-test");
    replica_env.push(("DATABASE_URL".into(), db.url.clone()));
    let replica = Logged::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools",
            PACK,
            "--log-format",
            "json",
        ],
        &borrowed(&replica_env),
    )
    .await;
    let addr = replica.process.listen().expect("a replica's address");
    // The worker exports nothing: its lines carry the trace id stored with the task.
    let worker = Logged::start(
        &["worker", "--tools", PACK, "--log-format", "json"],
        &[("DATABASE_URL", &db.url)],
    )
    .await;

    let trace = "0af7651916cd43dd8448eb211c80319c";
    let secret = "label-nobody-may-log-7d1e";
    let created = Request::rpc(
        json!(1),
        "tools/call",
        json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": secret } }),
    )
    .set("traceparent", format!("00-{trace}-b7ad6b7169203331-01"))
    .send(&client(), &format!("http://{addr}/mcp"))
    .await;
    let id = task_id(&created.result("tools/call", &json!(1)));

    let made = replica.wait_line("task created", &id).await;
    assert_eq!(made["level"], "INFO", "{made}");
    assert_eq!(made["target"], "mcp_tasks_server::tools_call", "{made}");
    assert_eq!(made["tool"], "slow_compute", "{made}");
    assert_eq!(made["method"], "tools/call", "{made}");
    assert_eq!(made["trace_id"], trace, "{made}");
    assert!(
        is_hex(made["span_id"].as_str().unwrap_or_default(), 16),
        "{made}"
    );
    let stamp = made["timestamp"].as_str().expect("timestamp");
    time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{stamp}: {e}"));

    let finished = worker.wait_line("finished", &id).await;
    assert_eq!(
        finished["target"], "mcp_tasks_worker::executor",
        "{finished}"
    );
    assert_eq!(finished["tool"], "slow_compute", "{finished}");
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(finished["trace_id"], trace, "{finished}");

    for line in replica.lines().iter().chain(worker.lines().iter()) {
        assert!(
            !line.contains(secret),
            "an argument or result was logged: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_leases_reclaims_and_crash_recovery_are_counted() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let db = TestDb::new().await;
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let http = client();
    // Short leases, so a lapse takes a second.
    let worker = |listen: &str| {
        let listen = listen.to_owned();
        let url = db.url.clone();
        async move {
            Proc::worker(
                &url,
                PACK,
                &[
                    ("MCP_TASKS_METRICS_LISTEN", &listen),
                    ("MCP_TASKS_LEASE_MS", "900"),
                    ("MCP_TASKS_POLL_MS", "100"),
                ],
            )
            .await
        }
    };
    let (listen_a, listen_b) = (free_port().to_string(), free_port().to_string());
    let worker_a = worker(&listen_a).await;
    let (metrics_a, metrics_b) = (
        format!("http://{listen_a}/metrics"),
        format!("http://{listen_b}/metrics"),
    );
    let created = Request::rpc(
        json!(1),
        "tools/call",
        json!({ "name": "slow_compute", "arguments": { "seconds": 60 } }),
    )
    .send(&http, &replica.url())
    .await;
    let id = task_id(&created.result("tools/call", &json!(1)));
    let running =
        |attempt: i32| format!("id = '{id}' AND lease_owner IS NOT NULL AND attempt = {attempt}");
    eventually(Duration::from_secs(30), "A's claim", || async {
        (db.count_tasks(&running(1)).await == 1).then_some(())
    })
    .await;

    // A stalls past its lease (stopped, as a long GC pause or a frozen VM would): B
    // reclaims the task, and A, woken, finds its lease gone and stops its run. A database
    // change alone would not do: a lapsed lease nobody claimed is taken back by its
    // holder's next heartbeat, by design.
    let worker_b = worker(&listen_b).await;
    wait_metrics(&http, &metrics_b, "B serving metrics", |m| {
        series(m, "mcp_tasks_reclaims_total") == Some(0.0)
    })
    .await;
    let a = Pid::from_raw(worker_a.pid());
    kill(a, Signal::SIGSTOP).expect("SIGSTOP A");
    let reclaimed = wait_metrics(&http, &metrics_b, "B's reclaim", |m| {
        series(m, "mcp_tasks_reclaims_total") == Some(1.0)
    })
    .await;
    assert_eq!(
        series(&reclaimed, "mcp_tasks_crash_recovery_total"),
        Some(0.0)
    );
    kill(a, Signal::SIGCONT).expect("SIGCONT A");
    wait_metrics(&http, &metrics_a, "A's lapse", |m| {
        series(m, "mcp_tasks_lease_lapses_total") == Some(1.0)
    })
    .await;
    eventually(Duration::from_secs(30), "B's run", || async {
        (db.count_tasks(&running(2)).await == 1).then_some(())
    })
    .await;

    // B dies with no attempt left: A's maintenance fails the task with CRASH_RECOVERY
    // once B's lease lapses.
    let last = format!("UPDATE tasks SET max_attempts = attempt WHERE id = '{id}'");
    sqlx::query(sqlx::AssertSqlSafe(last))
        .execute(&db.pool)
        .await
        .expect("no attempt left");
    worker_b.kill().await;
    let recovered = wait_metrics(&http, &metrics_a, "a crash recovery", |m| {
        series(m, "mcp_tasks_crash_recovery_total") == Some(1.0)
    })
    .await;
    assert_eq!(series(&recovered, "mcp_tasks_reclaims_total"), Some(0.0));
    assert_eq!(
        db.count_tasks(&format!("id = '{id}' AND status = 'failed'"))
            .await,
        1
    );
}

/// The HTTP status of `GET url`.
async fn get_status(http: &reqwest::Client, url: &str) -> u16 {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_metrics_listener_the_replica_port_serves_no_metrics() {
    let db = TestDb::new().await;
    let http = client();
    // `serve`, and `dev` (replica and worker in one process, one registry).
    for command in ["serve", "dev"] {
        let metrics_at = free_port();
        let listen = metrics_at.to_string();
        let replica = Proc::serve_args(
            &db.url,
            &[command, "--listen", "127.0.0.1:0", "--tools", PACK],
            &[("MCP_TASKS_METRICS_LISTEN", &listen)],
        )
        .await;
        let addr = replica.addr.expect("addr");
        let metrics = format!("http://{metrics_at}/metrics");

        // The port clients reach: no metrics, the rest as always.
        assert_eq!(
            get_status(&http, &format!("http://{addr}/metrics")).await,
            404
        );
        assert_eq!(
            get_status(&http, &format!("http://{addr}/healthz")).await,
            200
        );
        // The metrics listener: the replica's document (its listen streams counted),
        // and nothing else.
        assert_eq!(
            get_status(&http, &format!("http://{metrics_at}/mcp")).await,
            404
        );
        // Long enough that the stream stays open in `dev` too, where a worker runs it.
        let created = Request::rpc(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 60 } }),
        )
        .send(&http, &replica.url())
        .await;
        let id = task_id(&created.result("tools/call", &json!(1)));
        let listen = Request::rpc(
            json!("listen"),
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": [id.clone()] } }),
        );
        let stream = listen.open_stream(&http, &replica.url()).await;
        let scraped = wait_metrics(&http, &metrics, "the replica's metrics", |m| {
            series(m, "mcp_tasks_listen_streams") == Some(1.0)
                && series(
                    m,
                    "mcp_tasks_http_requests_total{method=\"tools/call\",outcome=\"ok\"}",
                ) == Some(1.0)
        })
        .await;
        assert!(
            series(&scraped, "mcp_tasks_queue_depth").is_some(),
            "{scraped}"
        );
        drop(stream);
        let cancel = Request::rpc(json!(2), "tasks/cancel", json!({ "taskId": id }))
            .send(&http, &replica.url())
            .await;
        cancel.result("tasks/cancel", &json!(2));
        assert!(
            replica.terminate(Duration::from_secs(15)).await,
            "{command}: no clean exit within 15 s of SIGTERM"
        );
    }
}
