//! Third-party programs the tests drive, installed on demand by a setup script under
//! `tests/` (pinned versions, into a cache under `~/.cache`). A script prints the folder it
//! installed into on stdout, says what went wrong on stderr, and is safe to run from
//! several test processes at once; here it runs once per test process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

/// The folder `script` (a path relative to `tests/`, e.g. `clients/setup`) installed into.
/// Any failure of the script fails the test, with its stderr passed through.
pub(crate) async fn installed(script: &str) -> PathBuf {
    static RUNS: Mutex<BTreeMap<String, Arc<OnceCell<PathBuf>>>> = Mutex::new(BTreeMap::new());
    let once = RUNS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(script.to_owned())
        .or_default()
        .clone();
    once.get_or_init(|| run(script)).await.clone()
}

async fn run(script: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = tokio::process::Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed (see its stderr above; its header comment says what it needs, such as \
         Node with npm, Python 3 with venv, and the package registries)",
        script.display()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
