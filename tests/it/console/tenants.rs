//! The console's live lists look again when a task of their own tenant may have become
//! runnable, never because of another tenant's (a busy tenant must not make every
//! other tenant's open pages re-read, all at once); and a principal may open fewer
//! health streams, the costliest to keep, than streams of other kinds.

use std::time::Duration;

use mcp_tasks_store::Owner;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::live_lists::events_url;
use super::{Console, console_on};
use crate::harness::TestApp;
use crate::harness::fixtures::{self, create_task, new_task};
use crate::harness::http::sse::SseStream;

const PATIENCE: Duration = Duration::from_secs(30);

/// The next message of `events` within `within`; `None` when nothing came by then.
async fn message_within(events: &mut SseStream, within: Duration) -> Option<Value> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, events.next_event(PATIENCE))
            .await
            .ok()?
            .expect("the stream ended");
        if let Some(data) = event.data() {
            return Some(serde_json::from_str(&data).expect("JSON"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_of_one_tenant_wakes_only_that_tenants_lists() {
    // No workers: created tasks stay queued.
    let app = TestApp::builder().config(console_on).start().await;
    let store = &app.db.store;
    let bob = Owner::new("globex", "bob");
    let task = || new_task("slow_compute", json!({ "seconds": 300 }));
    let first = fixtures::create(store, &bob, task()).await.id.to_string();
    let browser = Console::new(app.url()).signed_as("globex", "bob");
    browser.open().await;
    let page = browser.get("/console/tasks").await;
    assert!(page.has(&first), "{page:?}");
    let mut live = SseStream::new(browser.send_get(&events_url(&page)).await);
    assert_eq!(live.status, 200);
    let rows = message_within(&mut live, PATIENCE)
        .await
        .expect("the page's row");
    assert!(rows["rows"].is_array(), "{rows}");
    // The stream's first look for new tasks (at once) is done; the next one is due on a
    // wake-up of its tenant, or after its backstop of 15 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A task of bob's that nothing announces (made in the store, no wake-up), then one
    // of another tenant's, announced to the workers as every new task is.
    let silent = fixtures::create(store, &bob, task()).await.id.to_string();
    let acme = app.client("alice").header("x-test-tenant", "acme");
    create_task(&acme, "slow_compute", json!({ "seconds": 300 })).await;
    let woken = message_within(&mut live, Duration::from_secs(5)).await;
    assert!(
        woken.is_none(),
        "another tenant's task made bob's list look again: {woken:?}"
    );

    // A task of bob's tenant does (and the look finds the silent one too).
    let bobs = app.client("bob").header("x-test-tenant", "globex");
    let (announced, _) = create_task(&bobs, "slow_compute", json!({ "seconds": 300 })).await;
    let notice = message_within(&mut live, PATIENCE)
        .await
        .expect("the new tasks announced");
    let ids: Vec<&str> = notice["ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        ids.contains(&announced.as_str()) && ids.contains(&silent.as_str()),
        "{notice}"
    );
    drop(live);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_may_open_fewer_health_streams_than_streams_of_other_kinds() {
    let app = TestApp::builder().config(console_on).start().await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let mut open = Vec::new();
    for n in 0..4 {
        let health = alice.send_get("/console/health/events").await;
        assert_eq!(health.status(), 200, "health stream {n}");
        open.push(health);
    }
    let fifth = alice.send_get("/console/health/events").await;
    assert_eq!(fifth.status(), 429, "a fifth health stream was let through");
    assert!(fifth.headers().get("retry-after").is_some());
    drop(fifth);
    // Other streams of hers, and another principal's health, are not held back.
    let inbox = alice.send_get("/console/inbox/events").await;
    assert_eq!(inbox.status(), 200);
    let bob = Console::new(app.url()).signed_as("default", "bob");
    bob.open().await;
    let theirs = bob.send_get("/console/health/events").await;
    assert_eq!(theirs.status(), 200);
    // A health stream closed makes room for another.
    drop(open.pop());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let again = alice.send_get("/console/health/events").await;
        if again.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed stream's place stayed taken"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((open, inbox, theirs));
    app.stop().await;
}
