//! A stdio upstream's child process, and what it may make us hold.
//!
//! - **Environment**: cleared, then [`INHERITED_ENV`] and the upstream's `inherit_env` of
//!   ours (those set), then its `env`. Our database URL, keys and secrets, and the
//!   variables other upstreams' headers are expanded from, never reach a child.
//! - **Messages** (stdout): one line each, at most the upstream's `max_result_bytes` plus
//!   [`ENVELOPE_BYTES`]. A longer line is never buffered past that: it is read to its end
//!   and dropped; if it answers one of our requests (its `id` found on the way), the
//!   request gets an error saying why, so the call fails at once rather than waiting out
//!   its timeout.
//! - **Log** (stderr): relayed line by line at debug, each cut at [`MAX_STDERR_LINE`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin};
use tokio_util::task::AbortOnDropHandle;

use crate::config::INHERITED_ENV;

/// What a message may carry beyond its result (the JSON-RPC envelope, `_meta`).
pub(crate) const ENVELOPE_BYTES: usize = 64 * 1024;

/// The longest stderr line we log; the rest of it is left out.
pub(crate) const MAX_STDERR_LINE: usize = 4096;

type Reader = tokio::io::ReadHalf<tokio::io::SimplexStream>;

/// The child and the transport over its stdin and (bounded) stdout. Dropping it kills the
/// child.
pub(crate) struct ChildTransport {
    transport: AsyncRwTransport<RoleClient, Reader, ChildStdin>,
    child: Child,
    _pump: AbortOnDropHandle<()>,
}

/// The child's environment: what it inherits of `ours`, then `env`. A variable of ours
/// whose name is not Unicode is none of the names we pass on; its value may be anything.
pub(crate) fn environment(
    ours: impl IntoIterator<Item = (OsString, OsString)>,
    inherit: &[String],
    env: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let mut out: BTreeMap<OsString, OsString> = ours
        .into_iter()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| INHERITED_ENV.contains(&k) || inherit.iter().any(|i| i == k))
        })
        .collect();
    out.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    out
}

/// Starts `command` with the environment `env` (complete: nothing else of ours).
pub(crate) fn spawn(
    name: &str,
    command: &[String],
    env: &BTreeMap<OsString, OsString>,
    max_result_bytes: usize,
) -> std::io::Result<(ChildTransport, Option<ChildStderr>)> {
    let program = command
        .first()
        .ok_or_else(|| std::io::Error::other("no program"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&command[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the child's stdio was not piped"));
    };
    let stderr = child.stderr.take();
    let cap = max_result_bytes.saturating_add(ENVELOPE_BYTES);
    let (reader, writer) = tokio::io::simplex(64 * 1024);
    let pump = spawn_owned(pump(name.to_owned(), stdout, writer, cap, max_result_bytes));
    // Our pump already keeps every line within `cap`; rmcp's own limit is only a backstop.
    let transport = AsyncRwTransport::new(reader, stdin).with_max_line_length(cap + 1024);
    Ok((
        ChildTransport {
            transport,
            child,
            _pump: pump,
        },
        stderr,
    ))
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// As the stdio transport says: close its stdin, give it a moment to exit, then kill.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.transport.close().await?;
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// Copies the child's stdout to the transport a line at a time, holding at most `cap`
/// bytes of a line; an oversized answer becomes an error answer to its request.
async fn pump(
    name: String,
    stdout: impl AsyncRead + Unpin,
    mut into: impl AsyncWrite + Unpin,
    cap: usize,
    limit: usize,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line: Vec<u8> = Vec::new();
    let mut over: Option<Scan> = None;
    let mut dropped_bytes = 0usize;
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let (n, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let chunk = &buf[..n];
        match &mut over {
            None if line.len() + n <= cap => line.extend_from_slice(chunk),
            None => {
                let mut scan = Scan::default();
                scan.feed(&line);
                scan.feed(chunk);
                dropped_bytes = line.len() + n;
                line = Vec::new();
                over = Some(scan);
            }
            Some(scan) => {
                scan.feed(chunk);
                dropped_bytes = dropped_bytes.saturating_add(n);
            }
        }
        reader.consume(n);
        if !done {
            continue;
        }
        let out = match over.take() {
            None => std::mem::take(&mut line),
            Some(scan) => {
                tracing::warn!(
                    upstream = %name,
                    bytes = dropped_bytes,
                    limit,
                    "upstream message larger than max_result_bytes; dropped"
                );
                scan.error_answer(&name, limit).unwrap_or_default()
            }
        };
        if !out.is_empty() && into.write_all(&out).await.is_err() {
            break;
        }
        if line.capacity() > 1024 * 1024 {
            line = Vec::new();
        }
    }
    let _ = into.shutdown().await;
}

/// What a streaming look at one oversized line finds: whether it is a request or
/// notification (has a `method`), and the `id` it carries, both at the top level.
#[derive(Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escape: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    /// The key just read waits for its `:`.
    after_key: bool,
    capturing_id: bool,
    id: Vec<u8>,
    id_invalid: bool,
    method: bool,
}

/// An id longer than this is no id of ours.
const MAX_ID_BYTES: usize = 64;

impl Scan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if self.capturing_id {
                self.push_id(b);
            }
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    self.after_key = true;
                }
                return;
            }
            if self.reading_key && self.key.len() < 16 {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.expect_key = false;
                    self.reading_key = true;
                    self.key.clear();
                } else if self.capturing_id {
                    self.push_id(b);
                }
            }
            b':' if self.depth == 1 && self.after_key => {
                self.after_key = false;
                match self.key.as_slice() {
                    b"id" => {
                        self.capturing_id = true;
                        self.id.clear();
                    }
                    b"method" => self.method = true,
                    _ => {}
                }
            }
            b'{' | b'[' => {
                if self.capturing_id {
                    self.id_invalid = true;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = true;
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.capturing_id = false;
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b',' if self.depth == 1 => {
                self.capturing_id = false;
                self.expect_key = true;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            other => {
                if self.capturing_id {
                    self.push_id(other);
                }
            }
        }
    }

    fn push_id(&mut self, b: u8) {
        if self.id.len() < MAX_ID_BYTES {
            self.id.push(b);
        } else {
            self.id_invalid = true;
        }
    }

    /// The error answer to the request the line answered, if it answered one of ours.
    fn error_answer(&self, name: &str, limit: usize) -> Option<Vec<u8>> {
        if self.method || self.id_invalid {
            return None;
        }
        let id: serde_json::Value = serde_json::from_slice(&self.id).ok()?;
        if !(id.is_number() || id.is_string()) {
            return None;
        }
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": mcp_tasks_wire::codes::INTERNAL_ERROR,
                "message": too_large(name, limit),
                "data": { "reason": "UPSTREAM_RESULT_TOO_LARGE", "limit": limit },
            },
        });
        let mut out = serde_json::to_vec(&answer).ok()?;
        out.push(b'\n');
        Some(out)
    }
}

/// What a call hears when the upstream's answer is over its limit.
pub(crate) fn too_large(name: &str, limit: usize) -> String {
    format!(
        "Upstream {name:?} answered with more than {limit} bytes (its max_result_bytes); the answer was dropped"
    )
}

/// The child's stderr is its log: ours at debug, line by line (each cut at
/// [`MAX_STDERR_LINE`]), until it closes.
pub(crate) async fn relay_stderr(name: &str, stderr: Option<ChildStderr>) {
    let Some(stderr) = stderr else {
        return std::future::pending().await;
    };
    let mut reader = BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut cut = 0usize;
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let (n, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_STDERR_LINE.saturating_sub(line.len());
        let keep = n.min(room);
        line.extend_from_slice(&buf[..keep]);
        cut = cut.saturating_add(n - keep);
        reader.consume(n);
        if done {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if cut > 0 {
                tracing::debug!(upstream = %name, "stderr: {text} [{cut} more bytes left out]");
            } else {
                tracing::debug!(upstream = %name, "stderr: {text}");
            }
            line.clear();
            cut = 0;
        }
    }
    std::future::pending().await
}

#[expect(
    clippy::disallowed_methods,
    reason = "the handle aborts the pump on drop; its owner is the child's transport"
)]
fn spawn_owned<F>(future: F) -> AbortOnDropHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    AbortOnDropHandle::new(tokio::spawn(future))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(line: &str) -> Scan {
        let mut s = Scan::default();
        s.feed(line.as_bytes());
        s
    }

    #[test]
    fn an_oversized_answer_is_answered_with_an_error_for_its_id() {
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x,}\"id\":9"}]}}"#,
            r#"{"result":{"id":8,"nested":[1,2,{"id":3}]},"jsonrpc":"2.0","id" : 7}"#,
        ] {
            let answer = scan(line).error_answer("u", 10).expect("an answer");
            let v: serde_json::Value = serde_json::from_slice(&answer).expect("JSON");
            assert_eq!(v["id"], 7, "{line}");
            assert_eq!(v["error"]["data"]["reason"], "UPSTREAM_RESULT_TOO_LARGE");
        }
        let answer = scan(r#"{"id":"a\"b","result":{}}"#)
            .error_answer("u", 10)
            .expect("an answer");
        let v: serde_json::Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(v["id"], "a\"b");
    }

    #[test]
    fn an_oversized_request_or_notification_is_only_dropped() {
        assert!(
            scan(r#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}"#)
                .error_answer("u", 10)
                .is_none()
        );
        assert!(
            scan(r#"{"jsonrpc":"2.0","method":"notifications/message"}"#)
                .error_answer("u", 10)
                .is_none()
        );
        assert!(
            scan(r#"{"id":{"x":1},"result":{}}"#)
                .error_answer("u", 10)
                .is_none()
        );
    }

    #[test]
    fn the_environment_is_the_allowlist_the_inherited_and_env() {
        let ours = [
            ("PATH", "/bin"),
            ("DATABASE_URL", "postgres://secret"),
            ("MCP_TASKS_STATE_KEY", "k"),
            ("EXTRA", "e"),
            ("OTHER", "o"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = BTreeMap::from([("GIVEN".to_owned(), "g".to_owned())]);
        let out = environment(ours, &["EXTRA".to_owned()], &env);
        let names: Vec<&str> = out.keys().filter_map(|k| k.to_str()).collect();
        assert_eq!(names, ["EXTRA", "GIVEN", "PATH"]);
    }
}
