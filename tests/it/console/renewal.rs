//! OAuth sessions outlive their access tokens: the console keeps the refresh token the
//! real test authorization server (oidc-provider) issues, renews the access token when
//! it is about to expire, and goes on; requests renewing at once share one renewal (the
//! server rotates refresh tokens and revokes the grant when a spent one is used again);
//! a renewal refused (signed out, so revoked) or impossible (the server down) ends at the
//! sign-in page with the reason; a signed-out session is never renewed, even where the
//! server would still honour its refresh token, and signing out spends none. Access tokens live 2 s, checked with no leeway; the
//! tests wait for expiry, they time nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_server::KeySource;
use reqwest::cookie::CookieStore;

use super::{console_on, text_of};
use crate::harness::jwt::Jwt;
use crate::harness::oauth_as::AuthServer;
use crate::harness::{Need, TestApp, skip};

const ACCESS_TTL: Duration = Duration::from_secs(2);

async fn app(auth: &AuthServer) -> TestApp {
    let issuer = auth.issuer.clone();
    let jwt = Jwt::new(KeySource::JwksUrl(auth.jwks_url()))
        .tweak(move |c| {
            c.issuer = Some(issuer.clone());
            c.leeway = Duration::ZERO;
        })
        .authorization_servers(vec![auth.issuer.clone()]);
    TestApp::builder().jwt(jwt).config(console_on).start().await
}

/// A browser signed in through the authorization server: keeps cookies, follows
/// redirects.
struct Browser {
    origin: String,
    jar: Arc<reqwest::cookie::Jar>,
    http: reqwest::Client,
    signed_in: Instant,
}

impl Browser {
    async fn sign_in(app: &TestApp) -> Self {
        let origin = app.replicas[0].origin();
        let jar = Arc::new(reqwest::cookie::Jar::default());
        let http = reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .build()
            .expect("a browser");
        let signed_in = Instant::now();
        let done = http
            .get(format!("{origin}/console/oauth/start"))
            .send()
            .await
            .expect("the authorization");
        assert_eq!(done.url().path(), "/console/oauth/callback");
        assert_eq!(
            done.status(),
            200,
            "{}",
            done.text().await.unwrap_or_default()
        );
        let browser = Self {
            origin,
            jar,
            http,
            signed_in,
        };
        assert_eq!(browser.viewer().await.as_deref(), Ok("acme / alice"));
        browser
    }

    /// The session cookie's value.
    fn session(&self) -> String {
        let url = format!("{}/console/tasks", self.origin)
            .parse()
            .expect("url");
        let cookies = self.jar.cookies(&url).expect("cookies");
        cookies
            .to_str()
            .expect("ascii")
            .split("; ")
            .find_map(|c| c.strip_prefix("mcp_tasks_console="))
            .expect("a session cookie")
            .to_owned()
    }

    /// Who the tasks page is served to, or the page served instead.
    async fn viewer(&self) -> Result<String, String> {
        let page = self
            .http
            .get(format!("{}/console/tasks", self.origin))
            .send()
            .await
            .expect("tasks");
        read_viewer(page).await
    }

    /// Waits until the session's first access token has expired.
    async fn past_expiry(&self) {
        while self.signed_in.elapsed() <= ACCESS_TTL + Duration::from_millis(200) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn read_viewer(page: reqwest::Response) -> Result<String, String> {
    let status = page.status();
    let body = page.text().await.expect("body");
    match text_of(&body, "viewer") {
        Some(viewer) if status == 200 => Ok(viewer),
        _ => Err(format!("HTTP {status}: {body}")),
    }
}

/// The CSRF token of the tasks page `browser` is served.
async fn csrf(browser: &Browser) -> String {
    let page = browser
        .http
        .get(format!("{}/console/tasks", browser.origin))
        .send()
        .await
        .expect("tasks")
        .text()
        .await
        .expect("body");
    let marker = r#"name="csrf" value=""#;
    let start = page.find(marker).expect("a form") + marker.len();
    page[start..start + page[start..].find('"').expect("end")].to_owned()
}

/// The tasks page of `origin` for `cookie`, from a client that keeps no cookies.
async fn with_cookie(origin: &str, cookie: &str) -> (Result<String, String>, Option<String>) {
    let page = reqwest::Client::new()
        .get(format!("{origin}/console/tasks"))
        .header("cookie", format!("mcp_tasks_console={cookie}"))
        .send()
        .await
        .expect("tasks");
    let renewed = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("mcp_tasks_console="))
        .map(|c| c.split(';').next().unwrap_or_default().to_owned());
    (read_viewer(page).await, renewed)
}

#[tokio::test]
async fn an_oauth_session_goes_on_past_the_expiry_of_its_access_tokens() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[("OAUTH_AS_ACCESS_TTL", "2")]).await;
    let app = app(&auth).await;
    let browser = Browser::sign_in(&app).await;
    let first = browser.session();
    assert!(!first.contains("eyJ"), "no JWT in the cookie: {first}");

    // Three access-token lifetimes, a page every 100 ms: each is served, and the cookie
    // is renewed along the way.
    let mut cookies = vec![first];
    while browser.signed_in.elapsed() <= ACCESS_TTL * 3 {
        assert_eq!(browser.viewer().await.as_deref(), Ok("acme / alice"));
        let now = browser.session();
        if cookies.last() != Some(&now) {
            cookies.push(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        cookies.len() >= 3,
        "renewed {} times in three lifetimes",
        cookies.len() - 1
    );
    app.stop().await;
}

#[tokio::test]
async fn requests_renewing_at_once_share_one_renewal_of_the_rotated_refresh_token() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[("OAUTH_AS_ACCESS_TTL", "2")]).await;
    let app = app(&auth).await;
    let browser = Browser::sign_in(&app).await;
    let stale = browser.session();
    browser.past_expiry().await;

    // Eight requests with the same expired session at once: each renews, only one
    // spends the refresh token (a second spend would make the server revoke the grant).
    let origin = browser.origin.clone();
    let answers = futures::future::join_all((0..8).map(|_| {
        let (origin, stale) = (origin.clone(), stale.clone());
        async move { with_cookie(&origin, &stale).await }
    }))
    .await;
    let mut renewed = Vec::new();
    for (viewer, cookie) in answers {
        assert_eq!(viewer.as_deref(), Ok("acme / alice"));
        renewed.push(cookie.expect("a renewed cookie"));
    }

    // The grant lives on: the renewed session renews again once its token expires.
    let since = Instant::now();
    while since.elapsed() <= ACCESS_TTL + Duration::from_millis(200) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (viewer, again) = with_cookie(&origin, &renewed[7]).await;
    assert_eq!(viewer.as_deref(), Ok("acme / alice"));
    assert!(again.is_some(), "renewed a second time");
    app.stop().await;
}

#[tokio::test]
async fn a_session_that_cannot_be_renewed_ends_at_the_sign_in_page_with_the_reason() {
    if skip(Need::AuthServer).await {
        return;
    }
    let auth = AuthServer::start(&[("OAUTH_AS_ACCESS_TTL", "2")]).await;
    let app = app(&auth).await;
    let revoked = Browser::sign_in(&app).await;
    let unreachable = Browser::sign_in(&app).await;
    let copy = revoked.session();

    // Signing out revokes the refresh token at the server (and the session everywhere).
    let page = revoked
        .http
        .get(format!("{}/console/tasks", revoked.origin))
        .send()
        .await
        .expect("tasks")
        .text()
        .await
        .expect("body");
    let marker = r#"name="csrf" value=""#;
    let start = page.find(marker).expect("a form") + marker.len();
    let csrf = &page[start..start + page[start..].find('"').expect("end")];
    let out = revoked
        .http
        .post(format!("{}/console/signout", revoked.origin))
        .form(&[("csrf", csrf)])
        .send()
        .await
        .expect("sign out");
    assert_eq!(out.url().path(), "/console/signin");

    revoked.past_expiry().await;
    let (viewer, _) = with_cookie(&revoked.origin, &copy).await;
    let page = viewer.expect_err("a signed-out session renews nothing");
    assert!(page.starts_with("HTTP 401"), "{page}");
    assert!(page.contains(r#"id="signin-error""#), "{page}");
    // Found signed out before its refresh token is spent (which the server has revoked
    // too, and would refuse).
    assert!(page.contains("it was signed out"), "{page}");
    assert!(page.contains(r#"id="signin-oauth""#), "{page}");

    // The authorization server gone: the next renewal ends the session, no error page.
    drop(auth);
    unreachable.past_expiry().await;
    let page = unreachable
        .viewer()
        .await
        .expect_err("no server to renew at");
    assert!(page.starts_with("HTTP 401"), "{page}");
    assert!(page.contains("could not be reached"), "{page}");
    // Signed out: the sign-in page gave the browser a new, anonymous session.
    let next = unreachable.viewer().await.expect_err("signed out");
    assert!(next.contains(r#"id="signin-token""#), "{next}");
    app.stop().await;
}

#[tokio::test]
async fn a_signed_out_session_is_not_renewed_even_where_its_refresh_token_is_still_good() {
    // No revocation at the server: signing out ends the session in our store only, and
    // its refresh token would still buy new access tokens.
    let auth =
        AuthServer::start(&[("OAUTH_AS_ACCESS_TTL", "2"), ("OAUTH_AS_REVOCATION", "off")]).await;
    let app = app(&auth).await;
    let browser = Browser::sign_in(&app).await;
    let csrf = csrf(&browser).await;
    let copy = browser.session();

    // Signed out once the access token has expired: the session is ended all the same,
    // by the owner its expired token names, and nothing is renewed to do it.
    browser.past_expiry().await;
    let out = browser
        .http
        .post(format!("{}/console/signout", browser.origin))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .expect("sign out");
    assert_eq!(out.url().path(), "/console/signin");

    // A copy of the cookie, due for renewal: ended, and its refresh token left unspent.
    let (viewer, _) = with_cookie(&browser.origin, &copy).await;
    let page = viewer.expect_err("a signed-out session renewed itself");
    assert!(page.starts_with("HTTP 401"), "{page}");
    assert!(page.contains("it was signed out"), "{page}");
    let mut conn = app.db.sql().await;
    let spent: i64 = sqlx::query_scalar("SELECT count(*) FROM console_refreshes")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(spent, 0, "a refresh token was spent");
    app.stop().await;
}
