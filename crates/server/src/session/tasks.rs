//! The experimental tasks of 2025-11-25 (`tasks/get`, `tasks/result`, `tasks/list`,
//! `tasks/cancel`), for sessions negotiated at that revision only: an adapter over the
//! same store, scoped to the caller like every task method. Another owner's task id gets
//! exactly what an unknown id gets.

use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use mcp_tasks_store::{CancelOutcome, ListCursor, Owner, TaskId};
use mcp_tasks_wire::{ErrorObject, Request, codes};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use super::context::Session;
use super::shapes;
use super::stream::{self, Opener, Purpose};
use crate::AppState;
use crate::error::RpcError;
use crate::params::{found, parse_task_id, string_param};
use crate::push::hub::Snapshot;
use crate::push::streams;
use crate::reply::Reply;

/// Tasks per `tasks/list` page.
const PAGE: i64 = 50;
/// How long `tasks/cancel` waits for a running task's worker to stop it, so that it can
/// answer with the task cancelled, as 2025-11-25 asks.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn handle(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    session: &Session,
    request: Request,
) -> Result<Reply, RpcError> {
    let params = &request.params;
    if request.method == "tasks/list" {
        return list(state, owner, params).await.map(reply);
    }
    let id = parse_task_id(string_param(params, "taskId")?)?;
    let store = state.store();
    match request.method.as_str() {
        "tasks/get" => {
            let task = found(store.get_task(owner, id).await?)?;
            Ok(reply(shapes::task(&task.view().detailed())))
        }
        "tasks/result" => {
            let task = found(store.get_task(owner, id).await?)?;
            match shapes::outcome(&task.view().detailed()) {
                Some(Ok(result)) => Ok(reply(shapes::with_related_task(result, &id.to_string()))),
                Some(Err(error)) => Err(RpcError::method(error)),
                None => {
                    let permit = streams::permit(
                        state.streams(),
                        owner,
                        state.config().max_streams_per_principal,
                    )?;
                    let opener = Opener {
                        owner,
                        headers,
                        session,
                    };
                    let response =
                        stream::open(state, opener, permit, request.id, id, Purpose::TaskResult)
                            .await?;
                    Ok(Reply::Stream(response))
                }
            }
        }
        _ => cancel(state, owner, id).await.map(reply),
    }
}

fn reply(result: Map<String, Value>) -> Reply {
    Reply::Result(Value::Object(result))
}

/// Cancels the task and answers with it, cancelled. A task already finished is refused
/// with -32602, as 2025-11-25 says.
async fn cancel(
    state: &AppState,
    owner: &Owner,
    id: TaskId,
) -> Result<Map<String, Value>, RpcError> {
    let store = state.store();
    let task = found(store.get_task(owner, id).await?)?;
    let detailed = task.view().detailed();
    if task.status.is_terminal() {
        return Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            format!(
                "Cannot cancel task: already in terminal status '{}'",
                shapes::status(&detailed)
            ),
        )));
    }
    let outcome = found(store.cancel_task(owner, id).await?)?;
    tracing::info!(task = %id, ?outcome, "cancel (2025-11-25 session)");
    if outcome == CancelOutcome::Requested {
        // A worker holds it: wait (bounded) until it has stopped and recorded that.
        if let Some(mut watcher) = state.hub().subscribe(owner, &[id]).await?.pop() {
            let _ = tokio::time::timeout(CANCEL_WAIT, async {
                loop {
                    let finished = match &*watcher.rx.borrow_and_update() {
                        Snapshot::Task(t) => t.status.is_terminal(),
                        Snapshot::Gone => true,
                        Snapshot::Loading => false,
                    };
                    if finished || watcher.rx.changed().await.is_err() {
                        return;
                    }
                }
            })
            .await;
        }
    }
    let task = found(store.get_task(owner, id).await?)?;
    Ok(shapes::task(&task.view().detailed()))
}

async fn list(
    state: &AppState,
    owner: &Owner,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let after = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(decode_cursor(cursor).ok_or_else(|| {
            RpcError::invalid_params("invalid cursor: not one this server issued")
        })?),
        Some(_) => return Err(RpcError::invalid_params("params.cursor must be a string")),
    };
    let mut tasks = state.store().list_tasks(owner, after, PAGE + 1).await?;
    let next = (tasks.len() > usize::try_from(PAGE).unwrap_or(usize::MAX)).then(|| {
        tasks.truncate(usize::try_from(PAGE).unwrap_or(0));
        tasks.last().map(|t| encode_cursor(t.created_at, t.id))
    });
    let mut result = Map::new();
    result.insert(
        "tasks".into(),
        Value::Array(
            tasks
                .iter()
                .map(|t| Value::Object(shapes::task(&t.view().detailed())))
                .collect(),
        ),
    );
    if let Some(Some(cursor)) = next {
        result.insert("nextCursor".into(), json!(cursor));
    }
    Ok(result)
}

/// `<unix nanoseconds>:<task id>`, base64url: opaque to clients, and scoped to the
/// caller by the query, so it needs no signature.
fn encode_cursor(created_at: OffsetDateTime, id: TaskId) -> String {
    B64.encode(format!("{}:{id}", created_at.unix_timestamp_nanos()))
}

fn decode_cursor(cursor: &str) -> Option<ListCursor> {
    let text = String::from_utf8(B64.decode(cursor).ok()?).ok()?;
    let (nanos, id) = text.split_once(':')?;
    Some(ListCursor {
        created_at: OffsetDateTime::from_unix_timestamp_nanos(nanos.parse().ok()?).ok()?,
        id: TaskId::parse(id)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_780_000_000_123_456_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let id = TaskId::random();
        let c = decode_cursor(&encode_cursor(at, id));
        assert_eq!(c, Some(ListCursor { created_at: at, id }));
        for bad in [
            "",
            "x",
            &B64.encode("12:nope"),
            &B64.encode(format!("x:{id}")),
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
