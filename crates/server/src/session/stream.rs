//! The SSE response of a 2025-era request that waits for a task: a `tools/call` run as a
//! task for a client that cannot poll one, or a 2025-11-25 `tasks/result`.
//!
//! The stream follows the task through the push hub (any replica or worker may move it
//! on) and sends, the 2025 way:
//! - `notifications/progress` whenever the status message changes, when the call asked
//!   for progress (so long calls stay alive, besides the keep-alive comments);
//! - `notifications/tasks/status` on every status change (`tasks/result` only);
//! - each input request of the task as a JSON-RPC request (`elicitation/create`, …),
//!   whose id is signed and names the task and the input key, so the client's response
//!   can be applied by whichever replica it reaches;
//! - at last, the response: the tool's result or the task's error.
//!
//! A stream counts against the principal's open streams on this replica, like a listen
//! stream, and rests on the session and the credentials it was opened with: the shell
//! (`sse`) ends it with an error response once the token expires or is refused, once the
//! session is ended (`DELETE`, on any replica), and at the replica's maximum stream
//! lifetime; for a call, as if the client had gone (the task is cancelled unless the
//! call carried an `Idempotency-Key` and may be made again).

use std::collections::{HashSet, VecDeque};

use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use mcp_tasks_store::{Owner, TaskId};
use mcp_tasks_wire::jsonrpc::Response as RpcResponse;
use mcp_tasks_wire::{ErrorObject, RequestId, TaskStatus, codes};
use serde_json::{Map, Value, json};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::context::{Session, time_of};
use super::revision::Revision;
use super::shapes;
use super::token::InputRequestId;
use crate::AppState;
use crate::error::RpcError;
use crate::push::hub::{Snapshot, TaskSnapshot, Watcher};
use crate::push::streams::StreamPermit;
use crate::request_state::owner_digest;
use crate::sse::{self, Bearer, Checked, End, EventSource, Standing, frame};
use crate::tools_call::CancelOnDrop;

/// What the stream answers.
pub(crate) enum Purpose {
    /// A `tools/call`: the client knows no task, so an abandoned stream cancels it
    /// (unless the call carried an `Idempotency-Key`, and may be made again).
    Call {
        progress_token: Option<Value>,
        retryable: bool,
    },
    /// `tasks/result` of a 2025-11-25 task the client created: it stays the client's.
    TaskResult,
}

/// The request that opens a stream: who sent it, with which credentials, in which
/// session.
pub(crate) struct Opener<'a> {
    pub(crate) owner: &'a Owner,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) session: &'a Session,
}

/// Opens the stream (`permit` is its place among the principal's open streams):
/// subscribes to the task and answers with `text/event-stream`.
pub(crate) async fn open(
    state: &AppState,
    opener: Opener<'_>,
    permit: StreamPermit,
    request_id: RequestId,
    task: TaskId,
    purpose: Purpose,
) -> Result<Response, RpcError> {
    let Opener {
        owner,
        headers,
        session,
    } = opener;
    let guard = match &purpose {
        Purpose::Call { retryable, .. } => Some(CancelOnDrop::new(state, owner, task, !retryable)),
        Purpose::TaskResult => None,
    };
    let Some(watcher) = state.hub().subscribe(owner, &[task]).await?.pop() else {
        return Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        )));
    };
    let body = WaitStream {
        state: state.clone(),
        owner: owner_digest(owner),
        session: session.clone(),
        request_id,
        task,
        purpose,
        watcher,
        guard,
        progress: 0,
        last_message: None,
        last_status: None,
        last_version: 0,
        sent: HashSet::new(),
        pending: VecDeque::new(),
        done: false,
        shutdown: Box::pin(state.shutdown().clone().cancelled_owned()),
        drain_deadline: None,
        _permit: permit,
    };
    let standing = InSession {
        bearer: Bearer::new(headers, owner),
        owner: owner.clone(),
        session: session.clone(),
    };
    Ok(sse::response(state, body, standing))
}

/// A stream's standing in its session: the credentials verify as the session's owner,
/// and the session has neither expired nor been ended.
struct InSession {
    bearer: Bearer,
    owner: Owner,
    session: Session,
}

impl Standing for InSession {
    async fn check(&mut self, state: &AppState) -> Checked {
        let Checked::Good { expires } = self.bearer.verify(state).await else {
            return Checked::Ended(End::Expired);
        };
        let token = &self.session.token;
        match state
            .sessions()
            .session_revoked(&self.owner, &token.nonce, time_of(token.issued_ms))
            .await
        {
            Ok(true) => Checked::Ended(End::Revoked),
            Ok(false) => Checked::Good {
                expires: sse::sooner(expires, Some(time_of(token.expires_ms).into())),
            },
            Err(e) => {
                tracing::debug!(error = %e, "session stream: could not check the session");
                Checked::Unknown
            }
        }
    }
}

struct WaitStream {
    state: AppState,
    owner: String,
    session: Session,
    request_id: RequestId,
    task: TaskId,
    purpose: Purpose,
    watcher: Watcher,
    guard: Option<CancelOnDrop>,
    progress: u64,
    last_message: Option<String>,
    last_status: Option<String>,
    last_version: i64,
    /// Input keys already asked on this stream.
    sent: HashSet<String>,
    pending: VecDeque<Event>,
    done: bool,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    drain_deadline: Option<tokio::time::Instant>,
    _permit: StreamPermit,
}

impl EventSource for WaitStream {
    /// The response, an error saying why the stream ended (what was queued behind it is
    /// not sent: the client is to ask again).
    fn closing(&mut self, end: End) -> Option<Event> {
        let error = match end {
            End::Lifetime => ErrorObject::new(
                codes::INTERNAL_ERROR,
                "This response stream reached the server's maximum stream lifetime; send the request again",
            ),
            End::Revoked => ErrorObject::new(
                codes::INVALID_REQUEST,
                "The session was ended; initialize a new one and send the request again",
            ),
            End::Expired | End::Demoted => ErrorObject::new(
                codes::INVALID_REQUEST,
                "The credentials of this request expired or are no longer accepted; send it again with fresh ones",
            ),
        };
        self.pending.clear();
        self.end(Err(error));
        self.pending.pop_front()
    }

    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let snapshot = self.watcher.rx.borrow_and_update().clone();
            match snapshot {
                Snapshot::Loading => {}
                Snapshot::Gone => {
                    self.end(Err(ErrorObject::new(
                        codes::INTERNAL_ERROR,
                        "The task running this request no longer exists",
                    )));
                    continue;
                }
                Snapshot::Task(task) if task.version > self.last_version => {
                    self.last_version = task.version;
                    self.on_snapshot(&task);
                    continue;
                }
                Snapshot::Task(_) => {}
            }
            let drain = self.drain_deadline;
            tokio::select! {
                changed = self.watcher.rx.changed() => {
                    if changed.is_err() {
                        self.end(Err(ErrorObject::new(
                            codes::INTERNAL_ERROR,
                            "The server stopped following the task; call again",
                        )));
                    }
                }
                () = self.shutdown.as_mut(), if drain.is_none() => {
                    self.drain_deadline =
                        Some(tokio::time::Instant::now() + self.state.config().drain_grace);
                }
                () = sleep_until(drain), if drain.is_some() => {
                    self.end(Err(ErrorObject::new(
                        codes::INTERNAL_ERROR,
                        "The server is shutting down; send the request again",
                    )));
                }
            }
        }
    }
}

impl WaitStream {
    fn on_snapshot(&mut self, task: &TaskSnapshot) {
        let detailed = &task.detailed;
        let message = detailed
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Purpose::Call {
            progress_token: Some(token),
            ..
        } = &self.purpose
            && message.is_some()
            && message != self.last_message
        {
            self.progress += 1;
            let mut params = Map::new();
            params.insert("progressToken".into(), token.clone());
            params.insert("progress".into(), json!(self.progress));
            params.insert("message".into(), json!(message));
            self.notify("notifications/progress", params);
        }
        self.last_message = message;

        let status = shapes::status(detailed).to_owned();
        if matches!(self.purpose, Purpose::TaskResult)
            && self.last_status.as_deref() != Some(&status)
        {
            self.notify("notifications/tasks/status", shapes::task(detailed));
        }
        self.last_status = Some(status);

        match task.status {
            TaskStatus::InputRequired => self.ask(detailed),
            TaskStatus::Working => {}
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => {
                if let Some(outcome) = shapes::outcome(detailed) {
                    self.end(outcome);
                }
            }
        }
    }

    /// Sends each input request not yet sent on this stream, as a request of this
    /// revision; one the client cannot answer ends the stream instead.
    fn ask(&mut self, detailed: &Map<String, Value>) {
        let Some(requests) = detailed.get("inputRequests").and_then(Value::as_object) else {
            return;
        };
        for (key, request) in requests {
            if self.sent.contains(key) {
                continue;
            }
            if !self.session.can_answer(request) {
                let method = request.get("method").and_then(Value::as_str).unwrap_or("");
                self.end(Err(unanswerable(self.session.revision, method)));
                return;
            }
            self.sent.insert(key.clone());
            let id = InputRequestId {
                task: self.task.to_string(),
                key: key.clone(),
                session: self.session.token.nonce.clone(),
                owner: self.owner.clone(),
            }
            .sign(self.state.state_keys());
            let mut params = request
                .get("params")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if !self.session.revision.has_url_elicitation() {
                // 2025-06-18 knows only form elicitation, and no `mode` field.
                params.remove("mode");
            }
            if matches!(self.purpose, Purpose::TaskResult) {
                params = shapes::with_related_task(params, &self.task.to_string());
            }
            self.pending.push_back(frame(&json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request.get("method").cloned().unwrap_or(Value::Null),
                "params": params,
            })));
            tracing::info!(task = %self.task, key = %key, "input request sent on the stream");
        }
    }

    fn notify(&mut self, method: &str, params: Map<String, Value>) {
        self.pending.push_back(frame(&json!({
            "jsonrpc": "2.0",
            "method": method,
            "params": params,
        })));
    }

    /// Queues the response and ends the stream. A task that ended on its own is no
    /// longer the stream's to cancel.
    fn end(&mut self, outcome: Result<Map<String, Value>, ErrorObject>) {
        let finished = match &*self.watcher.rx.borrow() {
            Snapshot::Task(t) => t.status.is_terminal(),
            Snapshot::Gone => true,
            Snapshot::Loading => false,
        };
        if finished && let Some(guard) = &mut self.guard {
            guard.disarm();
        }
        let response = match outcome {
            Ok(mut result) => {
                if matches!(self.purpose, Purpose::TaskResult) {
                    result = shapes::with_related_task(result, &self.task.to_string());
                }
                RpcResponse::result(self.request_id.clone(), Value::Object(result))
            }
            Err(error) => RpcResponse::error(Some(self.request_id.clone()), error),
        };
        self.pending.push_back(frame(&response.to_json()));
        self.done = true;
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The error for input the session cannot provide.
fn unanswerable(revision: Revision, method: &str) -> ErrorObject {
    let capability = match method {
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "elicitation",
    };
    let why = if capability == "elicitation" && !revision.has_elicitation() {
        format!("protocol {revision} has no elicitation; connect with 2025-06-18 or later")
    } else {
        format!("the client did not declare the {capability} capability it needs")
    };
    ErrorObject::missing_capability(
        format!("This tool needs input ({method}) the client cannot provide: {why}"),
        json!({ capability: {} }),
    )
}
