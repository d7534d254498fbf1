//! PostgreSQL's own best as the baseline: `pgbench` (PostgreSQL's client, in C, over TCP,
//! `-M prepared`) running the task-shaped statements the sqlx baselines run, at the same
//! client count. The sqlx baseline measures this process's driver as much as the server
//! (it did 6 to 10k INSERTs a second where pgbench does 18k on the same machine), so the
//! targets are judged against pgbench; its figures are printed beside the sqlx ones.
//!
//! Without `pgbench` on the PATH (it comes with `postgresql-client`; CI installs it), the
//! scenarios say so once and judge against the sqlx baseline as before.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use uuid::Uuid;

use crate::baseline::{self, PRINCIPAL, TENANT};
use crate::load::Run;
use crate::stats::Summary;

/// What pgbench runs, one transaction a line of the log.
pub(crate) enum Script {
    /// The one-row INSERT of a create (the store's own statement).
    Insert,
    /// The primary-key select of a `tasks/get` of this task.
    Get(Uuid),
    /// Create, claim, complete: three statements, each its own transaction, unbatched.
    Cycle,
}

impl Script {
    /// The script's text: the sqlx baselines' statements with pgbench's variables for
    /// their parameters (prepared as parameters under `-M prepared`).
    fn text(&self) -> String {
        let insert = mcp_tasks_store::testing::RAW_CREATE
            .replace("$1", ":tenant")
            .replace("$2", ":principal")
            .replace("$3", "gen_random_uuid()");
        match self {
            Self::Insert => format!("{};\n", insert.trim()),
            Self::Get(_) => format!(
                "{};\n",
                baseline::GET
                    .trim()
                    .replace("$1", ":tenant")
                    .replace("$2", ":principal")
                    .replace("$3", ":id")
            ),
            Self::Cycle => {
                let complete = baseline::COMPLETE
                    .trim()
                    .replace("$1", ":c_tenant")
                    .replace("$2", ":c_principal")
                    .replace("$3", ":c_id")
                    .replace("$4", ":c_lease_token")
                    // A variable: a literal's `:false` would be read as one.
                    .replace("$5", "CAST(:result AS jsonb)");
                format!(
                    "{};\n{} \\gset c_\n{};\n",
                    insert.trim(),
                    baseline::CLAIM.trim(),
                    complete
                )
            }
        }
    }
}

/// Whether `pgbench` can be run here.
pub(crate) async fn available() -> bool {
    tokio::process::Command::new("pgbench")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// `script` at `clients` against `url`, when pgbench is installed: printed as `label`
/// on `out` (once, when it is not, the line says so).
pub(crate) async fn baseline(
    out: &mut dyn std::io::Write,
    label: &str,
    url: &str,
    script: &Script,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Option<Run>> {
    if !available().await {
        writeln!(
            out,
            "{label} skipped: pgbench is not installed (postgresql-client); judged against the sqlx baseline"
        )?;
        return Ok(None);
    }
    // A server shared with other work (CI runs the tests beside the benchmarks) may have
    // no connection slots for all the clients at the moment pgbench starts: try again a
    // little later, and if it still has none, say so and judge against the sqlx baseline.
    let mut attempt = 0;
    loop {
        match run(url, script, clients, duration).await {
            Ok(run) => {
                writeln!(out, "{label} {}", crate::env::figures(&run))?;
                return Ok(Some(run));
            }
            Err(e) if format!("{e:#}").contains("too many clients") => {
                attempt += 1;
                if attempt == 3 {
                    writeln!(
                        out,
                        "{label} skipped: the server had no connections left for {clients} pgbench clients; judged against the sqlx baseline"
                    )?;
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `script` from `clients` pgbench clients for `duration` (whole seconds, at least one)
/// against `url`: the transactions and their latencies from pgbench's log.
pub(crate) async fn run(
    url: &str,
    script: &Script,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Run> {
    // On a loaded machine pgbench's clients can take longer to connect than a short run
    // lasts, and the run then processes nothing: a longer one measures the same rate.
    let mut duration = duration.max(Duration::from_secs(1));
    for _ in 0..3 {
        let dir = std::env::temp_dir().join(format!("mcp-tasks-pgbench-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let ran = run_in(&dir, url, script, clients, duration).await;
        let _ = std::fs::remove_dir_all(&dir);
        match ran {
            Err(e) if e.is::<NothingProcessed>() => duration *= 2,
            ran => return ran,
        }
    }
    anyhow::bail!("pgbench processed no transaction in three runs, the last of {duration:?}")
}

/// A pgbench run that ended before any of its transactions did.
#[derive(Debug)]
struct NothingProcessed;

impl std::fmt::Display for NothingProcessed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("pgbench processed no transaction")
    }
}

impl std::error::Error for NothingProcessed {}

async fn run_in(
    dir: &Path,
    url: &str,
    script: &Script,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Run> {
    let file = dir.join("script.sql");
    std::fs::write(&file, script.text())?;
    let seconds = duration.as_secs_f64().ceil().max(1.0) as u64;
    let threads = clients.min(std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut command = tokio::process::Command::new("pgbench");
    command
        .args(["--no-vacuum", "--protocol=prepared", "--log"])
        .arg(format!("--log-prefix={}", dir.join("log").display()))
        .arg(format!("--client={clients}"))
        .arg(format!("--jobs={threads}"))
        .arg(format!("--time={seconds}"))
        .arg(format!("--file={}", file.display()))
        .args(["--define", &format!("tenant={TENANT}")])
        .args(["--define", &format!("principal={PRINCIPAL}")]);
    match script {
        Script::Get(id) => {
            command.args(["--define", &format!("id={id}")]);
        }
        Script::Cycle => {
            command.args([
                "--define",
                &format!("result={}", baseline::COMPLETED_RESULT),
            ]);
        }
        Script::Insert => {}
    }
    let output = command.arg(url).stdin(Stdio::null()).output().await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        anyhow::bail!(
            "pgbench failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if figure(&stdout, "number of transactions actually processed: ") == Some(0.0) {
        return Err(NothingProcessed.into());
    }
    let tps = figure(&stdout, "tps = ")
        .ok_or_else(|| anyhow::anyhow!("pgbench printed no tps: {stdout}"))?;
    let failed = figure(&stdout, "number of failed transactions: ").unwrap_or(0.0) as u64;
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("log"))
        {
            continue;
        }
        // client transaction latency_us script epoch_s epoch_us
        for line in std::fs::read_to_string(&path)?.lines() {
            if let Some(us) = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u64>().ok())
            {
                latencies.push(Duration::from_micros(us));
            }
        }
    }
    let ok = latencies.len() as u64;
    Ok(Run {
        ok,
        errors: failed,
        // pgbench's own rate (without connection time): the run's length from it.
        elapsed: Duration::from_secs_f64(ok as f64 / tps.max(1e-9)),
        latency: Summary::of(latencies),
        first_error: None,
    })
}

/// The number after `label` on the first line that has it.
fn figure(text: &str, label: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = &line[line.find(label)? + label.len()..];
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_bind_pgbench_variables_where_the_statements_had_parameters() {
        let cycle = Script::Cycle.text();
        assert!(!cycle.contains('$'), "{cycle}");
        assert!(cycle.contains(":tenant") && cycle.contains("gen_random_uuid()"));
        assert!(cycle.contains("\\gset c_\n") && cycle.contains(":c_lease_token"));
        assert!(cycle.contains("CAST(:result AS jsonb)"));
        assert_eq!(cycle.matches(";\n").count(), 2, "{cycle}");
        let get = Script::Get(Uuid::nil()).text();
        assert!(get.contains("id = :id") && !get.contains('$'), "{get}");
    }

    #[test]
    fn figures_are_read_from_pgbench_output() {
        let out = "number of failed transactions: 3 (0.1%)\nlatency average = 0.8 ms\ntps = 18447.123456 (without initial connection time)\n";
        assert_eq!(figure(out, "tps = "), Some(18447.123456));
        assert_eq!(figure(out, "number of failed transactions: "), Some(3.0));
        assert_eq!(figure(out, "nothing: "), None);
        // What pgbench 15 prints when its clients took longer to connect than the run.
        let empty = "duration: 1 s\nnumber of transactions actually processed: 0\nnumber of failed transactions: 0 (NaN%)\n";
        assert_eq!(
            figure(empty, "number of transactions actually processed: "),
            Some(0.0)
        );
        assert_eq!(figure(empty, "tps = "), None);
    }
}
