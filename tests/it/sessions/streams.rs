//! A 2025-era call answered on a stream is a stream like any other: it counts against
//! the principal's open streams on the replica (as listen streams do), ends with an
//! error response once its session is ended (`DELETE`, on any replica), and at the
//! replica's maximum stream lifetime.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Frames, Session};
use crate::harness::replica::state_keys;
use crate::harness::{Replica, TestDb, registry, server_config};

fn long_call(id: i64, label: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "slow_compute",
            "arguments": { "seconds": 300, "label": label },
            "_meta": { "progressToken": "p" },
        },
    })
}

async fn tasks(db: &TestDb) -> i64 {
    let mut conn = db.sql().await;
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

/// A call's stream, once it has said the task is under way.
async fn streaming(s: &Session, id: i64, label: &str) -> Frames {
    let mut stream = Frames::new(s.raw(&long_call(id, label)).await);
    stream.until("notifications/progress").await;
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_streams_count_against_the_principals_open_streams() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_streams_per_principal = 2;
    // No worker: the calls' tasks stay working, so their streams stay open.
    let replica =
        Replica::start_with(&db.store, registry("conformance"), config, state_keys()).await;
    let s = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    let first = streaming(&s, 1, "one").await;
    let second = streaming(&s, 2, "two").await;
    let third = s.send(&long_call(3, "three")).await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "a third stream was let through: {}",
        third.body
    );
    assert_eq!(third.body["error"]["code"], -32600, "{}", third.body);
    assert_eq!(tasks(&db).await, 2, "no task for the refused call");
    // Listen streams share the limit.
    let listen = replica
        .client("alice")
        .listen(json!("l"), json!({ "taskIds": [] }))
        .await;
    assert!(listen.is_err(), "a listen stream past the limit");
    // Another principal's are its own.
    let bob = Session::open(&replica.url, "2025-06-18", json!({}), "bob").await;
    let theirs = streaming(&bob, 1, "bob's").await;
    // A closed stream makes room.
    drop(first);
    let mut room = None;
    for attempt in 0..100 {
        let again = s.raw(&long_call(10 + attempt, "again")).await;
        if again.status() == StatusCode::OK {
            room = Some(Frames::new(again));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(room.is_some(), "the closed stream's place stayed taken");
    drop((second, theirs, room));
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_session_on_another_replica_ends_its_streams() {
    let db = TestDb::new().await;
    let a = Replica::start(&db.store, registry("conformance")).await;
    let b = Replica::start(&db.store, registry("conformance")).await;
    let s = Session::open(&a.url, "2025-06-18", json!({}), "alice").await;
    let mut stream = streaming(&s, 1, "ended").await;
    let other = Session::open(&a.url, "2025-06-18", json!({}), "alice").await;
    let mut kept = streaming(&other, 1, "kept").await;

    assert_eq!(s.at(&b.url).delete().await, StatusCode::NO_CONTENT);
    let response = stream.response().await;
    assert_eq!(response["id"], 1, "{response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("session was ended"), "{response}");
    // The other session's call goes on.
    let quiet = tokio::time::timeout(Duration::from_secs(3), kept.next()).await;
    assert!(
        quiet.is_err(),
        "the other session's stream ended: {quiet:?}"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stream_ends_at_its_maximum_lifetime() {
    let db = TestDb::new().await;
    let mut config = server_config();
    config.max_stream_lifetime = Duration::from_secs(2);
    let replica =
        Replica::start_with(&db.store, registry("conformance"), config, state_keys()).await;
    let s = Session::open(&replica.url, "2025-06-18", json!({}), "alice").await;
    let mut stream = streaming(&s, 1, "long").await;
    let response = stream.response().await;
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("maximum stream lifetime"), "{response}");
    replica.stop().await;
}
