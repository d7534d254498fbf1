//! The session cookie is encrypted: its bytes show neither the bearer token nor its
//! base64, any replica with the key opens it, key rotation keeps it open until the old
//! key is dropped, and a cookie altered in any byte, cut short, or sealed under a key the
//! replica does not have is simply no session (the sign-in page, never an error). A
//! cookie of its name sent twice is none either (one was tossed in by someone else);
//! where the public scheme is https (`--public-url`, not the listen address) the cookie
//! is `Secure` and `__Host-` prefixed, so no sibling subdomain can set one.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use mcp_tasks_server::{ConsoleConfig, KeySource};
use mcp_tasks_wire::secret::Secret;

use super::{Console, console_on, text_of};
use crate::harness::jwt::{self, Jwt, SECRET};
use crate::harness::procs::Proc;
use crate::harness::{TestApp, TestDb};

const AUDIENCE: &str = "mcp-tasks-console-cookie-test";
const OLD: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const NEW: &str = "0202020202020202020202020202020202020202020202020202020202020202";

/// The viewer the replica at `origin` makes of `cookie`, or the redirect it answers.
async fn viewer(origin: &str, cookie: &str) -> Result<String, (u16, String)> {
    viewer_for(origin, &format!("mcp_tasks_console={cookie}")).await
}

/// The viewer the replica at `origin` makes of a request with this `Cookie` header.
async fn viewer_for(origin: &str, cookies: &str) -> Result<String, (u16, String)> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    });
    let page = client
        .get(format!("{origin}/console/tasks"))
        .header("cookie", cookies)
        .send()
        .await
        .expect("the console");
    let status = page.status().as_u16();
    let location = page
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = page.text().await.expect("body");
    if status == 200 {
        Ok(text_of(&body, "viewer").unwrap_or_default())
    } else {
        Err((status, location))
    }
}

fn value_of(set_cookies: &[String]) -> String {
    value_named(set_cookies, "mcp_tasks_console")
}

fn value_named(set_cookies: &[String], name: &str) -> String {
    let cookie = set_cookies
        .iter()
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .expect("a session cookie");
    cookie.split(';').next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_session_cookie_is_encrypted_opens_on_every_replica_with_the_key_and_nowhere_else() {
    let jwt = Jwt::new(KeySource::Hs256(Secret::new(SECRET)))
        .tweak(|c| c.audience = Some(AUDIENCE.into()));
    // Before a rotation, during it (the new key first, the old still opening), after it.
    let app = TestApp::builder()
        .state_keys_each(&[OLD, &format!("{NEW},{OLD}"), NEW])
        .jwt(jwt)
        .config(console_on)
        .start()
        .await;
    let origins: Vec<String> = app.replicas.iter().map(|r| r.origin()).collect();
    let token = jwt::hs256(SECRET.as_bytes(), &jwt::claims(AUDIENCE, "alice", "acme"));

    let signed = Console::new(&app.replicas[0].url).sign_in(&token).await;
    assert_eq!(signed.status, 303, "{signed:?}");
    let old = value_of(&signed.set_cookies());
    assert!(old.starts_with("mcpc2."), "{old}");
    // Neither the token nor its base64 (at any of the three alignments) shows.
    assert!(!old.contains(&token[..16]), "{old}");
    for skip in 0..3 {
        let bytes = &token.as_bytes()[skip..];
        for encoded in [STANDARD.encode(bytes), URL_SAFE_NO_PAD.encode(bytes)] {
            assert!(
                !old.contains(&encoded[4..24]),
                "base64 of the token in {old}"
            );
        }
    }

    let alice = Ok("acme / alice".to_owned());
    let signed_out = Err((303, "/console/signin".to_owned()));
    assert_eq!(viewer(&origins[0], &old).await, alice);
    assert_eq!(
        viewer(&origins[1], &old).await,
        alice,
        "the old key still opens"
    );
    assert_eq!(
        viewer(&origins[2], &old).await,
        signed_out,
        "the old key dropped"
    );

    let signed = Console::new(&app.replicas[1].url).sign_in(&token).await;
    let new = value_of(&signed.set_cookies());
    assert_eq!(viewer(&origins[1], &new).await, alice);
    assert_eq!(
        viewer(&origins[2], &new).await,
        alice,
        "sealed under the new key"
    );
    assert_eq!(
        viewer(&origins[0], &new).await,
        signed_out,
        "a key it lacks"
    );

    // Any byte altered, or the cookie cut short: no session, and no error.
    let flip = |c: u8| match c {
        b'A' => 'B',
        b'.' => '_',
        _ => 'A',
    };
    for at in 0..old.len() {
        let mut altered = old.clone().into_bytes();
        altered[at] = flip(altered[at]) as u8;
        let altered = String::from_utf8(altered).expect("ascii");
        assert_eq!(
            viewer(&origins[0], &altered).await,
            signed_out,
            "byte {at} altered"
        );
    }
    for len in [0, 6, 7, 20, old.len() / 2, old.len() - 1] {
        assert_eq!(
            viewer(&origins[0], &old[..len]).await,
            signed_out,
            "cut to {len}"
        );
    }
    app.stop().await;
}

fn jwt_app() -> crate::harness::app::Builder {
    let jwt = Jwt::new(KeySource::Hs256(Secret::new(SECRET)))
        .tweak(|c| c.audience = Some(AUDIENCE.into()));
    TestApp::builder().jwt(jwt)
}

async fn signed_in(url: &str, sub: &str, tenant: &str, name: &str) -> (String, Vec<String>) {
    let token = jwt::hs256(SECRET.as_bytes(), &jwt::claims(AUDIENCE, sub, tenant));
    let signed = Console::new(url).sign_in(&token).await;
    assert_eq!(signed.status, 303, "{signed:?}");
    let set = signed.set_cookies();
    (value_named(&set, name), set)
}

#[tokio::test]
async fn a_session_cookie_sent_twice_opens_no_session() {
    let app = jwt_app().config(console_on).start().await;
    let origin = app.replica().origin();
    let name = "mcp_tasks_console";
    let (alice, _) = signed_in(app.url(), "alice", "acme", name).await;
    let (eve, _) = signed_in(app.url(), "eve", "evil", name).await;
    assert_eq!(viewer(&origin, &alice).await, Ok("acme / alice".to_owned()));
    // Eve's cookie tossed in beside alice's (a sibling subdomain can set one for the
    // parent domain, with a longer path so that it comes first): neither is taken.
    let signed_out = Err((303, "/console/signin".to_owned()));
    for cookies in [
        format!("{name}={eve}; {name}={alice}"),
        format!("{name}={alice}; other=1; {name}={eve}"),
    ] {
        assert_eq!(viewer_for(&origin, &cookies).await, signed_out, "{cookies}");
    }
    app.stop().await;
}

#[tokio::test]
async fn with_an_https_public_scheme_the_session_cookie_is_secure_and_host_only() {
    let app = jwt_app()
        .config(|c| {
            c.console = Some(ConsoleConfig {
                secure_cookies: true,
                ..ConsoleConfig::default()
            });
        })
        .start()
        .await;
    let origin = app.replica().origin();
    let name = "__Host-mcp_tasks_console";
    let (alice, set) = signed_in(app.url(), "alice", "acme", name).await;
    let header = set
        .iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .expect("the cookie");
    assert!(header.contains("; Path=/;"), "{header}");
    assert!(header.ends_with("; Secure"), "{header}");
    assert!(!header.to_ascii_lowercase().contains("domain"), "{header}");
    let (eve, _) = signed_in(app.url(), "eve", "evil", name).await;

    let alice_viewer = Ok("acme / alice".to_owned());
    assert_eq!(
        viewer_for(&origin, &format!("{name}={alice}")).await,
        alice_viewer
    );
    // A cookie without the prefix is anyone's to set: it is not ours, beside ours or
    // alone.
    assert_eq!(
        viewer_for(&origin, &format!("mcp_tasks_console={eve}; {name}={alice}")).await,
        alice_viewer
    );
    assert_eq!(
        viewer_for(&origin, &format!("mcp_tasks_console={eve}")).await,
        Err((303, "/console/signin".to_owned()))
    );
    app.stop().await;
}

#[tokio::test]
async fn the_public_url_not_the_listen_address_makes_cookies_secure() {
    let db = TestDb::new().await;
    let serve = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tools",
        "conformance",
        "--console",
    ];
    let public = ["--public-url", "https://tasks.example.com"];
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for (args, env, secure) in [
        (serve.to_vec(), vec![], false),
        ([&serve[..], &public[..]].concat(), vec![], true),
        (
            serve.to_vec(),
            vec![("MCP_TASKS_PUBLIC_URL", "https://tasks.example.com")],
            true,
        ),
        (
            [
                &serve[..],
                &["--public-url", "http://tasks.example.com"][..],
            ]
            .concat(),
            vec![],
            false,
        ),
    ] {
        // Loopback every time: only the public URL differs.
        let replica = Proc::serve_args(&db.url, &args, &env).await;
        let origin = replica.url().trim_end_matches("/mcp").to_owned();
        let page = http
            .get(format!("{origin}/console/signin"))
            .send()
            .await
            .expect("the sign-in page");
        let cookie = page
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let expected = if secure {
            "__Host-mcp_tasks_console="
        } else {
            "mcp_tasks_console="
        };
        assert!(cookie.starts_with(expected), "{args:?} {env:?}: {cookie}");
        assert_eq!(
            cookie.ends_with("; Secure"),
            secure,
            "{args:?} {env:?}: {cookie}"
        );
    }
}
