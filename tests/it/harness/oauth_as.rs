//! A real OAuth authorization server for the client's OAuth tests: `tests/oauth-as`, a
//! small program on oidc-provider (a certified OpenID Provider) run with Node, installed
//! from npm at the pinned version into a cache folder by `tests/oauth-as/setup`. Its only stand-in is
//! the user (always "alice", always consenting); and [`Browser`] stands in for the
//! browser: an HTTP client that keeps cookies and follows the real redirects.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use mcp_tasks_client::oauth::{OAuthError, UserAgent};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running authorization server. Killed when dropped.
pub(crate) struct AuthServer {
    _child: Child,
    pub(crate) issuer: String,
}

impl AuthServer {
    /// Starts one with `env` (`OAUTH_AS_SCOPES`, `OAUTH_AS_TENANT`, `OAUTH_AS_ACCESS_TTL`,
    /// `OAUTH_AS_REVOCATION`).
    pub(crate) async fn start(env: &[(&str, &str)]) -> Self {
        let dir = super::installed("oauth-as/setup")
            .await
            .unwrap_or_else(|why| {
                panic!("the authorization server (after skip(Need::AuthServer)): {why}")
            });
        let mut cmd = Command::new("node");
        cmd.arg("server.mjs")
            .current_dir(&dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("node (needed for the OAuth tests)");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let issuer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.expect("reading its output") {
                if let Some(issuer) = line.strip_prefix("issuer=") {
                    return issuer.to_owned();
                }
            }
            panic!("the authorization server exited before it listened")
        })
        .await
        .expect("the authorization server did not start within 30 s");
        // Keep draining its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            _child: child,
            issuer,
        }
    }

    pub(crate) fn jwks_url(&self) -> String {
        format!("{}/jwks", self.issuer)
    }
}

/// The user's browser: keeps cookies and follows the authorization server's redirects
/// (login, consent, back to `/auth`) until the one to the redirect URI, which it returns
/// without visiting. Counts the authorizations it went through.
#[derive(Debug, Clone)]
pub(crate) struct Browser {
    redirect_uri: String,
    http: reqwest::Client,
    pub(crate) authorizations: Arc<AtomicUsize>,
}

impl Browser {
    pub(crate) fn new(redirect_uri: &str) -> Self {
        let stop_at = redirect_uri.to_owned();
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.url().as_str().starts_with(&stop_at) {
                    attempt.stop()
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .expect("a browser");
        Self {
            redirect_uri: redirect_uri.to_owned(),
            http,
            authorizations: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Visits `url` and returns the redirect to the redirect URI.
    pub(crate) async fn visit(&self, url: url::Url) -> Result<url::Url, String> {
        self.authorizations.fetch_add(1, Ordering::SeqCst);
        let response = self.http.get(url).send().await.map_err(|e| e.to_string())?;
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("HTTP {} without a redirect", response.status()))?;
        let redirect = response.url().join(location).map_err(|e| e.to_string())?;
        if !redirect.as_str().starts_with(&self.redirect_uri) {
            return Err(format!("redirected to {redirect}"));
        }
        Ok(redirect)
    }

    pub(crate) fn count(&self) -> usize {
        self.authorizations.load(Ordering::SeqCst)
    }
}

impl UserAgent for Browser {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    fn authorize(&self, url: url::Url) -> BoxFuture<'_, Result<url::Url, OAuthError>> {
        Box::pin(async move { self.visit(url).await.map_err(OAuthError::Authorization) })
    }
}
