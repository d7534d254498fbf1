//! The configuration file's scheduling limits (`max_concurrency`, `max_per_second`,
//! `burst`) are checked today, but claims do not enforce them yet: a process given any of
//! them says so when it starts, so that a limit is never taken for held. (The parsing
//! itself is tested in `crates/upstream/tests`; weights and priorities, which do hold, in
//! `tests/it/fairness.rs`.)

use std::time::Duration;

use super::Scratch;
use super::logged::Logged;
use crate::harness::{TestDb, eventually};

const NOT_ENFORCED: &str = "checked but not enforced yet";

#[tokio::test]
async fn scheduling_limits_are_reported_as_not_enforced_yet() {
    let db = TestDb::new().await;
    let scratch = Scratch::new();
    // Weights and priorities are enforced: nothing to warn of.
    let plain = scratch.write(
        "plain.toml",
        "[tenant.\"acme\"]\nweight = 3\n\n[tool.\"generate_report\"]\npriority = 2\n",
    );
    let limited = scratch.write(
        "limited.toml",
        "[scheduling]\ntenant_max_concurrency = 10\n\n[tool.\"generate_report\"]\nmax_concurrency = 4\n",
    );
    for (sub, args) in [
        ("worker", vec!["worker", "--tools", "demo"]),
        (
            "serve",
            vec!["serve", "--listen", "127.0.0.1:0", "--tools", "demo"],
        ),
    ] {
        let quiet = Logged::start(
            sub,
            &db.url,
            &[&args[..], &["--config", &plain]].concat(),
            &[],
        )
        .await;
        let warned = Logged::start(
            sub,
            &db.url,
            &[&args[..], &["--config", &limited]].concat(),
            &[],
        )
        .await;
        // The log is read beside the ready line, not before it.
        let lines = eventually(Duration::from_secs(10), "the warning", || async {
            let lines = warned.logged(NOT_ENFORCED);
            (!lines.is_empty()).then_some(lines)
        })
        .await;
        assert_eq!(lines.len(), 1, "{sub}: one warning: {:?}", warned.log());
        assert!(lines[0].contains("WARN"), "{sub}: at WARN: {}", lines[0]);
        assert!(
            quiet.logged(NOT_ENFORCED).is_empty(),
            "{sub}: a file without limits says nothing of them: {:?}",
            quiet.log()
        );
    }
}
