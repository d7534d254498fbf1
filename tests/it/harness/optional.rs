//! The test groups that need more than Rust and PostgreSQL: Node and npm packages, PyPI
//! packages, Debian's chromium, PostgreSQL's server binaries (for a cluster of the test's
//! own). A test of such a group starts with `if skip(Need::…).await { return; }`. What a
//! group needs is looked for once per test process: when it is there (or installed now,
//! into the user's cache, by the group's setup script) the tests run; when it is missing,
//! one line on stderr says which group is skipped and why, and its tests return at once.
//! `tests/setup` installs everything, after which nothing is skipped.
//!
//! With `MCP_TASKS_TESTS_REQUIRE_ALL=1` (CI sets it) a skip is a failure instead: CI runs
//! every test.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

use super::install;

/// The variable that turns every skip into a failure.
pub(crate) const REQUIRE_ALL: &str = "MCP_TASKS_TESTS_REQUIRE_ALL";

/// A group of tests, by what it needs beyond Rust and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Need {
    /// The TypeScript and Python SDKs (`tests/clients/setup`).
    ClientLibraries,
    /// server-everything and FastMCP (`tests/upstreams/setup`).
    UpstreamServers,
    /// oidc-provider (`tests/oauth-as/setup`).
    AuthServer,
    /// The official conformance suite (`tests/conformance/setup`).
    ConformanceSuite,
    /// Debian's chromium and chromedriver (`tests/browser/setup`).
    Browser,
    /// PostgreSQL's server binaries, for tests that stop and restart a cluster of their own.
    LocalPostgres,
    /// PostgreSQL's server binaries and Debian's PgBouncer (`tests/pooler/setup`).
    Pooler,
}

impl Need {
    /// The tests that need it, as the skip line names them.
    pub(crate) fn tests(self) -> &'static str {
        match self {
            Self::ClientLibraries => "the TypeScript/Python client tests (tests/it/clients)",
            Self::UpstreamServers => {
                "the upstream-server tests (tests/it/upstream: server-everything, FastMCP)"
            }
            Self::AuthServer => {
                "the OAuth tests against oidc-provider (tests/it/oauth.rs, console)"
            }
            Self::ConformanceSuite => {
                "the OAuth tests against the conformance suite's servers (tests/it/oauth_suite.rs)"
            }
            Self::Browser => "the console's browser tests (tests/it/console/browser*.rs)",
            Self::LocalPostgres => {
                "the tests that restart a PostgreSQL of their own (tests/it/reliability.rs)"
            }
            Self::Pooler => "the tests behind PgBouncer (tests/it/pooler.rs)",
        }
    }

    /// What makes it present.
    fn remedy(self) -> &'static str {
        match self {
            Self::Browser | Self::Pooler => "run tests/setup as root",
            Self::LocalPostgres => "install the PostgreSQL server binaries",
            _ => "run tests/setup",
        }
    }

    /// Looks for it (and, for the npm and PyPI packages, installs it into the user's
    /// cache when the tools to do so are there): `Err` says what is missing.
    async fn find(self) -> Result<(), String> {
        match self {
            Self::ClientLibraries => install::installed("clients/setup").await.map(drop),
            Self::UpstreamServers => install::installed("upstreams/setup").await.map(drop),
            Self::AuthServer => install::installed("oauth-as/setup").await.map(drop),
            Self::ConformanceSuite => install::installed("conformance/setup").await.map(drop),
            Self::Browser => install::printed("browser/setup", &["--check"])
                .await
                .map(drop),
            Self::LocalPostgres => {
                mcp_tasks_devdb::DevDatabase::can_start().map_err(|e| format!("{e:#}"))
            }
            Self::Pooler => mcp_tasks_devdb::DevDatabase::can_start()
                .and_then(|()| mcp_tasks_devdb::DevPooler::can_start())
                .map_err(|e| format!("{e:#}")),
        }
    }
}

/// What to do with the tests of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Run,
    /// Skipped, with the line that says so.
    Skip(String),
    /// A skip under `MCP_TASKS_TESTS_REQUIRE_ALL`: the test fails with this.
    Fail(String),
}

/// The verdict for `need`, given what looking for it found.
pub(crate) fn verdict(need: Need, found: &Result<(), String>, require_all: bool) -> Verdict {
    match found {
        Ok(()) => Verdict::Run,
        Err(why) if require_all => Verdict::Fail(format!(
            "{} cannot run here: {why}; {REQUIRE_ALL} is set, so that is a failure, not a skip ({})",
            need.tests(),
            need.remedy()
        )),
        Err(why) => Verdict::Skip(format!(
            "tests: skipping {}: {why}; {}",
            need.tests(),
            need.remedy()
        )),
    }
}

/// What looking for a group found: filled once.
type Found = OnceCell<Result<(), String>>;

/// What was found for each group in this process; the skip line is said when a group is
/// first looked for, so once per process however many of its tests run.
#[derive(Default)]
pub(crate) struct Ledger {
    found: Mutex<BTreeMap<Need, Arc<Found>>>,
}

impl Ledger {
    pub(crate) const fn new() -> Self {
        Self {
            found: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether the tests of `need` are skipped; `find` looks for it (the first time only)
    /// and `say` prints the skip line. Panics under `require_all` instead of skipping.
    pub(crate) async fn skip<F, Fut>(
        &self,
        need: Need,
        require_all: bool,
        find: F,
        say: impl FnOnce(&str),
    ) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let once = self
            .found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(need)
            .or_default()
            .clone();
        let mut first = false;
        let found = once
            .get_or_init(|| {
                first = true;
                find()
            })
            .await;
        match verdict(need, found, require_all) {
            Verdict::Run => false,
            Verdict::Skip(line) => {
                if first {
                    say(&line);
                }
                true
            }
            Verdict::Fail(why) => panic!("{why}"),
        }
    }
}

/// Whether this test (of the group that needs `need`) is skipped here; see the module.
pub(crate) async fn skip(need: Need) -> bool {
    static LEDGER: Ledger = Ledger::new();
    let require_all = std::env::var_os(REQUIRE_ALL).is_some_and(|v| !v.is_empty() && v != "0");
    LEDGER
        .skip(need, require_all, || need.find(), super::announce)
        .await
}
