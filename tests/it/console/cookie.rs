//! The session cookie is encrypted: its bytes show neither the bearer token nor its
//! base64, any replica with the key opens it, key rotation keeps it open until the old
//! key is dropped, and a cookie altered in any byte, cut short, or sealed under a key the
//! replica does not have is simply no session (the sign-in page, never an error).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use mcp_tasks_server::KeySource;
use mcp_tasks_wire::secret::Secret;

use super::{Console, console_on, text_of};
use crate::harness::TestApp;
use crate::harness::jwt::{self, Jwt, SECRET};

const AUDIENCE: &str = "mcp-tasks-console-cookie-test";
const OLD: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const NEW: &str = "0202020202020202020202020202020202020202020202020202020202020202";

/// The viewer the replica at `origin` makes of `cookie`, or the redirect it answers.
async fn viewer(origin: &str, cookie: &str) -> Result<String, (u16, String)> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    });
    let page = client
        .get(format!("{origin}/console/tasks"))
        .header("cookie", format!("mcp_tasks_console={cookie}"))
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
    let cookie = set_cookies
        .iter()
        .find_map(|c| c.strip_prefix("mcp_tasks_console="))
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
