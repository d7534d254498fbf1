//! The console in a real browser: Debian's `chromium`, headless, driven over WebDriver
//! (`fantoccini`) through `chromedriver`, against a real `mcp-tasks serve --console` with
//! bearer JWTs and a real `mcp-tasks worker` on a fresh database. `tests/browser/setup`
//! installs both programs (as root); without them the tests are skipped.
//!
//! Every test has a chromedriver of its own, started in a process group of its own and
//! killed with it on drop (which takes the browser along), and a throwaway profile. Every
//! wait polls the page until a deadline ([`PATIENCE`]); nothing sleeps for correctness.
//! Screenshots go to `MCP_TASKS_SCREENSHOTS` (default `target/console-screenshots/`); a
//! failed wait saves one too, named `failed-…`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use mcp_tasks_client::Client as McpClient;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::harness::jwt::{self, TempDir};
use crate::harness::oauth_as::AuthServer;
use crate::harness::procs::Proc;
use crate::harness::{Need, TestDb, skip};

/// How long anything in the browser may take: generous, for a loaded 2-core machine.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);

/// The worker's id, which the health page lists.
pub(super) const WORKER_ID: &str = "console-worker-1";

/// Where the installer found the programs.
struct Programs {
    chromium: String,
    chromedriver: String,
}

/// What `tests/browser/setup --check` found (it installs nothing: `tests/setup` and CI
/// do), read from what it printed. A test calls it after `skip(Need::Browser)`.
async fn programs() -> Programs {
    let text = crate::harness::install::printed("browser/setup", &["--check"])
        .await
        .unwrap_or_else(|why| panic!("the browser: {why}"));
    let path = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {key} line in what browser/setup printed: {text}"))
            .to_owned()
    };
    Programs {
        chromium: path("chromium="),
        chromedriver: path("chromedriver="),
    }
}

/// A chromedriver on a free port (it picks one with `--port=0` and says which). Killed,
/// with its whole process group (the browser it started), when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start(program: &str) -> Self {
        let mut child = Command::new(program)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = lines.next_line().await.expect("reading chromedriver") {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').trim().parse::<u16>().ok();
                }
            }
            None
        })
        .await
        .expect("chromedriver did not start within the patience")
        .expect("chromedriver exited before it said its port");
        // Keep draining its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The browser is chromedriver's child in the same group: it goes too, even when a
        // failed test never closed its session.
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Where screenshots go: `MCP_TASKS_SCREENSHOTS`, else `target/console-screenshots/`.
pub(super) fn screenshot_dir() -> PathBuf {
    std::env::var_os("MCP_TASKS_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots")
        })
}

/// How many browsers run at once in this test process: each is a handful of processes
/// and a few hundred MB, and the whole suite runs side by side on two cores.
static BROWSERS: Semaphore = Semaphore::const_new(2);

/// A headless chromium with a profile of its own, at the console of `origin`.
pub(super) struct Browser {
    pub(super) wd: Client,
    pub(super) origin: String,
    _driver: Driver,
    _profile: TempDir,
    _turn: SemaphorePermit<'static>,
}

impl Browser {
    pub(super) async fn open(origin: &str) -> Self {
        let turn = BROWSERS
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let programs = programs().await;
        let driver = Driver::start(&programs.chromedriver).await;
        let profile = TempDir::new();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": programs.chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.0.display()),
                ],
            }),
        );
        let wd = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url)
            .await
            .unwrap_or_else(|e| panic!("no WebDriver session with chromium: {e}"));
        Self {
            wd,
            origin: origin.to_owned(),
            _driver: driver,
            _profile: profile,
            _turn: turn,
        }
    }

    /// Ends the session (the browser quits); the driver goes when `self` is dropped.
    pub(super) async fn close(self) {
        let _ = self.wd.clone().close().await;
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    pub(super) async fn goto(&self, path: &str) {
        self.wd
            .goto(&self.url(path))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
    }

    /// The path of the page shown now.
    pub(super) async fn path(&self) -> String {
        self.wd
            .current_url()
            .await
            .map(|u| u.path().to_owned())
            .unwrap_or_default()
    }

    /// The element, if the page has one now.
    pub(super) async fn find(&self, css: &str) -> Option<Element> {
        self.wd.find(Locator::Css(css)).await.ok()
    }

    pub(super) async fn find_all(&self, css: &str) -> Vec<Element> {
        self.wd
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
    }

    /// The element's visible text, trimmed, if the page has it now.
    pub(super) async fn text(&self, css: &str) -> Option<String> {
        let element = self.find(css).await?;
        element.text().await.ok().map(|t| t.trim().to_owned())
    }

    /// What the page shows, as a reader sees it (`document.body.innerText`).
    pub(super) async fn body_text(&self) -> String {
        match self
            .wd
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
        {
            Ok(Value::String(s)) => s,
            _ => String::new(),
        }
    }

    /// Polls until `check` on the page says yes; on timeout saves a screenshot and fails
    /// with what the page showed.
    pub(super) async fn wait_until<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if check().await {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                let name: String = what
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .take(60)
                    .collect();
                self.shot(&format!("failed-{name}")).await;
                panic!(
                    "timed out after {PATIENCE:?} waiting for {what}; the page at {} shows:\n{}",
                    self.path().await,
                    self.body_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for an element and returns it.
    pub(super) async fn wait_for(&self, css: &str) -> Element {
        self.wait_until(&format!("an element {css}"), || async {
            self.find(css).await.is_some()
        })
        .await;
        self.find(css).await.expect("it was there a moment ago")
    }

    /// Waits until the element's text is `want`.
    pub(super) async fn wait_text(&self, css: &str, want: &str) {
        self.wait_until(&format!("{css} to read {want:?}"), || async {
            self.text(css).await.as_deref() == Some(want)
        })
        .await;
    }

    /// Waits until the element's text contains `part`.
    pub(super) async fn wait_text_containing(&self, css: &str, part: &str) {
        self.wait_until(&format!("{css} to contain {part:?}"), || async {
            self.text(css).await.is_some_and(|t| t.contains(part))
        })
        .await;
    }

    /// Waits until the browser shows a page whose path is `path`.
    pub(super) async fn wait_path(&self, path: &str) {
        self.wait_until(&format!("the page {path}"), || async {
            self.path().await == path
        })
        .await;
    }

    pub(super) async fn click(&self, css: &str) {
        self.wait_for(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Submits the form as a person would: its submit button, else the form itself.
    pub(super) async fn submit(&self, form: &str) {
        self.wait_for(form).await;
        let button = format!(
            "{form} button[type=submit], {form} input[type=submit], {form} button:not([type])"
        );
        if self.find(&button).await.is_some() {
            self.click(&button).await;
        } else {
            self.wd
                .form(Locator::Css(form))
                .await
                .unwrap_or_else(|e| panic!("the form {form}: {e}"))
                .submit_direct()
                .await
                .unwrap_or_else(|e| panic!("submitting {form}: {e}"));
        }
    }

    /// Marks the document shown now; [`Self::still_marked`] says whether the browser still
    /// shows that same document (no reload, no navigation since).
    pub(super) async fn mark(&self) {
        self.wd
            .execute("window.__mcpTasksMark = 'kept'; return true", vec![])
            .await
            .expect("marking the page");
    }

    pub(super) async fn still_marked(&self) -> bool {
        matches!(
            self.wd.execute("return window.__mcpTasksMark || null", vec![]).await,
            Ok(Value::String(s)) if s == "kept"
        )
    }

    /// Saves a PNG of the viewport as `<name>.png` in [`screenshot_dir`].
    pub(super) async fn shot(&self, name: &str) {
        let png = match self.wd.screenshot().await {
            Ok(png) => png,
            Err(e) => {
                crate::harness::announce(&format!("console: no screenshot {name}: {e}"));
                return;
            }
        };
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("the screenshot folder");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("writing a screenshot");
    }

    /// Signs in on the sign-in page by pasting `token`, and waits to leave that page.
    pub(super) async fn sign_in_with_token(&self, token: &str) {
        self.goto("/console/signin").await;
        let input = self.wait_for("form#signin-token input[name=token]").await;
        input.send_keys(token).await.expect("typing the token");
        self.submit("form#signin-token").await;
        self.wait_until("leaving the sign-in page", || async {
            let path = self.path().await;
            path.starts_with("/console") && path != "/console/signin"
        })
        .await;
    }

    /// Forgets the session (every cookie), as a fresh browser would have none.
    pub(super) async fn forget(&self) {
        self.wd
            .delete_all_cookies()
            .await
            .expect("deleting cookies");
    }

    /// The browser's cookies for the console, as a `Cookie` header (HttpOnly ones too,
    /// which the page's scripts cannot see).
    pub(super) async fn cookie_header(&self) -> String {
        let cookies = self.wd.get_all_cookies().await.expect("reading cookies");
        cookies
            .iter()
            .map(|c| format!("{}={}", c.name(), c.value()))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A replica serving the console with bearer JWTs, and (once started) a worker, on a
/// fresh database; the `demo` and `conformance` tools.
pub(super) struct Console {
    pub(super) db: TestDb,
    pub(super) replica: Proc,
    worker: Option<Proc>,
    pub(super) origin: String,
    /// The replica's resource (its MCP URL): the tokens' audience, and where the console
    /// sends the authorization server's redirects back to.
    resource: String,
}

impl Console {
    /// Tokens signed with the harness's HS256 secret, issuer [`jwt::ISSUER`].
    pub(super) async fn start() -> Self {
        Self::launch(&[
            ("MCP_TASKS_JWT_HS256_SECRET", jwt::SECRET),
            ("MCP_TASKS_JWT_ISSUER", jwt::ISSUER),
        ])
        .await
    }

    /// Tokens of the authorization server `server`, which the console signs in through.
    pub(super) async fn start_oauth(server: &AuthServer) -> Self {
        Self::launch(&[
            ("MCP_TASKS_JWT_JWKS", &server.jwks_url()),
            ("MCP_TASKS_JWT_ISSUER", &server.issuer),
            ("MCP_TASKS_AUTHORIZATION_SERVERS", &server.issuer),
        ])
        .await
    }

    async fn launch(env: &[(&str, &str)]) -> Self {
        let db = TestDb::new().await;
        // The resource must name the replica's real address before it starts (OAuth
        // redirects come back to it), so the port is picked here, not by the replica.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let listen = format!("127.0.0.1:{port}");
        let resource = format!("http://{listen}/mcp");
        let mut env = env.to_vec();
        env.push(("MCP_TASKS_RESOURCE", &resource));
        let replica = Proc::serve_args(
            &db.url,
            &[
                "serve",
                "--listen",
                &listen,
                "--tools",
                "demo,conformance",
                "--auth",
                "jwt",
                "--console",
            ],
            &env,
        )
        .await;
        let origin = format!("http://{}", replica.addr.expect("listening"));
        Self {
            db,
            replica,
            worker: None,
            origin,
            resource,
        }
    }

    /// Starts the worker (tasks created before stay `working` until then).
    pub(super) async fn start_worker(&mut self) {
        assert!(self.worker.is_none(), "the worker runs already");
        self.worker = Some(
            Proc::worker(
                &self.db.url,
                "demo,conformance",
                &[
                    ("MCP_TASKS_WORKER_ID", WORKER_ID),
                    ("MCP_TASKS_LEASE_MS", "5000"),
                    ("MCP_TASKS_POLL_MS", "200"),
                ],
            )
            .await,
        );
    }

    /// A bearer token of principal `sub` in `tenant`, for this replica.
    pub(super) fn token(&self, sub: &str, tenant: &str) -> String {
        jwt::hs256(
            jwt::SECRET.as_bytes(),
            &jwt::claims(&self.resource, sub, tenant),
        )
    }

    /// An MCP client of the replica as principal `sub` in `tenant`.
    pub(super) fn client(&self, sub: &str, tenant: &str) -> McpClient {
        McpClient::with_tasks(self.replica.url()).bearer(self.token(sub, tenant))
    }
}

/// An HTTP client that does not follow redirects, to see what the console answers.
pub(super) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(PATIENCE)
        .build()
        .expect("an HTTP client")
}

/// The harness itself, without the console: a page's text is read and waited on, the mark
/// survives in-page changes but not a reload, screenshots are PNGs, and the browser goes
/// with its driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_harness_reads_pages_tells_reloads_and_takes_screenshots() {
    if skip(Need::Browser).await {
        return;
    }
    let browser = Browser::open("").await;
    let page = "data:text/html,<title>t</title><p id=s>working</p>\
        <script>setTimeout(() => document.getElementById('s').textContent = 'done', 300)</script>";
    browser.wd.goto(page).await.expect("a data: page");
    browser.mark().await;
    browser.wait_text("#s", "done").await;
    assert!(browser.still_marked().await, "the page changed in place");
    browser.wd.refresh().await.expect("reload");
    assert!(!browser.still_marked().await, "a reload must lose the mark");
    let png = browser.wd.screenshot().await.expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let pid = browser._driver.child.id().expect("chromedriver runs") as i32;
    drop(browser);
    // Killing the group took everything chromedriver started (chromium included).
    crate::harness::eventually(PATIENCE, "the browser's processes to go", || async {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), None)
            .is_err()
            .then_some(())
    })
    .await;
}
