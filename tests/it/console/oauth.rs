//! Signing in to the console with OAuth 2.1 (authorization code, PKCE S256, RFC 8707
//! resource) against the real test authorization server (oidc-provider), the console
//! registering itself dynamically; the token it gets is the API's kind, verified by the
//! API's authenticator.

use super::text_of;
use crate::harness::jwt::Jwt;
use crate::harness::oauth_as::AuthServer;
use crate::harness::{Need, TestApp, skip};
use mcp_tasks_server::{ConsoleConfig, KeySource};

#[tokio::test]
async fn signing_in_with_oauth_and_pkce_through_the_real_authorization_server() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[]).await;
    let issuer = auth.issuer.clone();
    let jwt = Jwt::new(KeySource::JwksUrl(auth.jwks_url()))
        .tweak(move |c| c.issuer = Some(issuer.clone()))
        .authorization_servers(vec![auth.issuer.clone()]);
    let app = TestApp::builder()
        .jwt(jwt)
        .config(|c| c.console = Some(ConsoleConfig::default()))
        .start()
        .await;
    let origin = app.url().trim_end_matches("/mcp").to_owned();

    // The user's browser: keeps cookies and follows every redirect (ours, the
    // authorization server's login and consent, and back to our callback).
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .expect("a browser");
    let signin = browser
        .get(format!("{origin}/console/signin"))
        .send()
        .await
        .expect("sign-in page")
        .text()
        .await
        .expect("body");
    assert!(signin.contains(r#"id="signin-oauth""#), "{signin}");

    let start = browser
        .get(format!("{origin}/console/oauth/start"))
        .send()
        .await
        .expect("the authorization");
    assert_eq!(start.status(), 200, "{start:?}");
    assert_eq!(start.url().path(), "/console/oauth/callback");
    let query: std::collections::HashMap<String, String> = start
        .url()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    assert!(
        query.contains_key("code") && query.contains_key("state"),
        "{query:?}"
    );
    let cookies: Vec<String> = start
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    assert!(
        cookies.iter().any(|c| c.starts_with("mcp_tasks_console=")
            && c.contains("SameSite=Strict")
            && c.contains("HttpOnly")),
        "{cookies:?}"
    );
    let done = start.text().await.expect("body");
    assert!(done.contains(r#"url=/console/tasks"#), "{done}");

    let tasks = browser
        .get(format!("{origin}/console/tasks"))
        .send()
        .await
        .expect("tasks");
    assert_eq!(tasks.status(), 200);
    let body = tasks.text().await.expect("body");
    assert_eq!(
        text_of(&body, "viewer").as_deref(),
        Some("acme / alice"),
        "{body}"
    );

    // The callback cannot be replayed: its flow cookie is gone, and a code is good once.
    let replay = browser
        .get(format!("{origin}/console/oauth/callback?code=x&state=y"))
        .send()
        .await
        .expect("replay");
    assert_eq!(replay.status(), 400);

    app.stop().await;
}
