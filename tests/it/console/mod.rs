//! The web console over HTTP (reqwest, no browser; the browser tests drive chromium):
//! sign-in and its cookie, who sees which task, CSRF, the actions through the API's own
//! code paths, the live stream, and OAuth against the real test authorization server.
//!
//! [`Console`] stands in for a browser: it keeps cookies, never follows redirects (the
//! tests check each one), and reads the CSRF token from the page it was served.
//!
//! `live_lists`: the live parts of the tasks list and the inbox. `stream_ends`: every
//! live stream ends with its session (a sign-out in another tab, on another replica)
//! and at its maximum lifetime. `tenants`: wake-ups reach only their tenant's streams,
//! and health streams have a lower limit of their own.
//!
//! `browser`, `browser_tasks`, `browser_access`: the acceptance of issue 15 in a real
//! browser, Debian's chromium over WebDriver, with a screenshot of every page.

mod access;
mod actions;
mod browser;
mod browser_access;
mod browser_tasks;
mod cookie;
mod live_lists;
mod oauth;
mod renewal;
mod replicas;
mod stream_ends;
mod tenants;
mod views;
mod workers;

use mcp_tasks_server::{ConsoleConfig, ServerConfig};
use reqwest::header::HeaderMap;

/// Turns the console on in a replica's configuration.
pub(crate) fn console_on(c: &mut ServerConfig) {
    c.console = Some(ConsoleConfig::default());
}

/// One browser on the console of the replica at `origin`.
pub(crate) struct Console {
    origin: String,
    http: reqwest::Client,
    /// Headers sent with every request (the header authentication of the test replicas).
    extra: Vec<(String, String)>,
}

/// A page as served.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Page {
    pub(crate) fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The first CSRF token of the page's forms.
    pub(crate) fn csrf(&self) -> String {
        let marker = r#"name="csrf" value=""#;
        let start = self
            .body
            .find(marker)
            .unwrap_or_else(|| panic!("no CSRF field in {}", self.body))
            + marker.len();
        let len = self.body[start..].find('"').expect("end of the value");
        self.body[start..start + len].to_owned()
    }

    pub(crate) fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    }

    pub(crate) fn has(&self, needle: &str) -> bool {
        self.body.contains(needle)
    }
}

impl Console {
    /// A browser on the replica whose MCP endpoint is `mcp_url`.
    pub(crate) fn new(mcp_url: &str) -> Self {
        let origin = mcp_url.trim_end_matches("/mcp").to_owned();
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a browser");
        Self {
            origin,
            http,
            extra: Vec::new(),
        }
    }

    /// The same browser (the same cookies) on the replica whose MCP endpoint is `mcp_url`:
    /// a cookie is the host's whatever the port, as browsers keep them.
    pub(crate) fn at(&self, mcp_url: &str) -> Self {
        Self {
            origin: mcp_url.trim_end_matches("/mcp").to_owned(),
            http: self.http.clone(),
            extra: self.extra.clone(),
        }
    }

    /// As principal `who` of tenant `tenant` of a replica with header authentication.
    pub(crate) fn signed_as(mut self, tenant: &str, who: &str) -> Self {
        self.extra.push(("x-test-tenant".into(), tenant.into()));
        self.extra.push(("x-test-principal".into(), who.into()));
        self
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    async fn read(response: reqwest::Response) -> Page {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.expect("a body");
        Page {
            status,
            headers,
            body,
        }
    }

    pub(crate) async fn get(&self, path: &str) -> Page {
        Self::read(self.send_get(path).await).await
    }

    /// A GET whose answer is read by the caller (an event stream).
    pub(crate) async fn send_get(&self, path: &str) -> reqwest::Response {
        let mut request = self.http.get(self.url(path));
        for (k, v) in &self.extra {
            request = request.header(k, v);
        }
        request.send().await.expect("GET")
    }

    /// A form post of `fields`, with `headers` besides.
    pub(crate) async fn post_with(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut request = self
            .http
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        for (k, v) in &self.extra {
            request = request.header(k, v);
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        Self::read(request.send().await.expect("POST")).await
    }

    pub(crate) async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.post_with(path, fields, &[]).await
    }

    /// Opens the sign-in page (which gives the browser its session cookie) and, when the
    /// replica needs no token, follows it on to the tasks.
    pub(crate) async fn open(&self) -> Page {
        let page = self.get("/console/signin").await;
        assert!(
            page.status == 200 || page.status == 303,
            "sign-in page: {page:?}"
        );
        page
    }

    /// Signs in with a pasted bearer token.
    pub(crate) async fn sign_in(&self, token: &str) -> Page {
        let form = self.open().await;
        assert_eq!(form.status, 200, "{form:?}");
        self.post(
            "/console/signin",
            &[("csrf", &form.csrf()), ("token", token)],
        )
        .await
    }

    /// The task page, with its CSRF token.
    pub(crate) async fn task(&self, id: &str) -> Page {
        self.get(&format!("/console/tasks/{id}")).await
    }
}

/// The text of the element with `id` (its first text, up to the next tag).
pub(crate) fn text_of(body: &str, id: &str) -> Option<String> {
    let at = body.find(&format!(r#"id="{id}""#))?;
    let open_end = at + body[at..].find('>')? + 1;
    let close = body[open_end..].find('<')?;
    Some(body[open_end..open_end + close].to_owned())
}
