//! The skips of the optional test groups (`harness::optional`): a group whose programs are
//! missing is skipped with one line per process, a present one runs, and under
//! `MCP_TASKS_TESTS_REQUIRE_ALL` a skip is a failure; the setup scripts say what is
//! missing with exit status 3 on a machine without Node or chromium.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::harness::install;
use crate::harness::jwt::TempDir;
use crate::harness::optional::{Ledger, Need, REQUIRE_ALL, Verdict, verdict};

#[test]
fn a_missing_group_is_skipped_with_its_reason_or_fails_when_all_are_required() {
    let missing = Err("node/npm not found".to_owned());
    assert_eq!(verdict(Need::ClientLibraries, &Ok(()), false), Verdict::Run);
    assert_eq!(verdict(Need::ClientLibraries, &Ok(()), true), Verdict::Run);
    assert_eq!(
        verdict(Need::ClientLibraries, &missing, false),
        Verdict::Skip(
            "tests: skipping the TypeScript/Python client tests (tests/it/clients): \
             node/npm not found; run tests/setup"
                .to_owned()
        )
    );
    let Verdict::Fail(why) = verdict(Need::Browser, &missing, true) else {
        panic!("a skip under {REQUIRE_ALL} must be a failure");
    };
    assert!(why.contains(REQUIRE_ALL), "{why}");
    assert!(why.contains("node/npm not found"), "{why}");
    assert!(why.contains("run tests/setup as root"), "{why}");
}

/// Asks `ledger` about `need` from `n` tests at once; returns their answers and the
/// lines said.
async fn ask(
    ledger: &Arc<Ledger>,
    need: Need,
    n: usize,
    found: Result<(), String>,
) -> (Vec<bool>, Vec<String>, usize) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let looked = Arc::new(AtomicUsize::new(0));
    let mut asks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (ledger, lines, looked, found) =
            (ledger.clone(), lines.clone(), looked.clone(), found.clone());
        asks.spawn(async move {
            ledger
                .skip(
                    need,
                    false,
                    || async move {
                        looked.fetch_add(1, Ordering::SeqCst);
                        // Long enough for every other ask to arrive while this one looks.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        found
                    },
                    |line| lines.lock().expect("lines").push(line.to_owned()),
                )
                .await
        });
    }
    let answers = asks.join_all().await;
    let said = lines.lock().expect("lines").clone();
    (answers, said, looked.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_group_is_looked_for_and_said_once_however_many_tests_ask() {
    let ledger = Arc::new(Ledger::new());
    let (answers, said, looked) =
        ask(&ledger, Need::Browser, 8, Err("chromium not found".into())).await;
    assert_eq!(answers, [true; 8], "every test of the group is skipped");
    assert_eq!(looked, 1, "looked for once");
    assert_eq!(
        said,
        [
            "tests: skipping the console's browser tests (tests/it/console/browser*.rs): \
          chromium not found; run tests/setup as root"
        ]
    );
    // Later tests of the group: skipped, nothing said again.
    let (answers, said, looked) = ask(&ledger, Need::Browser, 3, Ok(())).await;
    assert_eq!((answers, said, looked), (vec![true; 3], vec![], 0));

    // Another group is its own: present, so its tests run, and nothing is said.
    let (answers, said, looked) = ask(&ledger, Need::AuthServer, 4, Ok(())).await;
    assert_eq!((answers, said, looked), (vec![false; 4], vec![], 1));
}

#[tokio::test]
#[should_panic(expected = "MCP_TASKS_TESTS_REQUIRE_ALL is set")]
async fn under_require_all_a_missing_group_fails_its_tests() {
    let ledger = Ledger::new();
    ledger
        .skip(
            Need::UpstreamServers,
            true,
            || async { Err("python3 with venv not found".to_owned()) },
            |line| panic!("said {line:?} instead of failing"),
        )
        .await;
}

/// A PATH with only the programs the scripts need to get as far as their checks (bash
/// for `#!/usr/bin/env bash`, dirname): no node, npm or python3.
fn bare_path() -> TempDir {
    let dir = TempDir::new();
    for program in ["bash", "dirname"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(program))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{program} is not on PATH"));
        std::os::unix::fs::symlink(&found, dir.0.join(program)).expect("symlink");
    }
    dir
}

#[tokio::test]
async fn without_node_the_setup_scripts_say_what_is_missing() {
    let bin = bare_path();
    let path = bin.0.display().to_string();
    // Empty caches, so a script cannot answer from an earlier install.
    let cache = TempDir::new();
    let cache = cache.0.display().to_string();
    for script in [
        "clients/setup",
        "upstreams/setup",
        "oauth-as/setup",
        "conformance/setup",
    ] {
        let env = [
            ("PATH", path.as_str()),
            ("XDG_CACHE_HOME", cache.as_str()),
            ("MCP_TASKS_CLIENTS_CACHE", cache.as_str()),
            ("MCP_TASKS_UPSTREAMS_CACHE", cache.as_str()),
            ("MCP_TASKS_OAUTH_AS_CACHE", cache.as_str()),
            ("MCP_CONFORMANCE_CACHE", cache.as_str()),
        ];
        let found = install::run(script, &[], &env).await;
        assert_eq!(found, Err("node/npm not found".to_owned()), "{script}");
    }
}

#[tokio::test]
async fn without_chromium_the_browser_check_says_so_and_installs_nothing() {
    let found = install::run(
        "browser/setup",
        &["--check"],
        &[("MCP_TASKS_CHROMIUM", "/nonexistent/chromium")],
    )
    .await;
    let why = found.expect_err("no chromium there");
    assert!(
        why.starts_with("/nonexistent/chromium or ") && why.contains("not found"),
        "{why}"
    );
}
