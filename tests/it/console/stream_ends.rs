//! A live stream ends with its session: signing out in one tab ends the streams another
//! tab of the same browser has open, on this replica and on others, within seconds; a
//! stream ends at the replica's maximum stream lifetime, and the browser's reconnect is
//! served like the first connection. Signing out ends the session everywhere even when
//! the request that asks cannot be served a viewer (rate-limited).

use std::time::Duration;

use mcp_tasks_server::{KeySource, RateLimit};
use mcp_tasks_wire::secret::Secret;
use serde_json::json;
use tokio::time::Instant;

use super::{Console, console_on, text_of};
use crate::harness::TestApp;
use crate::harness::fixtures::create_task;
use crate::harness::http::sse::SseStream;
use crate::harness::jwt::{self, Jwt, SECRET};

const AUDIENCE: &str = "mcp-tasks-console-stream-test";
/// A generous deadline for what should take seconds, not a measurement.
const PATIENCE: Duration = Duration::from_secs(30);

/// A live stream of `console`, once its first message has come.
async fn open(console: &Console, path: &str) -> SseStream {
    let mut events = SseStream::new(console.send_get(path).await);
    assert_eq!(events.status, 200, "{path}");
    loop {
        let event = events
            .next_event(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("{path} ended at once"));
        if event.data().is_some() {
            return events;
        }
    }
}

/// Waits for the server to end `events` (whatever it sends until then).
async fn ends(events: &mut SseStream, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what} did not end");
        if events.next_event(left).await.is_none() {
            return;
        }
    }
}

/// Whether `events` is still open after `wait` (nothing ended it meanwhile).
async fn still_open(events: &mut SseStream, wait: Duration) -> bool {
    loop {
        match tokio::time::timeout(wait, events.next_event(PATIENCE)).await {
            Err(_) => return true,
            Ok(None) => return false,
            Ok(Some(_)) => {}
        }
    }
}

fn jwt_app() -> crate::harness::app::Builder {
    let jwt = Jwt::new(KeySource::Hs256(Secret::new(SECRET)))
        .tweak(|c| c.audience = Some(AUDIENCE.into()));
    TestApp::builder().jwt(jwt)
}

fn token(sub: &str) -> String {
    jwt::hs256(SECRET.as_bytes(), &jwt::claims(AUDIENCE, sub, "acme"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_in_one_tab_ends_the_other_tabs_streams_on_every_replica() {
    // No worker: the task stays working, so nothing but the sign-out ends its stream.
    let app = jwt_app().replicas(2).config(console_on).start().await;
    let alice = token("alice");
    let api = app.replicas[0].bearer_client(alice.clone());
    let (task, _) = create_task(&api, "slow_compute", json!({ "seconds": 300 })).await;

    let here = Console::new(&app.replicas[0].url);
    assert_eq!(here.sign_in(&alice).await.status, 303);
    let there = here.at(&app.replicas[1].url);
    // The other tab's live parts: the task page here, the inbox and health there.
    let mut tab = vec![
        (
            "the task page's stream",
            open(&here, &format!("/console/tasks/{task}/events")).await,
        ),
        (
            "the inbox's stream on the other replica",
            open(&there, "/console/inbox/events").await,
        ),
        (
            "the health stream on the other replica",
            open(&there, "/console/health/events").await,
        ),
    ];
    // Another browser of the same principal has a session of its own.
    let elsewhere = Console::new(&app.replicas[1].url);
    assert_eq!(elsewhere.sign_in(&alice).await.status, 303);
    let mut theirs = open(&elsewhere, "/console/inbox/events").await;

    let page = here.get("/console/tasks").await;
    assert_eq!(page.status, 200, "{page:?}");
    let out = here
        .post("/console/signout", &[("csrf", &page.csrf())])
        .await;
    assert_eq!((out.status, out.location()), (303, "/console/signin"));
    for (what, events) in &mut tab {
        ends(events, what).await;
    }
    // Reconnecting gets no stream, only the way to the sign-in page.
    let again = there.send_get("/console/inbox/events").await;
    assert_eq!(again.status(), 303, "a signed-out session opened a stream");

    // The other session goes on: its stream is open, its pages are served.
    assert!(
        still_open(&mut theirs, Duration::from_secs(3)).await,
        "another session's stream ended"
    );
    let page = elsewhere.get("/console/tasks").await;
    assert_eq!(
        text_of(&page.body, "viewer").as_deref(),
        Some("acme / alice")
    );
    drop((tab, theirs));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_at_its_maximum_lifetime_and_the_browser_reconnects() {
    let app = TestApp::builder()
        .config(|c| {
            console_on(c);
            c.max_stream_lifetime = Duration::from_secs(2);
        })
        .start()
        .await;
    let alice = Console::new(app.url()).signed_as("default", "alice");
    alice.open().await;
    for path in ["/console/inbox/events", "/console/health/events"] {
        let opened = Instant::now();
        let mut events = open(&alice, path).await;
        ends(&mut events, path).await;
        assert!(
            opened.elapsed() >= Duration::from_millis(1800),
            "{path} ended before its lifetime"
        );
        // The reconnect is served as the first connection was.
        let mut again = open(&alice, path).await;
        ends(&mut again, path).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_ends_the_session_everywhere_even_when_rate_limited() {
    let app = jwt_app()
        .config(|c| {
            console_on(c);
            c.rate_limit = Some(RateLimit {
                per_second: 2.0,
                burst: 4.0,
            });
        })
        .start()
        .await;
    let browser = Console::new(app.url());
    let signed = browser.sign_in(&token("alice")).await;
    assert_eq!(signed.status, 303, "{signed:?}");
    let cookie = signed
        .set_cookies()
        .iter()
        .find_map(|c| c.split(';').next().map(str::to_owned))
        .expect("the session cookie");
    let page = browser.get("/console/tasks").await;
    assert_eq!(page.status, 200, "{page:?}");
    let csrf = page.csrf();
    // Spend the principal's requests.
    let deadline = Instant::now() + PATIENCE;
    while browser.get("/console/tasks").await.status != 429 {
        assert!(Instant::now() < deadline, "never rate-limited");
    }
    let out = browser.post("/console/signout", &[("csrf", &csrf)]).await;
    assert_eq!((out.status, out.location()), (303, "/console/signin"));

    // Once the limit lets requests through again, a copy of the cookie opens nothing.
    let copy = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let replay = copy
            .get(format!("{}/console/tasks", app.replica().origin()))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("the console");
        match replay.status().as_u16() {
            429 => {
                assert!(Instant::now() < deadline, "rate-limited for good");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            status => {
                assert_eq!(status, 303, "a signed-out session still works");
                break;
            }
        }
    }
    app.stop().await;
}
