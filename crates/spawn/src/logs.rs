//! A child's output, read line by line until it closes: its ready line handed over, the
//! rest forwarded, filtered or counted as [`Logs`] says.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;

use crate::Ready;

/// Receives each line of a child's log with the child's name.
pub type LineSink = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// What becomes of a child's log (stderr, and what else it prints on stdout).
#[derive(Clone, Default)]
pub enum Logs {
    /// Every line to our stderr, after the child's name and pid (the tests: a failing
    /// test shows them).
    #[default]
    All,
    /// Only WARN and ERROR lines ([`level`]), after the child's name and pid.
    Problems,
    /// Each line to a function (to count them, keep some, or look for one).
    To(LineSink),
    /// Not read: stderr goes to /dev/null.
    Discard,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::All => "All",
            Self::Problems => "Problems",
            Self::To(_) => "To(..)",
            Self::Discard => "Discard",
        })
    }
}

/// The level of a log line in either format: the second field of a text line
/// (`<timestamp> <LEVEL> <target>: …`), the `level` member of a JSON one.
pub fn level(line: &str) -> Option<&str> {
    if line.starts_with('{') {
        let at = line.find("\"level\":\"")? + 9;
        let rest = &line[at..];
        return rest.find('"').map(|end| &rest[..end]);
    }
    line.split_whitespace()
        .nth(1)
        .filter(|l| matches!(*l, "TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR"))
}

/// Reads `pipe` to its end; with `ready`, the first ready line goes there instead of the
/// log.
pub(crate) async fn read(
    pipe: impl AsyncRead + Unpin,
    name: String,
    pid: u32,
    logs: Logs,
    mut ready: Option<oneshot::Sender<Ready>>,
) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if ready.is_some()
            && let Some(parsed) = Ready::parse(&line)
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(parsed);
            continue;
        }
        match &logs {
            Logs::All => eprintln!("{name}[{pid}]: {line}"),
            Logs::Problems => {
                if matches!(level(&line), Some("WARN" | "ERROR")) {
                    eprintln!("{name}[{pid}]: {line}");
                }
            }
            Logs::To(sink) => sink(&name, &line),
            Logs::Discard => {}
        }
    }
}
