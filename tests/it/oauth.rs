//! The client library's OAuth against a real authorization server (oidc-provider, see
//! `harness::oauth_as`) and our own replicas as the resource server (`--auth jwt` with the
//! server's JWK set): a `401` leads the client through RFC 9728 and RFC 8414 discovery,
//! dynamic registration, the authorization code grant with PKCE and `resource`, and the
//! token it gets is accepted by the replica as alice of tenant acme.

use std::sync::Arc;

use base64::Engine;
use mcp_tasks_client::oauth::{ClientCredentials, ClientSecretKind, LoopbackBrowser, TokenStore};
use mcp_tasks_client::{Client, ClientError, OAuth, OAuthConfig, tasks_capabilities};
use mcp_tasks_server::KeySource;
use serde_json::{Value, json};

use crate::harness::jwt::Jwt;
use crate::harness::oauth_as::{AuthServer, Browser};
use crate::harness::{Need, TestApp, skip};

/// Where the authorization server sends the browser back (never listened on: the
/// [`Browser`] stops at the redirect and hands it to the client).
const REDIRECT: &str = "http://127.0.0.1:9/callback";

async fn protected_app(auth: &AuthServer) -> TestApp {
    let issuer = auth.issuer.clone();
    let jwt = Jwt::new(KeySource::JwksUrl(auth.jwks_url()))
        .tweak(move |c| c.issuer = Some(issuer.clone()))
        .authorization_servers(vec![auth.issuer.clone()]);
    TestApp::builder().workers(1).jwt(jwt).start().await
}

fn oauth(url: &str, store: &TokenStore, agent: Browser) -> Arc<OAuth> {
    let mut config = OAuthConfig::new("mcp-tasks tests");
    config.store = Some(store.clone());
    Arc::new(OAuth::new(url, config, agent).expect("OAuth"))
}

fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

async fn greet(client: &Client) -> String {
    let result = client
        .call_tool("greet", json!({ "name": "oauth" }))
        .await
        .expect("greet with the token");
    result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn temp_store(name: &str) -> (std::path::PathBuf, TokenStore) {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-oauth-{name}-{}", uuid::Uuid::new_v4()));
    let path = dir.join("tokens.json");
    (dir, TokenStore::new(path))
}

#[tokio::test]
async fn a_401_leads_to_a_login_whose_token_the_replica_accepts_and_the_next_process_reuses() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[]).await;
    let app = protected_app(&auth).await;
    let (dir, store) = temp_store("login");

    // Without a token the replica refuses and says where to look.
    let anonymous = Client::new(app.url(), tasks_capabilities());
    let refused = anonymous.discover().await.expect_err("no token");
    assert!(
        matches!(refused, ClientError::Rpc { status: 401, .. }),
        "{refused:?}"
    );

    let browser = Browser::new(REDIRECT);
    let client = Client::new(app.url(), tasks_capabilities()).oauth(oauth(
        app.url(),
        &store,
        browser.clone(),
    ));
    assert_eq!(greet(&client).await, "Hello, oauth!");
    assert_eq!(browser.count(), 1, "one authorization");

    let entry = store.load(app.url()).expect("store").expect("an entry");
    assert_eq!(entry.issuer.as_deref(), Some(auth.issuer.as_str()));
    let registered = entry.client.expect("a registration");
    assert_eq!(registered.how, "dynamic");
    assert_eq!(registered.redirect_uri, REDIRECT);
    let tokens = entry.tokens.expect("tokens");
    assert!(
        tokens.refresh_token.is_some(),
        "a refresh token was asked for and issued"
    );
    let claims = claims(&tokens.access_token);
    assert_eq!(
        claims["aud"],
        json!(app.url()),
        "RFC 8707: the token is for this server"
    );
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["iss"], json!(auth.issuer));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(store.path())
            .expect("the store file")
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o077,
            0,
            "the token store is readable by its owner only"
        );
    }

    // Another process with the same store: no new authorization.
    let again = Browser::new(REDIRECT);
    let second =
        Client::new(app.url(), tasks_capabilities()).oauth(oauth(app.url(), &store, again.clone()));
    assert_eq!(greet(&second).await, "Hello, oauth!");
    assert_eq!(again.count(), 0, "the stored token was used");

    app.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_refused_access_token_is_refreshed_without_a_new_authorization() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[]).await;
    let app = protected_app(&auth).await;
    let (dir, store) = temp_store("refresh");
    let browser = Browser::new(REDIRECT);
    let client = Client::new(app.url(), tasks_capabilities()).oauth(oauth(
        app.url(),
        &store,
        browser.clone(),
    ));
    greet(&client).await;
    let before = store.load(app.url()).expect("store").expect("entry");
    let old = before.tokens.clone().expect("tokens");

    // The access token goes bad (revoked, expired early); the refresh token still works.
    let mut broken = before.clone();
    if let Some(t) = broken.tokens.as_mut() {
        t.access_token = "not-a-token".into();
    }
    store.save(app.url(), Some(&broken)).expect("save");
    let next = Browser::new(REDIRECT);
    let later =
        Client::new(app.url(), tasks_capabilities()).oauth(oauth(app.url(), &store, next.clone()));
    assert_eq!(greet(&later).await, "Hello, oauth!");
    assert_eq!(next.count(), 0, "refreshed, not authorized again");
    let after = store
        .load(app.url())
        .expect("store")
        .expect("entry")
        .tokens
        .expect("tokens");
    assert_ne!(after.access_token, "not-a-token");
    assert_ne!(after.access_token, old.access_token, "a new access token");
    assert_eq!(claims(&after.access_token)["aud"], json!(app.url()));

    // A refresh token the server no longer knows: the client logs in again.
    let mut dead = store.load(app.url()).expect("store").expect("entry");
    if let Some(t) = dead.tokens.as_mut() {
        t.access_token = "not-a-token".into();
        t.refresh_token = Some("not-a-refresh-token".into());
    }
    store.save(app.url(), Some(&dead)).expect("save");
    let last = Browser::new(REDIRECT);
    let relogin =
        Client::new(app.url(), tasks_capabilities()).oauth(oauth(app.url(), &store, last.clone()));
    assert_eq!(greet(&relogin).await, "Hello, oauth!");
    assert_eq!(
        last.count(),
        1,
        "a refused refresh token means a new authorization"
    );

    app.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_interactive_flow_receives_the_redirect_on_a_loopback_listener() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[]).await;
    let app = protected_app(&auth).await;
    let (dir, store) = temp_store("loopback");

    // The "browser" the CLI would open: it follows every redirect, the last one to the
    // client's own listener on 127.0.0.1.
    let browser = Browser::new("http://never.invalid/");
    let opened = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = opened.clone();
    let open = move |url: &url::Url| {
        seen.lock().expect("lock").push(url.to_string());
        let browser = browser.clone();
        let url = url.clone();
        tokio::spawn(async move {
            let _ = browser.visit(url).await;
        });
    };
    let agent = LoopbackBrowser::bind(0, open).expect("a loopback listener");
    let redirect = mcp_tasks_client::oauth::UserAgent::redirect_uri(&agent);
    assert!(redirect.starts_with("http://127.0.0.1:"), "{redirect}");
    let mut config = OAuthConfig::new("mcp-tasks tests");
    config.store = Some(store.clone());
    let oauth = Arc::new(OAuth::new(app.url(), config, agent).expect("OAuth"));
    let client = Client::new(app.url(), tasks_capabilities()).oauth(oauth.clone());
    assert_eq!(greet(&client).await, "Hello, oauth!");

    let urls = opened.lock().expect("lock").clone();
    assert_eq!(urls.len(), 1, "one authorization URL shown: {urls:?}");
    let shown = url::Url::parse(&urls[0]).expect("a URL");
    let param = |k: &str| {
        shown
            .query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.into_owned())
    };
    assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param("resource").as_deref(), Some(app.url()));
    assert_eq!(param("redirect_uri").as_deref(), Some(redirect.as_str()));
    let registered = store
        .load(app.url())
        .expect("store")
        .expect("entry")
        .client
        .expect("client");
    assert_eq!(registered.redirect_uri, redirect);

    oauth.logout().await.expect("logout");
    assert!(
        store.load(app.url()).expect("store").is_none(),
        "logout forgets the server"
    );

    app.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_machine_client_gets_its_token_by_the_client_credentials_grant() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth =
        AuthServer::start(&[("OAUTH_AS_MACHINE_CLIENT", "robot:robot-secret-robot-secret")]).await;
    let app = protected_app(&auth).await;
    let (dir, store) = temp_store("machine");
    let browser = Browser::new(REDIRECT);
    let mut config = OAuthConfig::new("mcp-tasks tests");
    config.store = Some(store.clone());
    config.client_credentials = Some(ClientCredentials {
        client_id: "robot".into(),
        secret: ClientSecretKind::Secret("robot-secret-robot-secret".into()),
    });
    let oauth = Arc::new(OAuth::new(app.url(), config, browser.clone()).expect("OAuth"));
    let client = Client::new(app.url(), tasks_capabilities()).oauth(oauth);
    assert_eq!(greet(&client).await, "Hello, oauth!");
    assert_eq!(browser.count(), 0, "no user agent for a machine client");
    let tokens = store
        .load(app.url())
        .expect("store")
        .expect("entry")
        .tokens
        .expect("tokens");
    let claims = claims(&tokens.access_token);
    assert_eq!(claims["aud"], json!(app.url()));
    assert_eq!(claims["sub"], "robot");

    // A wrong secret is refused by the token endpoint, and the call fails with that reason.
    let mut config = OAuthConfig::new("mcp-tasks tests");
    config.client_credentials = Some(ClientCredentials {
        client_id: "robot".into(),
        secret: ClientSecretKind::Secret("not-the-secret".into()),
    });
    let wrong = Arc::new(OAuth::new(app.url(), config, Browser::new(REDIRECT)).expect("OAuth"));
    let refused = Client::new(app.url(), tasks_capabilities())
        .oauth(wrong)
        .call_tool("greet", json!({ "name": "x" }))
        .await
        .expect_err("a wrong secret");
    assert!(
        matches!(&refused, ClientError::Auth(e) if e.to_string().contains("invalid_client")),
        "{refused:?}"
    );

    app.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
