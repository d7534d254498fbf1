//! The live parts of the tasks list, the inbox and the health page over HTTP: each
//! stream's events as the page's script reads them. A row's status change arrives on the
//! list's stream, a new task is announced there, a task that starts waiting for input
//! arrives on the inbox's and leaves once answered or cancelled, the health figures move
//! when a task is created; and no stream ever carries a task its viewer may not see (an
//! admin's: its own tenant's only).

use std::time::Duration;

use mcp_tasks_server::{AdminClaim, ConsoleConfig};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Console, Page, console_on, text_of};
use crate::harness::TestApp;
use crate::harness::fixtures::{create_task, task_in_status};
use crate::harness::http::sse::SseStream;
use crate::harness::jwt::{self, Jwt, SECRET};

/// How long a test waits for what it expects (a generous deadline, not a measurement).
const PATIENCE: Duration = Duration::from_secs(90);

/// One live stream of a page, and every message it has carried so far.
struct Live {
    events: SseStream,
    seen: Vec<Value>,
}

impl Live {
    async fn open(console: &Console, path: &str) -> Self {
        let events = SseStream::new(console.send_get(path).await);
        assert_eq!(events.status, 200, "{path}");
        assert_eq!(
            events.headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"text/event-stream"[..]),
            "{path}"
        );
        Self {
            events,
            seen: Vec::new(),
        }
    }

    /// The first message (from now on) that `done` accepts.
    async fn until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{what}: not among {:#?}", self.seen);
            let Some(event) = self.events.next_event(left).await else {
                panic!("the stream ended before {what}: {:#?}", self.seen);
            };
            if let Some(data) = event.data() {
                let message: Value = serde_json::from_str(&data).expect("JSON data");
                self.seen.push(message.clone());
                if done(&message) {
                    return message;
                }
            }
        }
    }

    /// Fails if any message so far mentioned one of `ids`.
    fn never_carried(&self, ids: &[&str]) {
        for message in &self.seen {
            let text = message.to_string();
            for id in ids {
                assert!(!text.contains(id), "{id} was carried: {text}");
            }
        }
    }
}

/// The list stream's update of row `id`, if `message` has one.
fn row<'a>(message: &'a Value, id: &str) -> Option<&'a Value> {
    message["rows"]
        .as_array()?
        .iter()
        .find(|r| r["id"].as_str() == Some(id))
}

/// The ids a message lists (the new tasks of a list stream, the inbox's tasks).
fn ids(message: &Value) -> Vec<String> {
    message["ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Where the tasks page's script connects to.
pub(super) fn events_url(page: &Page) -> String {
    let at = page.body.find(r#"id="new-tasks""#).expect("the notice");
    let attr = r#"data-events=""#;
    let start = at + page.body[at..].find(attr).expect("data-events") + attr.len();
    let len = page.body[start..].find('"').expect("end of the attribute");
    page.body[start..start + len].replace("&amp;", "&")
}

/// Every inline script of `page`, and whether the page's Content-Security-Policy allows
/// it (a browser would refuse to run any other).
fn scripts_allowed(page: &Page) -> Vec<(String, bool)> {
    use base64::Engine;
    use sha2::Digest;
    let policy = page
        .headers
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    page.body
        .split("<script>")
        .skip(1)
        .filter_map(|rest| rest.split("</script>").next())
        .map(|script| {
            let hash = base64::engine::general_purpose::STANDARD
                .encode(sha2::Sha256::digest(script.as_bytes()));
            let allowed = policy.contains(&format!("'sha256-{hash}'"));
            (script.chars().take(60).collect(), allowed)
        })
        .collect()
}

fn confirm() -> Value {
    json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_stream_follows_its_rows_and_tells_of_new_tasks() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let waiting = task_in_status(
        &api,
        "confirm_delete",
        json!({ "filename": "a" }),
        "input_required",
    )
    .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.get("/console/tasks").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.has(&format!(r#"data-task-id="{waiting}""#)));
    let scripts = scripts_allowed(&page);
    assert!(
        scripts.len() == 1 && scripts.iter().all(|(_, ok)| *ok),
        "{scripts:?}"
    );
    let url = events_url(&page);
    assert!(url.starts_with("/console/tasks/events?top="), "{url}");
    let mut live = Live::open(&alice, &url).await;

    // The page's rows first, as they are now.
    let first = live
        .until("the page's row", |m| row(m, &waiting).is_some())
        .await;
    assert_eq!(
        row(&first, &waiting).expect("row")["status"],
        "input_required"
    );

    // A change of status arrives in place.
    api.update_task(&waiting, confirm())
        .await
        .expect("tasks/update");
    let done = live
        .until("the row completed", |m| {
            row(m, &waiting).is_some_and(|r| r["status"] == "completed")
        })
        .await;
    let done = row(&done, &waiting).expect("row");
    assert!(
        done["attempt"]
            .as_str()
            .is_some_and(|a| a.starts_with("1 of ")),
        "{done}"
    );

    // New tasks are announced: another principal's never, the viewer's own.
    let (bobs, _) = create_task(
        &app.client("bob"),
        "confirm_delete",
        json!({ "filename": "b" }),
    )
    .await;
    let (new, _) = create_task(&api, "confirm_delete", json!({ "filename": "c" })).await;
    let notice = live.until("the new task", |m| ids(m).contains(&new)).await;
    assert_eq!(notice["notice"], "1 new task", "{notice}");
    assert_eq!(ids(&notice), vec![new.clone()]);
    live.never_carried(&[&bobs]);

    // Without a script a reload shows the same.
    let reload = alice.get("/console/tasks").await;
    assert!(reload.has(&format!(r#"data-task-id="{new}""#)));
    assert!(!reload.has(&bobs));
    drop(live);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_stream_shows_what_starts_waiting_and_drops_what_was_answered() {
    let app = TestApp::builder()
        .workers(1)
        .config(console_on)
        .start()
        .await;
    let api = app.client("alice");
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.get("/console/inbox").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.headers.get("refresh").is_none(), "live, not reloaded");
    assert!(page.has(r#"data-events="/console/inbox/events""#));
    let scripts = scripts_allowed(&page);
    assert!(
        scripts.len() == 1 && scripts.iter().all(|(_, ok)| *ok),
        "{scripts:?}"
    );
    let mut live = Live::open(&alice, "/console/inbox/events").await;
    let first = live
        .until("the inbox as it is", |m| m["html"].is_string())
        .await;
    assert!(ids(&first).is_empty(), "{first}");

    // Another principal's waiting task is not in it.
    let bobs = task_in_status(
        &app.client("bob"),
        "confirm_delete",
        json!({ "filename": "b" }),
        "input_required",
    )
    .await;
    let (a1, _) = create_task(&api, "confirm_delete", json!({ "filename": "a1" })).await;
    let one = live
        .until("the first task waiting", |m| ids(m).contains(&a1))
        .await;
    assert_eq!(ids(&one), vec![a1.clone()]);
    assert!(
        one["html"]
            .as_str()
            .is_some_and(|h| h.contains("confirm_delete"))
    );
    let (a2, _) = create_task(&api, "confirm_delete", json!({ "filename": "a2" })).await;
    live.until("both, oldest first", |m| ids(m) == [a1.clone(), a2.clone()])
        .await;

    // Answered, it leaves; cancelled, too.
    api.update_task(&a1, confirm()).await.expect("tasks/update");
    live.until("the answered task gone", |m| ids(m) == [a2.clone()])
        .await;
    api.cancel_task(&a2).await.expect("tasks/cancel");
    let empty = live
        .until("the cancelled task gone", |m| ids(m).is_empty())
        .await;
    assert!(
        empty["html"]
            .as_str()
            .is_some_and(|h| h.contains("inbox-empty"))
    );
    live.never_carried(&[&bobs]);
    drop(live);
    app.stop().await;
}

fn token(app: &TestApp, sub: &str, tenant: &str, admin: bool) -> String {
    let mut claims = jwt::claims(app.url(), sub, tenant);
    if admin && let Some(c) = claims.as_object_mut() {
        c.insert("role".into(), json!("admin"));
    }
    jwt::hs256(SECRET.as_bytes(), &claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_carries_only_what_its_viewer_may_see() {
    let console = ConsoleConfig {
        admin_claim: Some(AdminClaim::parse("role=admin").expect("claim")),
        secure_cookies: false,
        oauth_client_id: None,
    };
    // No workers: the tasks stay working until cancelled.
    let app = TestApp::builder()
        .jwt(Jwt::hs256())
        .config(move |c| c.console = Some(console))
        .start()
        .await;
    let api =
        |sub: &str, tenant: &str| app.replica().bearer_client(token(&app, sub, tenant, false));
    let (alice_api, bob_api, eve_api) =
        (api("alice", "acme"), api("bob", "acme"), api("eve", "evil"));
    let slow = || json!({ "seconds": 120 });
    let (alice_old, _) = create_task(&alice_api, "slow_compute", slow()).await;
    let (eve_old, _) = create_task(&eve_api, "slow_compute", slow()).await;

    let sign_in = |sub: &'static str, tenant: &'static str, admin: bool| {
        let console = Console::new(app.url());
        let token = token(&app, sub, tenant, admin);
        async move {
            assert_eq!(console.sign_in(&token).await.status, 303);
            console
        }
    };
    let alice = sign_in("alice", "acme", false).await;
    let admin = sign_in("root", "acme", true).await;
    let alice_page = alice.get("/console/tasks").await;
    let admin_page = admin.get("/console/tasks").await;
    assert!(admin_page.has(&alice_old) && !admin_page.has(&eve_old));
    let mut alice_live = Live::open(&alice, &events_url(&alice_page)).await;
    let mut admin_live = Live::open(&admin, &events_url(&admin_page)).await;
    let mut alice_inbox = Live::open(&alice, "/console/inbox/events").await;
    alice_live
        .until("alice's row", |m| row(m, &alice_old).is_some())
        .await;
    // The admin's stream follows another principal's row of its tenant.
    admin_live
        .until("alice's row for the admin", |m| {
            row(m, &alice_old).is_some()
        })
        .await;
    alice_inbox
        .until("the empty inbox", |m| m["html"].is_string())
        .await;

    // New tasks of another tenant and another principal, then alice's.
    let (eve_new, _) = create_task(&eve_api, "slow_compute", slow()).await;
    let (bob_new, _) = create_task(&bob_api, "slow_compute", slow()).await;
    let (alice_new, _) = create_task(&alice_api, "slow_compute", slow()).await;
    let mine = alice_live
        .until("alice's new task", |m| ids(m).contains(&alice_new))
        .await;
    assert_eq!(ids(&mine), vec![alice_new.clone()]);
    let tenant = admin_live
        .until("the tenant's new tasks", |m| {
            let ids = ids(m);
            ids.contains(&alice_new) && ids.contains(&bob_new)
        })
        .await;
    assert_eq!(ids(&tenant).len(), 2, "{tenant}");

    // A change to alice's task reaches both her stream and the admin's.
    alice_api
        .cancel_task(&alice_old)
        .await
        .expect("tasks/cancel");
    for live in [&mut alice_live, &mut admin_live] {
        live.until("the cancelled row", |m| {
            row(m, &alice_old).is_some_and(|r| r["status"] == "cancelled")
        })
        .await;
    }
    // The looks that found alice's and bob's new tasks would have found eve's, made
    // before them, had they crossed the tenant.
    alice_live.never_carried(&[&bob_new, &eve_new, &eve_old]);
    admin_live.never_carried(&[&eve_new, &eve_old]);
    alice_inbox.never_carried(&[&bob_new, &eve_new, &eve_old]);
    drop((alice_live, admin_live, alice_inbox));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_stream_moves_with_the_queue_and_counts_only_the_viewers_tasks() {
    // No workers: what is created stays in the queue.
    let app = TestApp::builder().config(console_on).start().await;
    // Bob's queued tasks are not alice's figures: her page and her stream's first event,
    // read after they exist, must not count them.
    let (bobs, _) = create_task(
        &app.client("bob"),
        "confirm_delete",
        json!({ "filename": "b" }),
    )
    .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.get("/console/health").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.headers.get("refresh").is_none(), "live, not reloaded");
    assert!(page.has(r#"data-events="/console/health/events""#));
    assert_eq!(text_of(&page.body, "queue-depth").as_deref(), Some("0"));
    let scripts = scripts_allowed(&page);
    assert!(
        scripts.len() == 1 && scripts.iter().all(|(_, ok)| *ok),
        "{scripts:?}"
    );
    let depth = |m: &Value| m["html"].as_str().and_then(|h| text_of(h, "queue-depth"));
    let mut live = Live::open(&alice, "/console/health/events").await;
    let first = live
        .until("the figures as they are", |m| depth(m).is_some())
        .await;
    assert_eq!(depth(&first).as_deref(), Some("0"), "{first}");

    // Hers is, once created.
    create_task(
        &app.client("alice"),
        "confirm_delete",
        json!({ "filename": "a" }),
    )
    .await;
    let moved = live
        .until("alice's task in the queue", |m| {
            depth(m).as_deref() != Some("0")
        })
        .await;
    assert_eq!(depth(&moved).as_deref(), Some("1"), "{moved}");
    live.never_carried(&[&bobs]);
    drop(live);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_count_against_the_principals_open_streams_and_end_on_shutdown() {
    let app = TestApp::builder()
        .config(|c| {
            console_on(c);
            c.max_streams_per_principal = 2;
        })
        .start()
        .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.get("/console/tasks").await;
    let mut list = Live::open(&alice, &events_url(&page)).await;
    let mut inbox = Live::open(&alice, "/console/inbox/events").await;
    inbox.until("the inbox", |m| m["html"].is_string()).await;
    // (Read as a stream: a stream let through would never end.)
    let third = alice.send_get("/console/tasks/events").await;
    assert_eq!(third.status(), 429, "a third stream was let through");
    assert!(third.headers().get("retry-after").is_some());
    drop(third);
    // Another principal has streams of its own.
    let bob = Console::new(app.url()).signed_as("default", "bob");
    bob.open().await;
    let theirs = bob.send_get("/console/inbox/events").await;
    assert_eq!(theirs.status(), 200);
    drop(theirs);

    // Shutting the replica down ends them.
    let stopping = tokio::spawn(app.stop());
    let deadline = Instant::now() + PATIENCE;
    for live in [&mut list, &mut inbox] {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "a stream outlived the shutdown");
            if live.events.next_event(left).await.is_none() {
                break;
            }
        }
    }
    stopping.await.expect("stopped");
}
