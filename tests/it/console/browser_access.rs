//! Who sees what, in chromium: another principal's task and another tenant's look exactly
//! like an unknown id; posts without the page's CSRF token are refused and change nothing;
//! the list, the inbox and the health page show the signed-in principal's tasks.

use mcp_tasks_store::Owner;
use serde_json::json;

use super::browser::{Browser, Console, PATIENCE, WORKER_ID, http};
use crate::harness::fixtures::{self, create_task, new_task};
use crate::harness::{Need, skip, status};

/// What a person sees of the page at `path` (the requested id written as `<id>`), and
/// the HTTP status and `<title>` the same session gets for it.
async fn seen(browser: &Browser, path: &str, id: &str) -> (u16, String) {
    browser.goto(path).await;
    browser
        .wait_until(&format!("{path} to load"), || async {
            matches!(
                browser.wd.execute("return document.readyState", vec![]).await,
                Ok(serde_json::Value::String(s)) if s == "complete"
            )
        })
        .await;
    let text = browser.body_text().await.replace(id, "<id>");
    let title = browser
        .wd
        .title()
        .await
        .unwrap_or_default()
        .replace(id, "<id>");
    let answer = http()
        .get(browser.url(path))
        .header("cookie", browser.cookie_header().await)
        .send()
        .await
        .expect("GET");
    (answer.status().as_u16(), format!("{title}\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_or_another_tenants_task_is_the_same_page_as_an_unknown_id() {
    if skip(Need::Browser).await {
        return;
    }
    let console = Console::start().await;
    // No worker: alice's task stays `working`.
    let alice = console.client("alice", "acme");
    let (id, _) = create_task(&alice, "slow_compute", json!({ "seconds": 600 })).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let browser = Browser::open(&console.origin).await;

    // Its owner sees it, so the pages below are refusals, not a broken page.
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;
    browser.goto(&format!("/console/tasks/{id}")).await;
    browser.wait_text("#task-status", "working").await;

    // Bob (alice's tenant), and a principal named alice in another tenant.
    for (sub, tenant) in [("bob", "acme"), ("alice", "globex")] {
        browser.forget().await;
        browser
            .sign_in_with_token(&console.token(sub, tenant))
            .await;
        let (code, page) = seen(&browser, &format!("/console/tasks/{id}"), &id).await;
        let (unknown_code, unknown_page) =
            seen(&browser, &format!("/console/tasks/{unknown}"), &unknown).await;
        if sub == "bob" {
            browser.shot("not-found").await;
        }
        assert_eq!(code, 404, "{sub}@{tenant} opening alice's task: {page}");
        assert_eq!(
            (code, &page),
            (unknown_code, &unknown_page),
            "{sub}@{tenant}: alice's task must look exactly like an unknown id"
        );
        assert!(
            browser.find("#task-status").await.is_none(),
            "{sub}@{tenant} sees a task status on the page of an unknown id"
        );
        // The live stream of the task is no different.
        let cookie = browser.cookie_header().await;
        let events = |task: &str| {
            http()
                .get(browser.url(&format!("/console/tasks/{task}/events")))
                .header("cookie", cookie.clone())
                .send()
        };
        let (theirs, none) = (events(&id).await, events(&unknown).await);
        let (theirs, none) = (
            theirs.expect("GET events").status(),
            none.expect("GET events").status(),
        );
        assert_eq!(
            (theirs, none),
            (
                reqwest::StatusCode::NOT_FOUND,
                reqwest::StatusCode::NOT_FOUND
            ),
            "{sub}@{tenant}: the event stream of alice's task"
        );
    }
    let task = alice.get_task(&id).await.expect("tasks/get");
    assert_eq!(status(&task), "working", "{task}");
    browser.close().await;
}

/// What `form` would post: its CSRF token, its action URL, and its other fields as a
/// person leaving them as they are would send them.
async fn form_of(browser: &Browser, form: &str) -> (String, String, Vec<(String, String)>) {
    browser.wait_for(&format!("{form} input[name=csrf]")).await;
    // `getAttribute`: `f.action` would be the form's control named "action" (a button).
    let script = "var f = document.querySelector(arguments[0]); \
        return [new URL(f.getAttribute('action'), location.href).href, \
                Array.from(new FormData(f)).map(p => [p[0], String(p[1])])];";
    let got = browser
        .wd
        .execute(script, vec![json!(form)])
        .await
        .expect("reading the form");
    let action = got[0].as_str().expect("a form has an action").to_owned();
    let mut csrf = String::new();
    let mut fields = Vec::new();
    for pair in got[1].as_array().expect("the form's fields") {
        let (name, value) = (
            pair[0].as_str().unwrap_or_default(),
            pair[1].as_str().unwrap_or_default(),
        );
        if name == "csrf" {
            value.clone_into(&mut csrf);
        } else {
            fields.push((name.to_owned(), value.to_owned()));
        }
    }
    assert!(!csrf.is_empty(), "{form} carries no CSRF token");
    (csrf, action, fields)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_without_the_pages_csrf_token_are_refused_and_change_nothing() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    console.start_worker().await;
    let alice = console.client("alice", "acme");
    let running =
        fixtures::task_in_status(&alice, "slow_compute", json!({ "seconds": 600 }), "working")
            .await;
    let waiting =
        fixtures::task_in_status(&alice, "generate_report", json!({}), "input_required").await;
    let browser = Browser::open(&console.origin).await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;
    let cookie = browser.cookie_header().await;
    let post = |url: String, fields: Vec<(String, String)>| {
        http()
            .post(url)
            .header("cookie", cookie.clone())
            .header("origin", console.origin.clone())
            .form(&fields)
            .send()
    };

    browser.goto(&format!("/console/tasks/{waiting}")).await;
    let answer = "form.task-answer[data-key=\"approve_outline\"]";
    let (_, answer_url, mut answer_fields) = form_of(&browser, answer).await;
    // The form's own fields (the request's key, the unticked box), and the accept button.
    answer_fields.push(("action".into(), "accept".into()));
    browser.goto(&format!("/console/tasks/{running}")).await;
    let (csrf, cancel_url, cancel_fields) = form_of(&browser, "form#task-cancel").await;

    for (what, fields) in [
        ("no CSRF field", vec![]),
        (
            "an empty CSRF field",
            vec![("csrf".to_owned(), String::new())],
        ),
        (
            "a made-up CSRF token",
            vec![("csrf".to_owned(), format!("{csrf}x"))],
        ),
    ] {
        let refused = post(
            cancel_url.clone(),
            [cancel_fields.clone(), fields.clone()].concat(),
        )
        .await
        .expect("POST cancel");
        assert_eq!(refused.status(), 403, "cancel with {what}");
        let refused = post(answer_url.clone(), [answer_fields.clone(), fields].concat())
            .await
            .expect("POST answer");
        assert_eq!(refused.status(), 403, "answer with {what}");
    }
    let signin = http()
        .post(browser.url("/console/signin"))
        .form(&[("token", console.token("mallory", "acme"))])
        .send()
        .await
        .expect("POST signin");
    assert_eq!(signin.status(), 403, "a sign-in posted from elsewhere");
    let signout = post(browser.url("/console/signout"), vec![])
        .await
        .expect("POST signout");
    assert_eq!(signout.status(), 403, "a sign-out without the token");

    // Nothing changed: both tasks are where they were, and the session still works.
    let task = alice.get_task(&running).await.expect("tasks/get");
    assert_eq!(status(&task), "working", "{task}");
    let task = alice.get_task(&waiting).await.expect("tasks/get");
    assert_eq!(status(&task), "input_required", "{task}");
    browser.goto(&format!("/console/tasks/{running}")).await;
    browser.wait_text("#task-status", "working").await;

    // The same post with the page's token is taken: the refusals above were the token's.
    let taken = post(
        cancel_url,
        [cancel_fields, vec![("csrf".into(), csrf)]].concat(),
    )
    .await
    .expect("POST cancel");
    assert!(
        taken.status().is_success() || taken.status().is_redirection(),
        "cancel with the page's token: {}",
        taken.status()
    );
    let task = alice
        .wait_terminal(&running, PATIENCE)
        .await
        .expect("the task ends");
    assert_eq!(status(&task), "cancelled", "{task}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_inbox_and_health_pages_show_the_principals_tasks() {
    if skip(Need::Browser).await {
        return;
    }
    let mut console = Console::start().await;
    // Enough finished tasks for a second page, older than the two of interest.
    let owner = Owner::new("acme", "alice");
    for _ in 0..120 {
        fixtures::create(
            &console.db.store,
            &owner,
            new_task("slow_compute", json!({ "seconds": 0 })),
        )
        .await;
    }
    console.start_worker().await;
    let alice = console.client("alice", "acme");
    let waiting =
        fixtures::task_in_status(&alice, "generate_report", json!({}), "input_required").await;
    let running =
        fixtures::task_in_status(&alice, "slow_compute", json!({ "seconds": 600 }), "working")
            .await;
    let bob = console.client("bob", "acme");
    let (bobs, _) = create_task(&bob, "slow_compute", json!({ "seconds": 600 })).await;

    let browser = Browser::open(&console.origin).await;
    browser
        .sign_in_with_token(&console.token("alice", "acme"))
        .await;
    browser.goto("/console").await;
    browser.wait_path("/console/tasks").await;
    let row = |id: &str| format!("table#tasks tr[data-task-id=\"{id}\"]");
    browser.wait_for(&row(&waiting)).await;
    browser.wait_for(&row(&running)).await;
    assert!(
        browser.find(&row(&bobs)).await.is_none(),
        "alice's list shows bob's task"
    );
    let counts = browser.text("#status-counts").await.unwrap_or_default();
    assert!(
        counts.contains("input_required: 1") && counts.contains("working"),
        "the counts by status: {counts:?}"
    );
    browser.shot("tasks").await;

    // Filtered by status with the page's own form: only the task that waits.
    browser
        .wait_for("form#task-filter select[name=status]")
        .await
        .select_by_value("input_required")
        .await
        .expect("choosing a status");
    browser.submit("form#task-filter").await;
    browser
        .wait_until("the list filtered to input_required", || async {
            browser.find(&row(&running)).await.is_none()
                && browser.find(&row(&waiting)).await.is_some()
        })
        .await;
    assert_eq!(
        browser.find_all("table#tasks tr[data-task-id]").await.len(),
        1,
        "only alice's one waiting task is input_required"
    );
    browser.goto("/console/tasks").await;

    // Newest first, paginated: the next page holds other (older) tasks.
    let ids = |rows: Vec<fantoccini::elements::Element>| async move {
        let mut ids = Vec::new();
        for r in rows {
            ids.push(
                r.attr("data-task-id")
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_default(),
            );
        }
        ids
    };
    let first = ids(browser.find_all("table#tasks tr[data-task-id]").await).await;
    assert!(first.len() < 122, "122 tasks on one page: no pagination");
    assert_eq!(first.first(), Some(&running), "newest first: {first:?}");
    browser.click("a#next-page").await;
    browser
        .wait_until("the second page of tasks", || async {
            let now = browser.find_all("table#tasks tr[data-task-id]").await;
            !now.is_empty() && !first.contains(&ids(now).await[0])
        })
        .await;
    let second = ids(browser.find_all("table#tasks tr[data-task-id]").await).await;
    assert!(
        second.iter().all(|id| !first.contains(id)),
        "the second page repeats tasks of the first"
    );

    browser.goto("/console/inbox").await;
    let item = |id: &str| format!("ul#inbox li[data-task-id=\"{id}\"]");
    browser.wait_for(&item(&waiting)).await;
    assert!(
        browser.find(&item(&running)).await.is_none(),
        "the inbox lists a task that waits for nothing"
    );
    browser.shot("inbox").await;

    browser.goto("/console/health").await;
    browser.wait_for("#queue-depth").await;
    browser.wait_for("svg.plot").await;
    browser.wait_text_containing("#workers", WORKER_ID).await;
    browser.shot("health").await;
    browser.close().await;
}
