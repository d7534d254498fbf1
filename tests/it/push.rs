//! `subscriptions/listen` over real HTTP and PostgreSQL: the acknowledgement, snapshots
//! equal to `tasks/get`, fan-out across replicas, recovery from a killed LISTEN
//! connection, graceful ends (also when the caller's token expires, and at the stream's
//! maximum lifetime), limits, slow subscribers, and the event stream's framing.
//!
//! Most tests play the worker themselves through the store (claim, status message,
//! finish), so every change happens exactly when the test makes it.

use std::time::Duration;

use mcp_tasks_client::{Client, Subscription};
use mcp_tasks_store::{Finish, Owner, Store, TaskId};
use serde_json::{Value, json};

use crate::harness::fixtures::{self, http_owner, leased, new_task};
use crate::harness::http::Request;
use crate::harness::jwt::{self, Jwt, SECRET};
use crate::harness::spec::SUBSCRIPTION_ID;
use crate::harness::{Replica, TestApp, TestDb, Worker, registry, server_config};

const WAIT: Duration = Duration::from_secs(15);

fn alice() -> Owner {
    http_owner("alice")
}

async fn create(store: &Store, owner: &Owner) -> TaskId {
    let task = new_task("slow_compute", json!({ "seconds": 1 }));
    fixtures::create(store, owner, task).await.id
}

/// The next frame, failing the test if none comes within `WAIT`.
async fn next(sub: &mut Subscription) -> Value {
    tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("no frame within the wait")
        .expect("stream error")
        .expect("the stream ended early")
}

/// What `tasks/get` shows now, as a `notifications/tasks` params object would carry it.
async fn get_as_params(client: &Client, id: TaskId, sub_id: &Value) -> Value {
    let mut task = client.get_task(&id.to_string()).await.expect("tasks/get");
    let obj = task.as_object_mut().expect("object");
    obj.remove("resultType");
    obj.insert(
        "_meta".into(),
        json!({ "io.modelcontextprotocol/subscriptionId": sub_id }),
    );
    task
}

fn assert_task_frame(frame: &Value, sub_id: &Value) {
    assert_eq!(frame["jsonrpc"], "2.0", "{frame}");
    assert_eq!(frame["method"], "notifications/tasks", "{frame}");
    assert_eq!(
        frame["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *sub_id,
        "{frame}"
    );
    assert!(
        frame.get("id").is_none(),
        "a notification has no id: {frame}"
    );
    assert!(frame["params"].get("resultType").is_none(), "{frame}");
}

/// The frame after a change: it must equal `tasks/get` at that moment.
async fn expect_snapshot(
    sub: &mut Subscription,
    client: &Client,
    id: TaskId,
    sub_id: &Value,
) -> Value {
    let frame = next(sub).await;
    assert_task_frame(&frame, sub_id);
    assert_eq!(frame["params"], get_as_params(client, id, sub_id).await);
    frame
}

async fn expect_end(sub: &mut Subscription, sub_id: &Value) {
    let end = next(sub).await;
    assert_eq!(end["id"], *sub_id, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *sub_id,
        "{end}"
    );
    let after = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("the stream did not close after its result")
        .expect("stream error");
    assert!(
        after.is_none(),
        "nothing may follow the listen result: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgement_comes_first_and_lists_only_the_callers_tasks() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let client = replica.client("alice");
    let mine = [
        create(&db.store, &alice()).await,
        create(&db.store, &alice()).await,
    ];
    let bobs = create(&db.store, &Owner::new("default", "bob")).await;
    let other_tenant = create(&db.store, &Owner::new("elsewhere", "alice")).await;
    let unknown = TaskId::random();

    for sub_id in [json!("listen-1"), json!(42)] {
        let mut sub = client
            .listen(
                sub_id.clone(),
                json!({
                    "taskIds": [
                        mine[0].to_string(), bobs.to_string(), unknown.to_string(),
                        "not-a-task", other_tenant.to_string(), mine[1].to_string(),
                        mine[0].to_string()
                    ],
                    "toolsListChanged": true,
                    "resourcesListChanged": true,
                }),
            )
            .await
            .expect("listen");
        let headers = sub.headers().clone();
        assert!(
            headers["content-type"]
                .to_str()
                .expect("ascii")
                .starts_with("text/event-stream"),
            "{headers:?}"
        );
        assert_eq!(headers["cache-control"], "no-cache");
        assert_eq!(headers["x-accel-buffering"], "no");

        let ack = next(&mut sub).await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert!(ack.get("id").is_none());
        // Same JSON type as the request id: "42" would be wrong for 42.
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            sub_id
        );
        // Only what the server agreed to: the caller's own tasks, once each, and no
        // list-changed kinds (this server's lists never change).
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "taskIds": [mine[0].to_string(), mine[1].to_string()] }),
            "{ack}"
        );

        // Then the current snapshot of each accepted task, equal to tasks/get.
        let mut seen = Vec::new();
        for _ in 0..2 {
            let frame = next(&mut sub).await;
            assert_task_frame(&frame, &sub_id);
            let id =
                TaskId::parse(frame["params"]["taskId"].as_str().expect("taskId")).expect("id");
            assert_eq!(frame["params"], get_as_params(&client, id, &sub_id).await);
            seen.push(id);
        }
        seen.sort();
        let mut expected = mine.to_vec();
        expected.sort();
        assert_eq!(seen, expected);
    }
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_is_a_frame_equal_to_tasks_get_and_the_stream_ends_when_terminal() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let client = replica.client("alice");
    let store = &db.store;
    let id = create(store, &alice()).await;
    let sub_id = json!("s");
    let mut sub = client
        .listen(sub_id.clone(), json!({ "taskIds": [id.to_string()] }))
        .await
        .expect("listen");
    assert_eq!(
        next(&mut sub).await["method"],
        "notifications/subscriptions/acknowledged"
    );
    let first = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(first["params"]["status"], "working");
    assert_eq!(first["params"]["statusMessage"], "Queued");

    let lease = leased(store, id).await;
    let running = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(running["params"]["statusMessage"], "Running");

    assert!(
        store
            .worker()
            .set_status_message(&lease, "halfway")
            .await
            .expect("status")
    );
    let halfway = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(halfway["params"]["statusMessage"], "halfway");

    let requests = json!({ "go": { "method": "elicitation/create", "params": {
        "mode": "form", "message": "Go on?",
        "requestedSchema": { "type": "object", "properties": { "ok": { "type": "boolean" } } }
    }}});
    let requests = requests.as_object().expect("object").clone();
    store
        .worker()
        .request_input(&lease, &requests, Some("Waiting"), None)
        .await
        .expect("request input");
    let waiting = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(waiting["params"]["status"], "input_required");
    assert_eq!(waiting["params"]["inputRequests"], Value::Object(requests));

    client
        .update_task(
            &id.to_string(),
            json!({ "go": { "action": "accept", "content": { "ok": true } } }),
        )
        .await
        .expect("update");
    let resumed = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(resumed["params"]["status"], "working");

    let lease = leased(store, id).await;
    expect_snapshot(&mut sub, &client, id, &sub_id).await;
    let result = json!({ "content": [{ "type": "text", "text": "done" }], "isError": false });
    assert!(
        store
            .worker()
            .finish(
                &lease,
                &Finish::Completed(result.clone()),
                Some("Completed")
            )
            .await
            .expect("finish")
    );
    let done = expect_snapshot(&mut sub, &client, id, &sub_id).await;
    assert_eq!(done["params"]["status"], "completed");
    assert_eq!(done["params"]["result"], result);
    // Never anything but task notifications and the end.
    expect_end(&mut sub, &sub_id).await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_one_replica_sees_changes_made_through_another_and_by_a_worker() {
    let db = TestDb::new().await;
    let a = Replica::start(&db.store, registry("conformance")).await;
    let b = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));
    let through_a = a.client("alice");
    let through_b = b.client("alice");

    let quick = through_a
        .call_tool("slow_compute", json!({ "seconds": 1 }))
        .await
        .expect("create");
    let slow = through_a
        .call_tool("slow_compute", json!({ "seconds": 60 }))
        .await
        .expect("create");
    let quick_id = quick["taskId"].as_str().expect("taskId").to_owned();
    let slow_id = slow["taskId"].as_str().expect("taskId").to_owned();

    let sub_id = json!(7);
    let mut sub = through_b
        .listen(sub_id.clone(), json!({ "taskIds": [quick_id, slow_id] }))
        .await
        .expect("listen on B");
    assert_eq!(
        next(&mut sub).await["params"]["notifications"]["taskIds"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Wait until the slow task is running, then cancel it through replica A.
    let mut cancelled_via_a = false;
    let mut final_status = std::collections::HashMap::new();
    while final_status.len() < 2 {
        let frame = next(&mut sub).await;
        if frame.get("result").is_some() {
            panic!("the stream ended before both tasks were terminal: {frame}");
        }
        assert_task_frame(&frame, &sub_id);
        let params = &frame["params"];
        let id = params["taskId"].as_str().expect("taskId").to_owned();
        let status = params["status"].as_str().expect("status").to_owned();
        if id == slow_id
            && !cancelled_via_a
            && params["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Computing"))
        {
            through_a.cancel_task(&slow_id).await.expect("cancel via A");
            cancelled_via_a = true;
        }
        if matches!(status.as_str(), "completed" | "cancelled" | "failed") {
            final_status.insert(id, status);
        }
    }
    assert_eq!(
        final_status[&quick_id], "completed",
        "the worker's result reached B"
    );
    assert_eq!(
        final_status[&slow_id], "cancelled",
        "A's cancellation reached B"
    );
    expect_end(&mut sub, &sub_id).await;

    worker.stop().await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listen_connection_costs_no_final_state() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let client = replica.client("alice");
    let store = &db.store;
    let id = create(store, &alice()).await;
    let sub_id = json!("k");
    let mut sub = client
        .listen(sub_id.clone(), json!({ "taskIds": [id.to_string()] }))
        .await
        .expect("listen");
    next(&mut sub).await; // ack
    next(&mut sub).await; // snapshot

    // Kill the replica's LISTEN backend, then change the task while it reconnects. The
    // hub opens that connection on its own; on a loaded machine it may not be up yet.
    let killed: Vec<bool> =
        crate::harness::eventually(WAIT, "the replica's listener backend, to kill", || async {
            let killed: Vec<bool> = sqlx::query_scalar(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = 'mcp-tasks-listen' AND datname = current_database()",
            )
            .fetch_all(&db.pool)
            .await
            .expect("terminate");
            (!killed.is_empty()).then_some(killed)
        })
        .await;
    assert!(killed.iter().all(|k| *k), "the listener backend survived");

    let lease = leased(store, id).await;
    let result = json!({ "content": [{ "type": "text", "text": "survived" }] });
    assert!(
        store
            .worker()
            .finish(&lease, &Finish::Completed(result), None)
            .await
            .expect("finish")
    );

    // Whatever frames come (the reconnect may or may not see "Running"), the last task
    // frame is the final state, and it equals tasks/get.
    let mut last = Value::Null;
    loop {
        let frame = next(&mut sub).await;
        if frame.get("result").is_some() {
            assert_eq!(frame["id"], sub_id);
            break;
        }
        assert_task_frame(&frame, &sub_id);
        last = frame;
    }
    assert_eq!(last["params"]["status"], "completed", "{last}");
    assert_eq!(last["params"], get_as_params(&client, id, &sub_id).await);

    // And a new listener backend took the old one's place.
    crate::harness::eventually(WAIT, "a new listener backend", || async {
        let listeners: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = 'mcp-tasks-listen' AND datname = current_database()",
        )
        .fetch_one(&db.pool)
        .await
        .expect("count");
        (listeners >= 1).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_notifications_need_the_tasks_extension_and_limits_are_clear() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_listen_tasks = 3;
    config.max_streams_per_principal = 2;
    let keys = mcp_tasks_server::StateKeys::parse(&"cd".repeat(32)).expect("key");
    let replica = Replica::start_with(&db.store, registry("conformance"), config, keys).await;
    let id = create(&db.store, &alice()).await;

    // Without the extension, asking for task notifications is -32021 (before any lookup).
    let plain = Client::new(&replica.url, json!({})).header("x-test-principal", "alice");
    let reply = plain
        .send(
            json!(1),
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": [id.to_string()] } }),
        )
        .await
        .expect("send");
    assert_eq!(reply.status, 400);
    let body = reply.body.expect("body");
    assert_eq!(body["id"], 1);
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );

    // Without task ids it is allowed: nothing is agreed to, so the stream ends at once.
    let mut sub = plain
        .listen(json!("nothing"), json!({ "toolsListChanged": true }))
        .await
        .expect("listen");
    let ack = next(&mut sub).await;
    assert_eq!(ack["params"]["notifications"], json!({}));
    expect_end(&mut sub, &json!("nothing")).await;

    // notifications missing or malformed.
    let client = replica.client("alice");
    for params in [
        json!({}),
        json!({ "notifications": [] }),
        json!({ "notifications": { "taskIds": "x" } }),
    ] {
        let reply = client
            .send(json!(2), "subscriptions/listen", params.clone())
            .await
            .expect("send");
        assert_eq!(
            reply.body.expect("body")["error"]["code"],
            -32602,
            "{params}"
        );
    }

    // Too many ids in one listen.
    let many: Vec<String> = (0..4).map(|_| TaskId::random().to_string()).collect();
    let reply = client
        .send(
            json!(3),
            "subscriptions/listen",
            json!({ "notifications": { "taskIds": many } }),
        )
        .await
        .expect("send");
    let body = reply.body.expect("body");
    assert_eq!(body["error"]["code"], -32602);
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains('3'),
        "{body}"
    );

    // Too many streams for one principal: the third is refused with 429 and Retry-After;
    // another principal is not affected; closing one makes room again.
    let keep = json!({ "taskIds": [id.to_string()] });
    let first = client
        .listen(json!("a"), keep.clone())
        .await
        .expect("first");
    let _second = client
        .listen(json!("b"), keep.clone())
        .await
        .expect("second");
    let reply = client
        .send(
            json!("c"),
            "subscriptions/listen",
            json!({ "notifications": keep }),
        )
        .await
        .expect("send");
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "1");
    let body = reply.body.expect("body");
    assert_eq!(body["id"], "c");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("limit 2"),
        "{body}"
    );
    let _bobs = replica
        .client("bob")
        .listen(json!("d"), json!({ "taskIds": [] }))
        .await
        .expect("another principal is not limited by alice's streams");
    drop(first);
    crate::harness::eventually(WAIT, "room for a new stream after one closed", || async {
        client.listen(json!("e"), keep.clone()).await.ok()
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_a_replica_ends_its_streams_with_the_listen_result() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let id = create(&db.store, &alice()).await;
    let mut sub = replica
        .client("alice")
        .listen(json!(99), json!({ "taskIds": [id.to_string()] }))
        .await
        .expect("listen");
    next(&mut sub).await; // ack
    next(&mut sub).await; // snapshot
    let stopping = tokio::spawn(replica.stop());
    expect_end(&mut sub, &json!(99)).await;
    tokio::time::timeout(WAIT, stopping)
        .await
        .expect("the replica did not stop after its streams ended")
        .expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_gets_the_latest_snapshot_not_a_backlog() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let client = replica.client("alice");
    let store = &db.store;
    let id = create(store, &alice()).await;
    let lease = leased(store, id).await;
    let sub_id = json!("slow");
    let mut sub = client
        .listen(sub_id.clone(), json!({ "taskIds": [id.to_string()] }))
        .await
        .expect("listen");
    next(&mut sub).await; // ack

    // Far more data than socket buffers hold, while the client reads nothing.
    let changes = 2000;
    let padding = "x".repeat(8 * 1024);
    for i in 0..changes {
        let message = format!("{i:05} {padding}");
        assert!(
            store
                .worker()
                .set_status_message(&lease, &message)
                .await
                .expect("status")
        );
    }
    assert!(
        store
            .worker()
            .finish(
                &lease,
                &Finish::Completed(json!({ "content": [] })),
                Some("Completed")
            )
            .await
            .expect("finish")
    );

    let mut frames = 0;
    let mut last = Value::Null;
    loop {
        let frame = next(&mut sub).await;
        if frame.get("result").is_some() {
            break;
        }
        frames += 1;
        last = frame;
    }
    assert!(
        frames < changes / 2,
        "a slow subscriber should get coalesced snapshots, not every one of {changes} changes (got {frames})"
    );
    assert_eq!(last["params"]["status"], "completed");
    assert_eq!(last["params"], get_as_params(&client, id, &sub_id).await);
    replica.stop().await;
}

/// Read raw, a listen stream is plain SSE: data-only events of one JSON-RPC message each,
/// keep-alives as comments, and nothing after the listen result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listen_stream_is_plain_sse_with_one_message_per_event() {
    let app = TestApp::start(0).await;
    let store = &app.db.store;
    let id = create(store, &alice()).await;
    let mut stream = Request::rpc(
        json!("raw"),
        "subscriptions/listen",
        json!({ "notifications": { "taskIds": [id.to_string()] } }),
    )
    .principal("alice")
    .open_stream(&app.http, app.url())
    .await;
    assert_eq!(stream.status, 200);
    let content_type = stream.headers["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    // The task ends, so the stream does.
    let lease = leased(store, id).await;
    let result = json!({ "content": [{ "type": "text", "text": "raw" }], "isError": false });
    assert!(
        store
            .worker()
            .finish(&lease, &Finish::Completed(result), Some("Completed"))
            .await
            .expect("finish")
    );

    let mut messages = Vec::new();
    while let Some(event) = stream.next_event(WAIT).await {
        if event.is_comment() {
            continue;
        }
        assert!(
            event.fields.iter().all(|(field, _)| field == "data"),
            "only data fields: {event:?}"
        );
        let data = event.data().expect("data");
        let message: Value = serde_json::from_str(&data)
            .unwrap_or_else(|e| panic!("an event is not one JSON value ({e}): {data:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        messages.push(message);
    }
    let (ack, rest) = messages.split_first().expect("an acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let (end, frames) = rest.split_last().expect("a listen result");
    assert_eq!(end["id"], "raw", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION_ID], "raw", "{end}");
    assert!(
        frames.iter().all(|f| f["method"] == "notifications/tasks"),
        "{frames:?}"
    );
    let last = frames.last().expect("at least the final snapshot");
    assert_eq!(last["params"]["status"], "completed", "{last}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_ends_with_its_result_when_its_token_expires() {
    let app = TestApp::builder().jwt(Jwt::hs256()).start().await;
    let owner = Owner::new("acme", "alice");
    let id = create(&app.db.store, &owner).await;
    let claims = jwt::claims(app.url(), "alice", "acme");
    let short = jwt::with(claims.clone(), "exp", Some(json!(jwt::now() + 3)));
    let client = |claims: &Value| {
        app.replica()
            .bearer_client(jwt::hs256(SECRET.as_bytes(), claims))
    };
    let listen = json!({ "taskIds": [id.to_string()] });
    let mut expiring = client(&short)
        .listen(json!("short"), listen.clone())
        .await
        .expect("listen");
    let long = client(&claims);
    let mut lasting = long.listen(json!("long"), listen).await.expect("listen");
    for sub in [&mut expiring, &mut lasting] {
        next(sub).await; // ack
        next(sub).await; // snapshot
    }
    // The task is still working: only the token's expiry ends the stream.
    expect_end(&mut expiring, &json!("short")).await;
    // The other token's stream goes on and sees the next change.
    long.cancel_task(&id.to_string())
        .await
        .expect("tasks/cancel");
    let cancelled = next(&mut lasting).await;
    assert_eq!(cancelled["params"]["status"], "cancelled", "{cancelled}");
    expect_end(&mut lasting, &json!("long")).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_ends_with_its_result_at_its_maximum_lifetime() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_stream_lifetime = Duration::from_secs(2);
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        config,
        crate::harness::replica::state_keys(),
    )
    .await;
    let id = create(&db.store, &alice()).await;
    let client = replica.client("alice");
    for round in 0..2 {
        let sub_id = json!(round);
        let mut sub = client
            .listen(sub_id.clone(), json!({ "taskIds": [id.to_string()] }))
            .await
            .expect("listen");
        let ack = next(&mut sub).await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        next(&mut sub).await; // snapshot
        // The task never changes: the lifetime ends the stream, and listening again
        // (what a client does then) is served alike.
        expect_end(&mut sub, &sub_id).await;
    }
    replica.stop().await;
}
