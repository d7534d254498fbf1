//! The console as processes run it: off unless asked for with `serve`, on unless turned
//! off with `dev`, and stateless
//! across replicas (a session signed in on one works on another with the same keys, and
//! a sign-out on one ends it on all).

use mcp_tasks_server::KeySource;
use mcp_tasks_wire::secret::Secret;

use super::{Console, console_on, text_of};
use crate::harness::jwt::{self, Jwt, SECRET};
use crate::harness::procs::Proc;
use crate::harness::{TestApp, TestDb};

#[tokio::test]
async fn serve_serves_the_console_only_when_asked_to_and_dev_unless_told_not_to() {
    let db = TestDb::new().await;
    let off = Proc::serve(&db.url, "conformance", &[]).await;
    let page = Console::new(&off.url()).get("/console/signin").await;
    assert_eq!(page.status, 404, "off by default with serve: {page:?}");

    for (args, env) in [
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tools",
                "conformance",
                "--console",
            ],
            vec![],
        ),
        (
            vec!["serve", "--listen", "127.0.0.1:0", "--tools", "conformance"],
            vec![("MCP_TASKS_CONSOLE", "on")],
        ),
    ] {
        let on = Proc::serve_args(&db.url, &args, &env).await;
        let browser = Console::new(&on.url());
        // --auth none: open on loopback, straight on to the tasks.
        let signin = browser.get("/console/signin").await;
        assert_eq!(
            (signin.status, signin.location()),
            (303, "/console/tasks"),
            "{args:?} {env:?}"
        );
        let tasks = browser.get("/console/tasks").await;
        assert_eq!(tasks.status, 200, "{tasks:?}");
        assert_eq!(
            text_of(&tasks.body, "viewer").as_deref(),
            Some("default / anonymous")
        );
    }
    let explicit_off = Proc::serve_args(
        &db.url,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tools",
            "conformance",
            "--console",
            "off",
        ],
        &[("MCP_TASKS_CONSOLE", "on")],
    )
    .await;
    let page = Console::new(&explicit_off.url())
        .get("/console/signin")
        .await;
    assert_eq!(page.status, 404, "the flag wins over the variable");

    // dev: on unless turned off.
    let dev = ["dev", "--listen", "127.0.0.1:0", "--tools", "conformance"];
    let on = Proc::serve_args(&db.url, &dev, &[]).await;
    let page = Console::new(&on.url()).get("/console/signin").await;
    assert_eq!(page.status, 303, "on by default with dev: {page:?}");
    drop(on);
    let off = Proc::serve_args(&db.url, &[&dev[..], &["--console", "off"]].concat(), &[]).await;
    let page = Console::new(&off.url()).get("/console/signin").await;
    assert_eq!(page.status, 404, "dev --console off");
}

#[tokio::test]
async fn a_session_made_on_one_replica_is_good_on_another_until_signed_out() {
    // One audience for both replicas, so the same token is good on either.
    let jwt = Jwt::new(KeySource::Hs256(Secret::new(SECRET)))
        .tweak(|c| c.audience = Some("mcp-tasks-console-test".into()));
    let app = TestApp::builder()
        .replicas(2)
        .jwt(jwt)
        .config(console_on)
        .start()
        .await;
    let token = jwt::hs256(
        SECRET.as_bytes(),
        &jwt::claims("mcp-tasks-console-test", "alice", "acme"),
    );
    let first = Console::new(&app.replicas[0].url);
    let signed = first.sign_in(&token).await;
    assert_eq!(signed.status, 303, "{signed:?}");
    let cookie = signed.set_cookies()[0]
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();

    let other = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let origin = app.replicas[1].origin();
    let page = other
        .get(format!("{origin}/console/tasks"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("the other replica");
    assert_eq!(page.status(), 200);
    let body = page.text().await.expect("body");
    assert_eq!(text_of(&body, "viewer").as_deref(), Some("acme / alice"));
    // Its CSRF token is good there too: sign out on the second replica.
    let csrf = {
        let marker = r#"name="csrf" value=""#;
        let start = body.find(marker).expect("a form") + marker.len();
        body[start..start + body[start..].find('"').expect("end")].to_owned()
    };
    let out = other
        .post(format!("{origin}/console/signout"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "csrf={}",
            url::form_urlencoded::byte_serialize(csrf.as_bytes()).collect::<String>()
        ))
        .send()
        .await
        .expect("sign out");
    assert_eq!(out.status(), 303);
    // Signed out for every replica: the old cookie, replayed on the first, is refused.
    let replay = other
        .get(format!("{}/console/tasks", app.replicas[0].origin()))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("the first replica");
    assert_eq!(replay.status(), 303, "a signed-out session still works");
    app.stop().await;
}
