//! The user agent of the authorization-code flow: whatever takes the authorization URL to
//! the authorization server and brings back the redirect that carries the code.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use url::Url;

use super::OAuthError;

/// Takes the user (or a program standing in for one) through the authorization server.
pub trait UserAgent: Send + Sync + std::fmt::Debug {
    /// The redirect URI to register and send; the agent must be able to receive it.
    fn redirect_uri(&self) -> String;

    /// Visits `authorization_url` and returns the URL the authorization server redirected
    /// to (the redirect URI with `code`, `state` and possibly `iss`, or an `error`).
    fn authorize(&self, authorization_url: Url) -> BoxFuture<'_, Result<Url, OAuthError>>;
}

/// For authorization servers that approve without a person (test and conformance
/// servers, or one that already holds the user's session): GETs the authorization URL
/// without following redirects and reads the redirect from `Location`.
#[derive(Debug, Clone)]
pub struct Headless {
    redirect_uri: String,
    http: reqwest::Client,
}

impl Headless {
    pub fn new(redirect_uri: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Self {
            redirect_uri: redirect_uri.into(),
            http,
        }
    }
}

impl UserAgent for Headless {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    fn authorize(&self, authorization_url: Url) -> BoxFuture<'_, Result<Url, OAuthError>> {
        Box::pin(async move {
            let response = self
                .http
                .get(authorization_url.clone())
                .send()
                .await
                .map_err(|e| OAuthError::Http(format!("GET the authorization endpoint: {e}")))?;
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    OAuthError::Authorization(format!(
                        "the authorization endpoint answered HTTP {} without a redirect",
                        response.status()
                    ))
                })?;
            let redirect = authorization_url.join(location).map_err(|e| {
                OAuthError::Authorization(format!("bad redirect {location:?}: {e}"))
            })?;
            if !redirect.as_str().starts_with(&self.redirect_uri) {
                return Err(OAuthError::Authorization(format!(
                    "the authorization server redirected to {redirect}, not to the redirect URI"
                )));
            }
            Ok(redirect)
        })
    }
}

/// The interactive flow of a native app (RFC 8252 §7.3): a one-shot HTTP listener on the
/// loopback interface receives the redirect, and `open` shows the authorization URL to the
/// user (opens a browser, prints it, or both).
pub struct LoopbackBrowser {
    listener: Mutex<Option<std::net::TcpListener>>,
    redirect_uri: String,
    open: Box<dyn Fn(&Url) + Send + Sync>,
    timeout: Duration,
}

impl std::fmt::Debug for LoopbackBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackBrowser")
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

impl LoopbackBrowser {
    /// Listens on `127.0.0.1:port` (`0`: any free port) for the redirect to `/callback`.
    pub fn bind(port: u16, open: impl Fn(&Url) + Send + Sync + 'static) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        Ok(Self {
            listener: Mutex::new(Some(listener)),
            redirect_uri: format!("http://127.0.0.1:{port}/callback"),
            open: Box::new(open),
            timeout: Duration::from_secs(300),
        })
    }

    /// How long to wait for the user to finish (default five minutes).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn receive(&self, listener: &tokio::net::TcpListener) -> Result<Url, OAuthError> {
        let base = Url::parse(&self.redirect_uri)
            .map_err(|e| OAuthError::Authorization(format!("bad redirect URI: {e}")))?;
        loop {
            let (mut stream, _) = listener.accept().await.map_err(|e| {
                OAuthError::Authorization(format!("the loopback listener failed: {e}"))
            })?;
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head);
            let target = line
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("GET "))
                .and_then(|l| l.split(' ').next())
                .unwrap_or_default()
                .to_owned();
            let url = base.join(&target).ok();
            let is_callback = url.as_ref().is_some_and(|u| u.path() == base.path());
            let (status, body) = if is_callback {
                ("200 OK", "Signed in. You can close this window.")
            } else {
                ("404 Not Found", "Not found.")
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
            if let (true, Some(url)) = (is_callback, url) {
                return Ok(url);
            }
        }
    }
}

impl UserAgent for LoopbackBrowser {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    fn authorize(&self, authorization_url: Url) -> BoxFuture<'_, Result<Url, OAuthError>> {
        Box::pin(async move {
            let std_listener = self
                .listener
                .lock()
                .map_err(|_| OAuthError::Authorization("the loopback listener is poisoned".into()))?
                .as_ref()
                .map(std::net::TcpListener::try_clone)
                .transpose()
                .map_err(|e| OAuthError::Authorization(format!("loopback listener: {e}")))?
                .ok_or_else(|| OAuthError::Authorization("no loopback listener".into()))?;
            let listener = tokio::net::TcpListener::from_std(std_listener)
                .map_err(|e| OAuthError::Authorization(format!("loopback listener: {e}")))?;
            (self.open)(&authorization_url);
            tokio::time::timeout(self.timeout, self.receive(&listener))
                .await
                .map_err(|_| {
                    OAuthError::Authorization(format!(
                        "no redirect reached {} within {:?}",
                        self.redirect_uri, self.timeout
                    ))
                })?
        })
    }
}
