//! A person at the console, in chromium: signs in (pasted token; OAuth with PKCE through
//! the test authorization server), watches a task go to `input_required` live, answers
//! it through the form built from its `requestedSchema`, sees it complete; cancels a
//! running task from its page.

use mcp_tasks_store::Owner;
use serde_json::json;

use super::browser::{Browser, Console, PATIENCE, WORKER_ID};
use crate::harness::fixtures::{self, create_task, new_task};
use crate::harness::oauth_as::AuthServer;
use crate::harness::{Need, skip, status};

const ANSWER: &str = "form.task-answer[data-key=\"approve_outline\"]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_shows_a_task_reach_input_required_live_takes_the_answer_and_shows_it_complete() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    let alice = console.client("alice", "acme");
    let browser = Browser::open(&console.origin).await;

    // Signed out, the console sends a person to sign in.
    browser.goto("/console").await;
    browser.wait_path("/console/signin").await;
    browser
        .wait_for("form#signin-token input[name=token]")
        .await;
    browser.shot("signin").await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;

    // No worker yet: the task stays `working` while the page is opened.
    let (id, _) = create_task(&alice, "generate_report", json!({ "size": "small" })).await;
    browser.goto(&format!("/console/tasks/{id}")).await;
    browser.wait_text("#task-status", "working").await;
    browser
        .wait_text_containing("#task-arguments", "small")
        .await;
    let trace = browser.text("#task-trace-id").await.unwrap_or_default();
    assert!(
        trace.chars().filter(char::is_ascii_hexdigit).count() >= 32,
        "the task page shows no trace id: {trace:?}"
    );
    assert!(
        browser.find(ANSWER).await.is_none(),
        "an answer form before the task asked for anything"
    );
    browser.shot("task-working").await;

    // From here on the page must change by itself: the mark goes with any reload.
    browser.mark().await;
    console.start_worker().await;
    browser.wait_text("#task-status", "input_required").await;
    browser.wait_for(ANSWER).await;
    // The status message too, as the API has it now.
    let waiting = alice.get_task(&id).await.expect("tasks/get");
    let message = waiting["statusMessage"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "no status message: {waiting}");
    browser.wait_text("#task-status-message", message).await;
    // The attempt that asked, and its claim in the timeline, come live too.
    browser.wait_text("#task-attempt", "1 of 3").await;
    browser
        .wait_for(r#"#task-timeline li[data-kind="claimed"]"#)
        .await;
    assert!(
        browser.still_marked().await,
        "the page was reloaded or left: the status must update live"
    );
    let checkbox = format!("{ANSWER} input[type=checkbox]");
    browser.wait_for(&checkbox).await;
    browser.shot("task-input-required").await;

    // The boolean `approved` is a checkbox: tick it and accept.
    browser.click(&checkbox).await;
    browser
        .click(&format!("{ANSWER} button[name=action][value=accept]"))
        .await;
    browser.wait_text("#task-status", "completed").await;
    browser
        .wait_text_containing("#task-result", "Generated small report")
        .await;
    assert!(
        browser.find(ANSWER).await.is_none(),
        "the answer form is still shown after the task completed"
    );
    browser.shot("task-completed").await;
    // The timeline (as of a page load) has the whole story: the claim by the worker, the
    // input round, and the end.
    browser.wd.refresh().await.expect("reload");
    for step in [
        "created",
        WORKER_ID,
        "input requested",
        "input answered",
        "finished: completed",
    ] {
        browser.wait_text_containing("#task-timeline", step).await;
    }

    // The form's answer went through as `tasks/update` would take it: approved, true.
    let done = alice
        .wait_terminal(&id, PATIENCE)
        .await
        .expect("the task ends");
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["approved"],
        json!(true),
        "{done}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_declines_an_input_request_through_the_form() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    console.start_worker().await;
    let alice = console.client("alice", "acme");
    let browser = Browser::open(&console.origin).await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;
    let id = fixtures::task_in_status(
        &alice,
        "generate_report",
        json!({ "size": "medium" }),
        "input_required",
    )
    .await;
    browser.goto(&format!("/console/tasks/{id}")).await;
    browser.wait_text("#task-status", "input_required").await;
    browser
        .click(&format!("{ANSWER} button[name=action][value=decline]"))
        .await;
    browser.wait_text("#task-status", "completed").await;
    let done = alice
        .wait_terminal(&id, PATIENCE)
        .await
        .expect("the task ends");
    assert_eq!(
        done["result"]["structuredContent"]["approved"],
        json!(false),
        "a declined outline writes no report: {done}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_cancels_a_running_task_from_its_page() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    console.start_worker().await;
    let alice = console.client("alice", "acme");
    let browser = Browser::open(&console.origin).await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;

    let (id, _) = create_task(
        &alice,
        "slow_compute",
        json!({ "seconds": 600, "label": "console" }),
    )
    .await;
    browser.goto(&format!("/console/tasks/{id}")).await;
    // The worker's status messages arrive on the page: it runs.
    browser
        .wait_text_containing("#task-status-message", "Computing console")
        .await;
    browser.wait_text("#task-status", "working").await;
    // The timeline (as of the page load) names the worker that holds the task.
    browser.wd.refresh().await.expect("reload");
    browser
        .wait_text_containing("#task-timeline", WORKER_ID)
        .await;
    browser.submit("form#task-cancel").await;
    browser.wait_text("#task-status", "cancelled").await;
    browser
        .wait_text_containing("#task-timeline", "cancel")
        .await;
    browser.shot("task-cancelled").await;

    let task = alice.get_task(&id).await.expect("tasks/get");
    assert_eq!(status(&task), "cancelled", "{task}");
    assert!(
        browser.find("form#task-cancel").await.is_none(),
        "a cancelled task still offers to cancel"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_signs_in_with_oauth_and_pkce_through_the_authorization_server() {
    if skip(Need::Browser).await || skip(Need::AuthServer).await {
        return;
    }
    // The test authorization server: every login is alice of tenant acme.
    let server = AuthServer::start(&[]).await;
    let console = Console::start_oauth(&server).await;
    let mine = fixtures::create(
        &console.db.store,
        &Owner::new("acme", "alice"),
        new_task("slow_compute", json!({ "seconds": 600 })),
    )
    .await;
    let theirs = fixtures::create(
        &console.db.store,
        &Owner::new("acme", "bob"),
        new_task("slow_compute", json!({ "seconds": 600 })),
    )
    .await;

    let browser = Browser::open(&console.origin).await;
    browser.goto("/console/signin").await;
    let start = browser.wait_for("#signin-oauth").await;
    if start.tag_name().await.unwrap_or_default() == "form" {
        browser.submit("#signin-oauth").await;
    } else {
        start.click().await.expect("starting the OAuth sign-in");
    }
    // The authorization server logs alice in, consents, and sends the browser back.
    browser
        .wait_until("the console after the authorization server", || async {
            let path = browser.path().await;
            path.starts_with("/console/") && path != "/console/signin"
        })
        .await;
    assert!(
        !browser.cookie_header().await.is_empty(),
        "no session cookie after OAuth"
    );
    // Signed in as the authorization server's user: alice of acme sees her task, and
    // bob's is the page of an unknown id.
    browser.goto(&format!("/console/tasks/{}", mine.id)).await;
    browser.wait_text("#task-status", "working").await;
    browser.wait_text("#task-owner", "alice").await;
    browser.goto(&format!("/console/tasks/{}", theirs.id)).await;
    browser
        .wait_until("the page of bob's task to load", || async {
            browser.body_text().await.contains("Sign out")
        })
        .await;
    assert!(
        browser.find("#task-status").await.is_none(),
        "alice signed in through OAuth sees bob's task"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_tasks_list_and_inbox_change_live_without_a_reload() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    let alice = console.client("alice", "acme");
    let browser = Browser::open(&console.origin).await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;
    // No worker yet: the task waits, `working`, while the list is opened.
    let (id, _) = create_task(&alice, "generate_report", json!({ "size": "small" })).await;
    browser.goto("/console/tasks").await;
    let row = format!("tr[data-task-id=\"{id}\"]");
    browser
        .wait_text(&format!("{row} .status"), "working")
        .await;
    assert_eq!(
        browser.text("#new-tasks").await.as_deref(),
        Some(""),
        "the new-tasks notice shows before anything is new"
    );
    browser.mark().await;

    // The worker claims it and asks for input: the row says so by itself.
    console.start_worker().await;
    browser
        .wait_text(&format!("{row} .status"), "input_required")
        .await;
    browser
        .wait_text_containing(&format!("{row} .attempt"), "1 of ")
        .await;
    // A task made now is announced, with a link to the newest tasks.
    let (new, _) = create_task(&alice, "generate_report", json!({ "size": "medium" })).await;
    browser
        .wait_text_containing("#new-tasks", "1 new task")
        .await;
    assert!(
        browser.still_marked().await,
        "the list was reloaded: its rows must update live"
    );
    browser.shot("tasks-live").await;

    // The inbox: both wait for alice; answering one takes it out, live.
    browser.goto("/console/inbox").await;
    let first = format!("#inbox li[data-task-id=\"{id}\"]");
    let second = format!("#inbox li[data-task-id=\"{new}\"]");
    browser.wait_for(&first).await;
    browser.wait_for(&second).await;
    browser.mark().await;
    let answer = json!({ "approve_outline": { "action": "decline" } });
    alice.update_task(&id, answer).await.expect("tasks/update");
    browser
        .wait_until("the answered task to leave the inbox", || async {
            browser.find(&first).await.is_none()
        })
        .await;
    assert!(browser.find(&second).await.is_some());
    assert!(
        browser.still_marked().await,
        "the inbox was reloaded: it must update live"
    );
    browser.shot("inbox-live").await;
    browser.close().await;
}
