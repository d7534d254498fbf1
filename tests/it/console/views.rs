//! The tasks list, the inbox and the health page over HTTP, as principals, tenant admins
//! and strangers see them: filters, pages and counts; the inbox's order; health figures
//! that move when a task is claimed and a lease lapses; the task page's timeline.

use std::time::Duration;

use mcp_tasks_server::{AdminClaim, ConsoleConfig};
use mcp_tasks_store::{Finish, Owner, Store, TaskId};
use serde_json::json;

use super::{Console, text_of};
use crate::harness::TestApp;
use crate::harness::fixtures::{create, new_task};
use crate::harness::jwt::{self, Jwt, SECRET};

/// A tool no worker has, so the tasks stay as the test leaves them.
const TOOL: &str = "console_views_tool";

async fn app() -> TestApp {
    let console = ConsoleConfig {
        admin_claim: Some(AdminClaim::parse("role=admin").expect("claim")),
        secure_cookies: false,
        oauth_client_id: None,
    };
    TestApp::builder()
        .jwt(Jwt::hs256())
        .config(move |c| c.console = Some(console))
        .start()
        .await
}

async fn browser(app: &TestApp, tenant: &str, sub: &str, admin: bool) -> Console {
    let mut claims = jwt::claims(app.url(), sub, tenant);
    if admin && let Some(c) = claims.as_object_mut() {
        c.insert("role".into(), json!("admin"));
    }
    let token = jwt::hs256(SECRET.as_bytes(), &claims);
    let console = Console::new(app.url());
    let signed = console.sign_in(&token).await;
    assert_eq!(signed.status, 303, "{signed:?}");
    console
}

/// The task ids of the rows of `<table id="tasks">` (or of `<ul id=...>`), in order.
fn ids_in(body: &str, container: &str) -> Vec<String> {
    let Some(start) = body.find(&format!(r#"id="{container}""#)) else {
        return Vec::new();
    };
    let end = ["</table>", "</ul>"]
        .iter()
        .filter_map(|close| body[start..].find(close))
        .min()
        .map_or(body.len(), |e| start + e);
    body[start..end]
        .split(r#"data-task-id=""#)
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_owned))
        .collect()
}

fn href_of(body: &str, id: &str) -> Option<String> {
    let at = body.find(&format!(r#"id="{id}""#))?;
    let tag_start = body[..at].rfind('<')?;
    let tag = &body[tag_start..at + body[at..].find('>')?];
    let href = tag.split(r#"href=""#).nth(1)?.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

async fn make(store: &Store, owner: &Owner, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(create(store, owner, new_task(TOOL, json!({}))).await.id);
    }
    ids
}

async fn complete(store: &Store, id: TaskId) {
    let claimed = store
        .worker()
        .claim_tools("views-worker", 100, 60_000, &[TOOL.to_owned()])
        .await
        .expect("claim");
    for c in claimed {
        let finish = if c.lease.id == id {
            Finish::Completed(json!({ "content": [], "isError": false }))
        } else {
            // Back to the queue, the others.
            assert!(store.worker().release(&c.lease).await.expect("release"));
            continue;
        };
        assert!(
            store
                .worker()
                .finish(&c.lease, &finish, None)
                .await
                .expect("finish")
        );
    }
}

fn newest_first(ids: &[TaskId]) -> Vec<String> {
    ids.iter().rev().map(ToString::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_list_filters_pages_and_counts_for_its_viewer() {
    let app = app().await;
    let store = &app.db.store;
    let alice = Owner::new("acme", "alice");
    let mine = make(store, &alice, 55).await;
    let bobs = make(store, &Owner::new("acme", "bob"), 2).await;
    let eves = make(store, &Owner::new("evil", "eve"), 2).await;
    complete(store, mine[10]).await;

    // Alice: her own tasks, newest first, fifty to a page, then the rest.
    let as_alice = browser(&app, "acme", "alice", false).await;
    let first = as_alice.get("/console/tasks").await;
    assert_eq!(first.status, 200, "{first:?}");
    let want = newest_first(&mine);
    assert_eq!(ids_in(&first.body, "tasks"), want[..50]);
    let next = href_of(&first.body, "next-page").expect("a next page");
    let second = as_alice.get(&next).await;
    assert_eq!(ids_in(&second.body, "tasks"), want[50..]);
    assert!(href_of(&second.body, "next-page").is_none());
    assert!(first.has(&format!(r#"href="/console/tasks/{}""#, mine[54])));
    // Counts for her scope.
    assert!(first.has(r#"id="status-counts""#));
    let counts = &first.body[first.body.find(r#"id="status-counts""#).expect("counts")..];
    assert!(counts.contains(r#"data-status="working""#));
    assert!(
        counts.contains(r#"working</a>: <span class="count">54</span>"#),
        "{counts}"
    );
    assert!(counts.contains(r#"completed</a>: <span class="count">1</span>"#));
    // A filter, from the form's GET parameters.
    let done = as_alice
        .get("/console/tasks?status=completed&tool=&age=%3C1h&attempts=1")
        .await;
    assert_eq!(ids_in(&done.body, "tasks"), vec![mine[10].to_string()]);
    let none = as_alice.get(&format!("/console/tasks?tool={TOOL}x")).await;
    assert!(ids_in(&none.body, "tasks").is_empty() && none.has("no-tasks"));
    // Others' tasks never, not even when asked for by owner (a principal is not an admin).
    let asked = as_alice.get("/console/tasks?owner=bob").await;
    assert_eq!(ids_in(&asked.body, "tasks"), want[..50]);
    // Nonsense is refused with a reason.
    for bad in ["status=done", "age=soon", "attempts=-3", "after=xyz"] {
        let page = as_alice.get(&format!("/console/tasks?{bad}")).await;
        assert_eq!(page.status, 400, "{bad}: {page:?}");
    }

    // An admin of acme: the whole tenant, or one owner of it; never evil's.
    let admin = browser(&app, "acme", "root", true).await;
    let all = admin.get("/console/tasks").await;
    let seen = ids_in(&all.body, "tasks");
    assert_eq!(seen[..2], newest_first(&bobs)[..]);
    assert_eq!(seen.len(), 50);
    assert!(eves.iter().all(|e| !all.has(&e.to_string())));
    let bob_only = admin.get("/console/tasks?owner=bob").await;
    assert_eq!(ids_in(&bob_only.body, "tasks"), newest_first(&bobs));
    // evil's admin sees evil's tasks only.
    let other = browser(&app, "evil", "boss", true).await;
    let theirs = other.get("/console/tasks").await;
    assert_eq!(ids_in(&theirs.body, "tasks"), newest_first(&eves));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_the_principals_waiting_tasks_oldest_first() {
    let app = app().await;
    let store = &app.db.store;
    let alice = Owner::new("acme", "alice");
    let ids = make(store, &alice, 3).await;
    let bobs = make(store, &Owner::new("acme", "bob"), 1).await;
    let requests = json!({ "ok": { "method": "elicitation/create", "params": {
        "message": "Go?", "requestedSchema": { "type": "object", "properties": {} } } } });
    let requests = requests.as_object().expect("object").clone();
    // Asked in this order: the second, then the first (oldest created first anyway),
    // then bob's.
    let mut leases = store
        .worker()
        .claim_tools("views-worker", 10, 60_000, &[TOOL.to_owned()])
        .await
        .expect("claim");
    leases.sort_by_key(|c| c.task.created_at);
    for c in &leases {
        if c.lease.id != ids[2] {
            store
                .worker()
                .request_input(&c.lease, &requests, None, None)
                .await
                .expect("input");
        }
    }
    let as_alice = browser(&app, "acme", "alice", false).await;
    let inbox = as_alice.get("/console/inbox").await;
    assert_eq!(inbox.status, 200, "{inbox:?}");
    assert_eq!(
        ids_in(&inbox.body, "inbox"),
        vec![ids[0].to_string(), ids[1].to_string()]
    );
    assert!(!inbox.has(&bobs[0].to_string()));
    assert!(
        inbox.headers.get("refresh").is_none(),
        "live (`live_lists`), not reloaded"
    );
    let as_bob = browser(&app, "acme", "bob", false).await;
    let theirs = as_bob.get("/console/inbox").await;
    assert_eq!(ids_in(&theirs.body, "inbox"), vec![bobs[0].to_string()]);
    app.stop().await;
}

const LOST_LEASE_MS: i64 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_shows_the_queue_workers_and_lapses_moving() {
    let app = app().await;
    let store = &app.db.store;
    let alice = Owner::new("acme", "alice");
    let ids = make(store, &alice, 3).await;
    let idle = mcp_tasks_store::WorkerInfo {
        id: "registered-idle".into(),
        tools: vec![TOOL.into()],
        host: Some("host-7".into()),
        pid: Some(4242),
        concurrency: 2,
        refresh: Duration::from_secs(60),
    };
    store
        .worker()
        .register_worker(&idle)
        .await
        .expect("register");
    let admin = browser(&app, "acme", "root", true).await;
    let before = admin.get("/console/health").await;
    assert!(
        before.has(r#"data-worker="registered-idle" data-state="live""#)
            && before.has("host host-7, pid 4242"),
        "an admin sees idle workers with their host and pid: {}",
        before.body
    );
    assert_eq!(before.status, 200, "{before:?}");
    assert_eq!(text_of(&before.body, "queue-depth").as_deref(), Some("3"));
    assert_eq!(text_of(&before.body, "lease-lapses").as_deref(), Some("0"));
    assert!(before.has(r#"<svg class="plot""#));
    assert!(before.has(r#"id="workers""#) && before.has(r#"id="oldest-claimable""#));
    assert!(before.has(r#"id="crash-recoveries""#));

    // A worker claims one with a short lease and is lost; another takes it over. The
    // lease must outlive the page read below on a loaded machine (100 ms did not).
    let lost = store
        .worker()
        .claim_tools("lost-worker", 1, LOST_LEASE_MS, &[TOOL.to_owned()])
        .await
        .expect("claim");
    assert_eq!(lost.len(), 1);
    let during = admin.get("/console/health").await;
    assert_eq!(text_of(&during.body, "queue-depth").as_deref(), Some("2"));
    assert!(
        during.has(r#"data-worker="lost-worker""#),
        "{}",
        during.body
    );
    assert_eq!(
        ids_in(&during.body, "workers"),
        vec![lost[0].lease.id.to_string()]
    );
    tokio::time::sleep(Duration::from_millis(LOST_LEASE_MS.unsigned_abs() + 150)).await;
    // The maintenance leader puts the lapsed lease back in the queue.
    assert_eq!(
        store.worker().requeue_lapsed(100).await.expect("requeue"),
        1
    );
    let rescuer = store
        .worker()
        .claim_tools("rescuer", 10, 60_000, &[TOOL.to_owned()])
        .await
        .expect("claim");
    assert_eq!(rescuer.len(), 3);
    for c in &rescuer {
        let done = Finish::Completed(json!({ "content": [], "isError": false }));
        assert!(
            store
                .worker()
                .finish(&c.lease, &done, None)
                .await
                .expect("finish")
        );
    }
    let after = admin.get("/console/health").await;
    assert_eq!(text_of(&after.body, "queue-depth").as_deref(), Some("0"));
    assert_eq!(text_of(&after.body, "lease-lapses").as_deref(), Some("1"));
    assert!(
        after.has(&format!(r#"data-tool="{TOOL}""#)),
        "a plotted line for the tool"
    );

    // The task page's timeline tells the lapse and both claims.
    let owner = browser(&app, "acme", "alice", false).await;
    let page = owner.task(&lost[0].lease.id.to_string()).await;
    assert_eq!(page.status, 200);
    let timeline = &page.body[page.body.find(r#"id="task-timeline""#).expect("timeline")..];
    let kinds: Vec<&str> = timeline
        .split(r#"data-kind=""#)
        .skip(1)
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(
        kinds,
        ["created", "claimed", "lease_lapsed", "claimed", "finished"],
        "{timeline}"
    );
    assert!(timeline.contains("lost-worker") && timeline.contains("rescuer"));
    // Another principal's health holds none of alice's figures.
    let bob = browser(&app, "acme", "bob", false).await;
    let theirs = bob.get("/console/health").await;
    assert_eq!(text_of(&theirs.body, "lease-lapses").as_deref(), Some("0"));
    assert!(theirs.has(r#"data-worker="registered-idle""#) && !theirs.has("4242"));
    assert!(ids.iter().all(|id| !theirs.has(&id.to_string())));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_input_shows_the_attempt_that_asked() {
    let app = app().await;
    let store = &app.db.store;
    let alice = Owner::new("acme", "alice");
    let id = make(store, &alice, 1).await[0];
    let claimed = store
        .worker()
        .claim_tools("asking-worker", 1, 60_000, &[TOOL.to_owned()])
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let requests = json!({ "ok": { "method": "elicitation/create", "params": {
        "message": "?",
        "requestedSchema": { "type": "object", "properties": { "confirm": { "type": "boolean" } } } } } });
    store
        .worker()
        .request_input(
            &claimed[0].lease,
            requests.as_object().expect("object"),
            None,
            None,
        )
        .await
        .expect("request input");

    let owner = browser(&app, "acme", "alice", false).await;
    let page = owner.task(&id.to_string()).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        text_of(&page.body, "task-attempt").as_deref(),
        Some("1 of 3"),
        "{}",
        page.body
    );
    let timeline = &page.body[page.body.find(r#"id="task-timeline""#).expect("timeline")..];
    assert!(
        timeline.contains("claimed by worker asking-worker (attempt 1)"),
        "{timeline}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_shows_what_a_reached_limit_holds_back_in_the_viewers_scope() {
    let console = ConsoleConfig {
        admin_claim: Some(AdminClaim::parse("role=admin").expect("claim")),
        secure_cookies: false,
        oauth_client_id: None,
    };
    let app = TestApp::builder()
        .jwt(Jwt::hs256())
        .config(move |c| {
            c.console = Some(console);
            c.scheduling.tools.insert(
                TOOL.to_owned(),
                mcp_tasks_tools::scheduling::Limits {
                    max_concurrency: Some(1),
                    ..Default::default()
                },
            );
        })
        .start()
        .await;
    let store = &app.db.store;
    let (alice, bob) = (Owner::new("acme", "alice"), Owner::new("acme", "bob"));
    make(store, &alice, 3).await;
    let admin = browser(&app, "acme", "root", true).await;
    let free = admin.get("/console/health").await;
    assert!(
        free.has("No limit holds back any of these queued tasks now."),
        "{}",
        free.body
    );

    // One runs: the tool's limit of 1 is reached, and the rest wait.
    let running = store
        .worker()
        .claim_tools("w", 1, 60_000, &[TOOL.to_owned()])
        .await
        .expect("claim");
    assert_eq!(running.len(), 1);
    make(store, &bob, 2).await;
    let held = |page: &super::Page| -> Option<String> {
        let row = page
            .body
            .split(&format!(r#"data-limit="tool" data-name="{TOOL}""#))
            .nth(1)?;
        let start = row.find(r#"class="held-tasks">"#)? + r#"class="held-tasks">"#.len();
        Some(row[start..start + row[start..].find('<')?].to_owned())
    };
    let page = admin.get("/console/health").await;
    assert_eq!(held(&page).as_deref(), Some("4"), "{}", page.body);
    let as_bob = browser(&app, "acme", "bob", false).await;
    assert_eq!(
        held(&as_bob.get("/console/health").await).as_deref(),
        Some("2")
    );
    // Another tenant's queued tasks are not its business.
    let other = browser(&app, "globex", "carol", true).await;
    assert!(
        other
            .get("/console/health")
            .await
            .has("No limit holds back any of these queued tasks now.")
    );
    app.stop().await;
}
