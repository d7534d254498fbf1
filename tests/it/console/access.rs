//! Who gets in and what they see: the sign-in redirect, the session cookie, the same 404
//! for every task a viewer may not see, an admin's tenant-wide view without others'
//! arguments, and CSRF on every action.

use mcp_tasks_server::{AdminClaim, ConsoleConfig};
use mcp_tasks_store::TaskId;
use serde_json::json;

use super::{Console, console_on, text_of};
use crate::harness::TestApp;
use crate::harness::fixtures::{create_task, found, http_owner};
use crate::harness::http::sse::SseStream;
use crate::harness::jwt::{self, Jwt, SECRET};

fn token(app: &TestApp, sub: &str, tenant: &str, extra: serde_json::Value) -> String {
    let mut claims = jwt::claims(app.url(), sub, tenant);
    if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    jwt::hs256(SECRET.as_bytes(), &claims)
}

async fn jwt_app(admin: Option<&str>, secure: bool) -> TestApp {
    let console = ConsoleConfig {
        admin_claim: admin.map(|a| AdminClaim::parse(a).expect("claim")),
        secure_cookies: secure,
        oauth_client_id: None,
    };
    TestApp::builder()
        .jwt(Jwt::hs256())
        .config(move |c| c.console = Some(console))
        .start()
        .await
}

#[tokio::test]
async fn the_console_is_served_only_when_turned_on() {
    let off = TestApp::builder().start().await;
    let page = Console::new(off.url()).get("/console/signin").await;
    assert_eq!(page.status, 404, "{page:?}");
    off.stop().await;

    let on = TestApp::builder().config(console_on).start().await;
    let browser = Console::new(on.url());
    let root = browser.get("/console").await;
    assert_eq!(
        (root.status, root.location()),
        (303, "/console/signin"),
        "no session yet"
    );
    browser.open().await;
    let root = browser.get("/console").await;
    assert_eq!((root.status, root.location()), (303, "/console/tasks"));
    on.stop().await;
}

#[tokio::test]
async fn without_a_session_every_page_sends_the_browser_to_sign_in() {
    let app = jwt_app(None, false).await;
    let browser = Console::new(app.url());
    for path in [
        "/console/tasks",
        "/console/inbox",
        "/console/health",
        &format!("/console/tasks/{}", TaskId::random()),
    ] {
        let page = browser.get(path).await;
        assert_eq!(
            (page.status, page.location()),
            (303, "/console/signin"),
            "{path}: {page:?}"
        );
    }
    // The sign-in page: a token form (no OAuth without an authorization server), and a
    // session cookie for its CSRF token, which alone signs nobody in.
    let signin = browser.open().await;
    assert_eq!(signin.status, 200);
    assert!(signin.has(r#"id="signin-token""#) && signin.has(r#"name="token""#));
    assert!(
        !signin.has("signin-oauth"),
        "no authorization server configured"
    );
    assert_eq!(signin.set_cookies().len(), 1, "{signin:?}");
    let still = browser.get("/console/tasks").await;
    assert_eq!((still.status, still.location()), (303, "/console/signin"));
    app.stop().await;
}

#[tokio::test]
async fn a_pasted_token_signs_in_with_an_http_only_strict_cookie() {
    let app = jwt_app(None, false).await;
    let browser = Console::new(app.url());

    // A token the API refuses is refused here too, and no session comes of it.
    let expired = jwt::hs256(
        SECRET.as_bytes(),
        &jwt::with(
            jwt::claims(app.url(), "alice", "acme"),
            "exp",
            Some(json!(1)),
        ),
    );
    let refused = browser.sign_in(&expired).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(
        refused.has("signin-error") && refused.has("expired"),
        "{}",
        refused.body
    );
    let nobody = browser.get("/console/tasks").await;
    assert_eq!(nobody.status, 303);

    let signed = browser
        .sign_in(&token(&app, "alice", "acme", json!({})))
        .await;
    assert_eq!(
        (signed.status, signed.location()),
        (303, "/console/tasks"),
        "{signed:?}"
    );
    let cookies = signed.set_cookies();
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let cookie = &cookies[0];
    assert!(cookie.starts_with("mcp_tasks_console="), "{cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "loopback: no Secure: {cookie}");
    let tasks = browser.get("/console/tasks").await;
    assert_eq!(tasks.status, 200, "{tasks:?}");
    assert_eq!(
        text_of(&tasks.body, "viewer").as_deref(),
        Some("acme / alice")
    );

    // Signing out ends it (with the CSRF token of the page).
    let out = browser
        .post("/console/signout", &[("csrf", &tasks.csrf())])
        .await;
    assert_eq!((out.status, out.location()), (303, "/console/signin"));
    assert_eq!(browser.get("/console/tasks").await.status, 303);
    app.stop().await;

    // Off loopback, the cookie is Secure.
    let app = jwt_app(None, true).await;
    let browser = Console::new(app.url());
    let signed = browser
        .sign_in(&token(&app, "alice", "acme", json!({})))
        .await;
    assert!(signed.set_cookies()[0].contains("; Secure"), "{signed:?}");
    app.stop().await;
}

#[tokio::test]
async fn tasks_a_viewer_may_not_see_answer_exactly_like_unknown_ids() {
    let app = TestApp::builder().config(console_on).start().await;
    let (id, _) = create_task(
        &app.client("alice"),
        "slow_compute",
        json!({ "seconds": 60 }),
    )
    .await;

    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let own = alice.task(&id).await;
    assert_eq!(own.status, 200, "{own:?}");
    assert_eq!(
        text_of(&own.body, "task-status").as_deref(),
        Some("working")
    );

    let bob = Console::new(app.url()).signed_as("default", "bob");
    bob.open().await;
    let other_tenant = Console::new(app.url()).signed_as("other", "alice");
    other_tenant.open().await;
    let unknown = TaskId::random().to_string();
    let pages = [
        ("another principal's", bob.task(&id).await),
        ("unknown", bob.task(&unknown).await),
        ("malformed", bob.task("not-a-task-id").await),
        ("uppercase", bob.task(&id.to_uppercase()).await),
        (
            "its events",
            bob.get(&format!("/console/tasks/{id}/events")).await,
        ),
    ];
    let (_, reference) = &pages[1];
    assert_eq!(reference.status, 404);
    assert!(!reference.has(&unknown), "the id is not echoed");
    for (what, page) in &pages {
        assert_eq!(page.status, 404, "{what}");
        assert_eq!(
            page.body, reference.body,
            "{what} differs from an unknown id"
        );
    }
    // Another tenant's viewer (same principal name): the same page as its own unknown id.
    let foreign = other_tenant.task(&id).await;
    let foreign_unknown = other_tenant.task(&unknown).await;
    assert_eq!(foreign.status, 404);
    assert_eq!(foreign.body, foreign_unknown.body);

    // Nor can they act on it: the same 404, and the task is untouched.
    let csrf = bob.get("/console/tasks").await.csrf();
    let cancel = bob
        .post(&format!("/console/tasks/{id}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(cancel.status, 404);
    assert_eq!(cancel.body, reference.body);
    let task = found(
        &app.db.store,
        &http_owner("alice"),
        TaskId::parse(&id).expect("id"),
    )
    .await;
    assert_eq!(task.status.as_str(), "working");
    assert!(task.cancel_requested_at.is_none());
    app.stop().await;
}

#[tokio::test]
async fn an_admin_sees_its_tenant_but_not_the_arguments_of_others() {
    let app = jwt_app(Some("role=admin"), false).await;
    let alice_token = token(&app, "alice", "acme", json!({}));
    let alice_api = app.replica().bearer_client(alice_token.clone());
    let (id, _) = create_task(
        &alice_api,
        "slow_compute",
        json!({ "seconds": 60, "label": "alice-secret-label" }),
    )
    .await;

    let admin = Console::new(app.url());
    let signed = admin
        .sign_in(&token(
            &app,
            "root",
            "acme",
            json!({ "role": ["ops", "admin"] }),
        ))
        .await;
    assert_eq!(signed.status, 303, "{signed:?}");
    let page = admin.task(&id).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        text_of(&page.body, "viewer").as_deref(),
        Some("acme / root (admin)")
    );
    assert_eq!(
        text_of(&page.body, "task-status").as_deref(),
        Some("working")
    );
    assert!(page.has(r#"id="task-timeline""#));
    assert!(
        !page.has(r#"id="task-arguments""#) && !page.has(r#"id="task-result""#),
        "{}",
        page.body
    );
    assert!(
        !page.has("alice-secret-label"),
        "arguments leaked to the admin"
    );

    // Its live stream shows the admin the status, never the owner's result.
    let mut events = SseStream::new(admin.send_get(&format!("/console/tasks/{id}/events")).await);
    assert_eq!(events.status, 200);
    let first = loop {
        let event = events
            .next_event(std::time::Duration::from_secs(15))
            .await
            .expect("the current state");
        if let Some(data) = event.data() {
            break serde_json::from_str::<serde_json::Value>(&data).expect("JSON");
        }
    };
    assert_eq!(first["status"], "working", "{first}");
    assert!(first["result"].is_null(), "{first}");
    drop(events);

    // An admin may cancel the task, but not answer for its owner.
    assert!(page.has(r#"id="task-cancel""#));
    let answer = admin
        .post(
            &format!("/console/tasks/{id}/answer"),
            &[("csrf", &page.csrf()), ("key", "k"), ("action", "decline")],
        )
        .await;
    assert_eq!(answer.status, 403, "{answer:?}");

    // The owner sees them.
    let alice = Console::new(app.url());
    alice.sign_in(&alice_token).await;
    let own = alice.task(&id).await;
    assert!(own.has(r#"id="task-arguments""#) && own.has("alice-secret-label"));

    // A principal without the claim, and an admin of another tenant, see nothing.
    for (sub, tenant, extra) in [
        ("bob", "acme", json!({ "role": "user" })),
        ("root", "globex", json!({ "role": "admin" })),
    ] {
        let viewer = Console::new(app.url());
        viewer.sign_in(&token(&app, sub, tenant, extra)).await;
        let page = viewer.task(&id).await;
        let unknown = viewer.task(&TaskId::random().to_string()).await;
        assert_eq!(page.status, 404, "{sub}@{tenant}");
        assert_eq!(page.body, unknown.body, "{sub}@{tenant}");
    }
    let cancelled = admin
        .post(
            &format!("/console/tasks/{id}/cancel"),
            &[("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(cancelled.status, 303, "{cancelled:?}");
    let task = alice_api.get_task(&id).await.expect("tasks/get");
    assert_eq!(crate::harness::status(&task), "cancelled", "{task}");
    app.stop().await;
}

#[tokio::test]
async fn posts_without_the_session_csrf_token_or_from_another_origin_change_nothing() {
    let app = TestApp::builder().config(console_on).start().await;
    let (id, _) = create_task(
        &app.client("alice"),
        "slow_compute",
        json!({ "seconds": 60 }),
    )
    .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    let page = alice.task(&id).await;
    let csrf = page.csrf();
    let cancel = format!("/console/tasks/{id}/cancel");

    // Another browser's session has a token of its own, which is no good here.
    let other = Console::new(app.url()).signed_as("default", "alice");
    other.open().await;
    let foreign_csrf = other.task(&id).await.csrf();
    assert_ne!(foreign_csrf, csrf);

    let origin = alice.url("");
    for (what, fields, headers) in [
        ("no token", vec![], vec![]),
        ("an empty token", vec![("csrf", "")], vec![]),
        ("a forged token", vec![("csrf", "mcpx1.AAAA.AAAA")], vec![]),
        (
            "another session's token",
            vec![("csrf", foreign_csrf.as_str())],
            vec![],
        ),
        (
            "a foreign Origin",
            vec![("csrf", csrf.as_str())],
            vec![("origin", "http://evil.example")],
        ),
        (
            "a cross-site fetch",
            vec![("csrf", csrf.as_str())],
            vec![("sec-fetch-site", "cross-site")],
        ),
    ] {
        let refused = alice.post_with(&cancel, &fields, &headers).await;
        assert_eq!(refused.status, 403, "{what}: {refused:?}");
        let refused = alice
            .post_with(
                &format!("/console/tasks/{id}/answer"),
                &[fields.clone(), vec![("key", "k"), ("action", "decline")]].concat(),
                &headers,
            )
            .await;
        assert_eq!(refused.status, 403, "{what} (answer): {refused:?}");
    }
    let task = found(
        &app.db.store,
        &http_owner("alice"),
        TaskId::parse(&id).expect("id"),
    )
    .await;
    assert_eq!(task.status.as_str(), "working", "nothing changed");
    assert!(task.cancel_requested_at.is_none());

    // The session's own token, from this origin: cancelled (no worker holds it).
    let done = alice
        .post_with(&cancel, &[("csrf", &csrf)], &[("origin", &origin)])
        .await;
    assert_eq!(
        (done.status, done.location()),
        (303, format!("/console/tasks/{id}").as_str())
    );
    let task = found(
        &app.db.store,
        &http_owner("alice"),
        TaskId::parse(&id).expect("id"),
    )
    .await;
    assert_eq!(task.status.as_str(), "cancelled");
    app.stop().await;
}
