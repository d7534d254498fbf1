//! The Tasks extension's task object and the three shapes it takes on the wire:
//! `CreateTaskResult` (flat, `resultType:"task"`), `GetTaskResult` (a `DetailedTask` with
//! `resultType:"complete"`) and `notifications/tasks` params (a `DetailedTask`, which
//! [`crate::listen::task_notification`] wraps).

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::results::Implementation;
use crate::{ErrorObject, meta_keys, time_fmt::rfc3339};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(format!("unknown task status {other:?}")),
        })
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a client may see of a task at one moment. `J` is how the stored JSON
/// (`inputRequests`, `result`) is held: parsed, for whoever inspects or reshapes it, or
/// as the store's bytes ([`RawTaskView`]), for an answer that carries it unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView<J = Value> {
    pub task_id: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: OffsetDateTime,
    pub last_updated_at: OffsetDateTime,
    /// `None` means unlimited and is sent as an explicit `null`.
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Outstanding input requests, only while `input_required`.
    pub input_requests: Option<J>,
    /// The tool's `CallToolResult`, only when `completed`.
    pub result: Option<J>,
    /// The JSON-RPC error, only when `failed`.
    pub error: Option<ErrorObject>,
}

/// A task with its stored JSON as the store holds it, never parsed into a tree: what
/// `tasks/get` reads, since it sends that JSON on unchanged.
pub type RawTaskView = TaskView<Box<RawValue>>;

impl TaskView {
    /// The `Task` fields every shape shares.
    fn base(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("taskId".into(), json!(self.task_id));
        m.insert("status".into(), json!(self.status.as_str()));
        if let Some(msg) = &self.status_message {
            m.insert("statusMessage".into(), json!(msg));
        }
        m.insert("createdAt".into(), json!(rfc3339(self.created_at)));
        m.insert("lastUpdatedAt".into(), json!(rfc3339(self.last_updated_at)));
        m.insert("ttlMs".into(), json!(self.ttl_ms));
        if let Some(p) = self.poll_interval_ms {
            m.insert("pollIntervalMs".into(), json!(p));
        }
        m
    }

    /// A `DetailedTask`: the base plus exactly the field its status calls for.
    pub fn detailed(&self) -> Map<String, Value> {
        let mut m = self.base();
        match self.status {
            TaskStatus::InputRequired => {
                m.insert(
                    "inputRequests".into(),
                    self.input_requests.clone().unwrap_or_else(|| json!({})),
                );
            }
            TaskStatus::Completed => {
                let mut result = self
                    .result
                    .clone()
                    .unwrap_or_else(|| json!({"content": []}));
                strip_legacy_related_task(&mut result);
                m.insert("result".into(), result);
            }
            TaskStatus::Failed => {
                let error = self.error.clone().unwrap_or_else(ErrorObject::internal);
                m.insert("error".into(), json!(error));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        m
    }

    /// The answer to a `tools/call` that created this task.
    pub fn create_result(&self) -> Map<String, Value> {
        let mut m = self.base();
        m.insert("resultType".into(), json!("task"));
        m
    }

    /// The answer to `tasks/get`.
    pub fn get_result(&self) -> Map<String, Value> {
        let mut m = self.detailed();
        m.insert("resultType".into(), json!("complete"));
        m
    }
}

impl RawTaskView {
    /// The answer to `tasks/get`, stamped with the server's identity, as JSON text: the
    /// same object as `get_result` plus [`Implementation::stamp`], with the stored JSON
    /// copied in byte for byte (this is where a large result costs a copy, not a parse
    /// and a re-serialisation, and why numbers beyond `f64` survive).
    pub fn get_result_json(&self, server: &Implementation) -> SerializedResult {
        let (mut input_requests, mut result, mut error) = (None, None, None);
        match self.status {
            TaskStatus::InputRequired => {
                input_requests = Some(match &self.input_requests {
                    Some(raw) => Part::Raw(raw),
                    None => Part::Owned(json!({})),
                });
            }
            TaskStatus::Completed => {
                result = Some(match &self.result {
                    // Results are stored without the legacy key (`stamped_call_tool_result`);
                    // a row written before that still gets it removed. PostgreSQL prints
                    // jsonb strings with `/` unescaped, so the search cannot miss it (a
                    // false hit only costs a parse).
                    Some(raw) if raw.get().contains(meta_keys::LEGACY_RELATED_TASK) => {
                        let mut value: Value =
                            serde_json::from_str(raw.get()).unwrap_or_else(|_| json!({}));
                        strip_legacy_related_task(&mut value);
                        Part::Owned(value)
                    }
                    Some(raw) => Part::Raw(raw),
                    None => Part::Owned(json!({"content": []})),
                });
            }
            TaskStatus::Failed => {
                error = Some(self.error.clone().unwrap_or_else(ErrorObject::internal));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        let out = GetResultOut {
            task_id: &self.task_id,
            status: self.status.as_str(),
            status_message: self.status_message.as_deref(),
            created_at: rfc3339(self.created_at),
            last_updated_at: rfc3339(self.last_updated_at),
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            input_requests,
            result,
            error,
            result_type: "complete",
            meta: ServerInfoMeta(server),
        };
        SerializedResult::of(&out)
    }

    /// The same task with its JSON parsed, for callers that inspect it.
    pub fn parsed(&self) -> Result<TaskView, serde_json::Error> {
        let parse = |raw: &Option<Box<RawValue>>| {
            raw.as_ref()
                .map(|r| serde_json::from_str::<Value>(r.get()))
                .transpose()
        };
        Ok(TaskView {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at: self.created_at,
            last_updated_at: self.last_updated_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            input_requests: parse(&self.input_requests)?,
            result: parse(&self.result)?,
            error: self.error.clone(),
        })
    }
}

fn strip_legacy_related_task(result: &mut Value) {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(meta_keys::LEGACY_RELATED_TASK);
    }
}

/// A result serialised by this crate: valid JSON by construction, so it can be spliced
/// into a response envelope without being parsed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedResult(String);

impl SerializedResult {
    fn of<T: Serialize>(value: &T) -> Self {
        // Only maps with string keys, strings, numbers and already-valid raw JSON go in,
        // which always serialise; `{}` stands in rather than a panic.
        Self(serde_json::to_string(value).unwrap_or_else(|_| String::from("{}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Stored JSON as it is, or a value composed here (the defaults, a rewritten result).
enum Part<'a> {
    Raw(&'a RawValue),
    Owned(Value),
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Raw(raw) => raw.serialize(s),
            Self::Owned(value) => value.serialize(s),
        }
    }
}

/// `_meta` with only the server's identity, as [`Implementation::stamp`] puts it.
struct ServerInfoMeta<'a>(&'a Implementation);

impl Serialize for ServerInfoMeta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(meta_keys::SERVER_INFO, self.0)?;
        map.end()
    }
}

/// `GetTaskResult` with `DetailedTask` flattened in, field for field what `get_result`
/// and `stamp` put in the map.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GetResultOut<'a> {
    task_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    created_at: String,
    last_updated_at: String,
    ttl_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_requests: Option<Part<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Part<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject>,
    result_type: &'static str,
    #[serde(rename = "_meta")]
    meta: ServerInfoMeta<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn view(status: TaskStatus) -> TaskView {
        TaskView {
            task_id: "t1".into(),
            status,
            status_message: None,
            created_at: datetime!(2026-01-01 00:00 UTC),
            last_updated_at: datetime!(2026-01-01 00:00:01 UTC),
            ttl_ms: None,
            poll_interval_ms: Some(500),
            input_requests: Some(json!({"k":{"method":"elicitation/create","params":{}}})),
            result: Some(
                json!({"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}}}),
            ),
            error: Some(ErrorObject::new(-32603, "boom")),
        }
    }

    #[test]
    fn create_result_is_flat_and_bare() {
        let r = Value::Object(view(TaskStatus::Working).create_result());
        assert_eq!(r["resultType"], "task");
        assert_eq!(r["ttlMs"], Value::Null);
        assert!(r.as_object().unwrap().contains_key("ttlMs"));
        for absent in ["result", "error", "inputRequests", "requestState", "task"] {
            assert!(r.get(absent).is_none(), "{absent}");
        }
        assert_eq!(r["createdAt"], "2026-01-01T00:00:00.000Z");
    }

    #[test]
    fn detailed_carries_only_its_status_field() {
        let w = Value::Object(view(TaskStatus::Working).get_result());
        assert!(
            w.get("inputRequests").is_none()
                && w.get("result").is_none()
                && w.get("error").is_none()
        );
        let i = Value::Object(view(TaskStatus::InputRequired).get_result());
        assert!(i["inputRequests"]["k"].is_object());
        let c = Value::Object(view(TaskStatus::Completed).get_result());
        assert_eq!(c["resultType"], "complete");
        assert!(
            c["result"]["_meta"]
                .get("io.modelcontextprotocol/related-task")
                .is_none()
        );
        let f = Value::Object(view(TaskStatus::Failed).get_result());
        assert_eq!(f["error"]["code"], -32603);
        assert!(f.get("result").is_none());
    }
}
