//! The messages of a `subscriptions/listen` stream: the acknowledgement that opens it, one
//! `notifications/tasks` per task snapshot, and the result that closes it. Each carries
//! the subscription id (the listen request's id) in `_meta`.

use serde_json::{Map, Value, json};

use crate::meta_keys;

pub const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
pub const TASK_NOTIFICATION: &str = "notifications/tasks";

fn subscription_meta(subscription_id: &Value) -> Value {
    json!({ meta_keys::SUBSCRIPTION_ID: subscription_id })
}

/// The first message of a stream: what the server agreed to send. `task_ids` is `None`
/// when the client asked for no task notifications; list-changed kinds are never agreed
/// to (this server's lists do not change), so they are left out.
pub fn acknowledgement(subscription_id: &Value, task_ids: Option<&[String]>) -> Value {
    let mut notifications = Map::new();
    if let Some(ids) = task_ids {
        notifications.insert("taskIds".into(), json!(ids));
    }
    json!({
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {
            "_meta": subscription_meta(subscription_id),
            "notifications": notifications,
        }
    })
}

/// A `notifications/tasks` message: the task's `DetailedTask` (as `TaskView::detailed`
/// makes it) with the subscription id.
pub fn task_notification(detailed: &Map<String, Value>, subscription_id: &Value) -> Value {
    let mut params = detailed.clone();
    params.insert("_meta".into(), subscription_meta(subscription_id));
    json!({
        "jsonrpc": "2.0",
        "method": TASK_NOTIFICATION,
        "params": params,
    })
}

/// The result that ends a stream, before the server stamps its identity on it.
pub fn listen_result(subscription_id: &Value) -> Map<String, Value> {
    let mut result = Map::new();
    result.insert("resultType".into(), json!("complete"));
    result.insert("_meta".into(), subscription_meta(subscription_id));
    result
}
