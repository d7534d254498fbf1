//! Third-party programs the tests drive, installed on demand by a setup script under
//! `tests/` (pinned versions, into a cache under `~/.cache`). A script prints what it
//! installed on stdout, says what went wrong on stderr, and is safe to run from several
//! test processes at once; here it runs once per test process. Exit status 3 means that
//! something it needs is not on this machine (Node, Python's venv, chromium without root):
//! [`super::optional`] turns that into a skip of the tests that need it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

/// A setup script's exit status when what it needs is not on this machine.
const MISSING: i32 = 3;

/// What `script` (a path relative to `tests/`, e.g. `clients/setup`) printed: the folder
/// it installed into, or `Err` with the one line saying what is missing here. Any other
/// failure of the script fails the test, with its stderr.
pub(crate) async fn installed(script: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(printed(script, &[]).await?.trim()))
}

/// A script's stdout, or what is missing; filled by its one run in this process.
type Printed = OnceCell<Result<String, String>>;

/// What `script args` printed on stdout, once per test process (see [`installed`]).
pub(crate) async fn printed(script: &str, args: &[&str]) -> Result<String, String> {
    static RUNS: Mutex<BTreeMap<String, Arc<Printed>>> = Mutex::new(BTreeMap::new());
    let key = std::iter::once(script)
        .chain(args.iter().copied())
        .collect::<Vec<_>>();
    let once = RUNS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key.join(" "))
        .or_default()
        .clone();
    once.get_or_init(|| run(script, args, &[])).await.clone()
}

/// Runs `script args` with `env` added to the environment: its stdout, or the reason
/// something is missing (exit status 3). Any other failure panics with its stderr.
pub(crate) async fn run(
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = tokio::process::Command::new(&path)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(MISSING) {
        let line = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        // "clients/setup: node/npm not found" says it in the skip line as "node/npm not found".
        let why = line.strip_prefix(&format!("{script}: ")).unwrap_or(line);
        return Err(why.trim().to_owned());
    }
    assert!(
        out.status.success(),
        "{} failed ({}); its header comment says what it needs, such as Node with npm, \
         Python 3 with venv, and the package registries:\n{stderr}",
        path.display(),
        out.status
    );
    // What the install said (npm, pip), past the test harness's output capture.
    if !stderr.trim().is_empty() {
        super::announce(stderr.trim_end());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
