//! The Tasks extension's task object and the three shapes it takes on the wire:
//! `CreateTaskResult` (flat, `resultType:"task"`), `GetTaskResult` (a `DetailedTask` with
//! `resultType:"complete"`) and `notifications/tasks` params (a `DetailedTask`, which
//! [`crate::listen::task_notification`] wraps).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

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

/// Everything a client may see of a task at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub task_id: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: OffsetDateTime,
    pub last_updated_at: OffsetDateTime,
    /// `None` means unlimited and is sent as an explicit `null`.
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Outstanding input requests, only while `input_required`.
    pub input_requests: Option<Value>,
    /// The tool's `CallToolResult`, only when `completed`.
    pub result: Option<Value>,
    /// The JSON-RPC error, only when `failed`.
    pub error: Option<ErrorObject>,
}

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
                if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
                    meta.remove(meta_keys::LEGACY_RELATED_TASK);
                }
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
