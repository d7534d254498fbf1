//! Input asked for while the run holds the task: a handler that must keep something open
//! while the client answers (a call to an upstream MCP server that sent
//! `elicitation/create`) shows its requests as the task's `inputRequests` without giving
//! up its lease. The task is `input_required` and still leased; heartbeats go on. The
//! client's answer (`tasks/update`, any replica, see `client_ops.rs`) sets it `working`
//! again but not runnable, and the run that asked reads the answer here and goes on.
//!
//! If the run's lease lapses meanwhile (its worker died), the task is reclaimed or
//! rescued like any lapsed lease (`lease.rs`): the request died with the run.

use serde_json::{Map, Value};

use crate::sql::checked;
use crate::{DbResult, Lease, Result, WorkerStore, storable};

/// What [`WorkerStore::ask_held`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldAsk {
    /// The task is `input_required` under these keys (in the order asked), still leased.
    Asked(Vec<String>),
    /// Cancellation was requested meanwhile; nothing was asked.
    CancelRequested,
    /// The lease is gone.
    Stale,
}

/// Where the answers to a held request are.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldAnswers {
    /// Not every key is answered yet.
    Waiting,
    /// Every key is answered, in the order of the keys; the task is `working` again.
    Answered(Vec<Value>),
}

impl WorkerStore {
    /// Shows `requests` (each with the key it would like) as the task's `inputRequests`,
    /// keeping the lease. Keys already issued for this task get a suffix (`-2`, `-3`…),
    /// so every key is new over the task's lifetime.
    #[tracing::instrument(name = "db.lease.ask_held", skip_all, err(level = "debug"))]
    pub async fn ask_held(
        &self,
        lease: &Lease,
        requests: &[(String, Value)],
        status_message: Option<&str>,
    ) -> Result<HeldAsk> {
        for (key, request) in requests {
            storable::text("the input request keys", key)?;
            storable::json("the input requests", request)?;
        }
        storable::text_opt("the status message", status_message)?;
        let state = checked!(query!(
            r#"SELECT issued_keys, cancel_requested_at IS NOT NULL AS "cancel!" FROM tasks
               WHERE "# + FENCED + " AND status = 'working'",
            @lease(lease)
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        let issued = match state {
            None => return Ok(HeldAsk::Stale),
            Some(state) if state.cancel => return Ok(HeldAsk::CancelRequested),
            Some(state) => state.issued_keys,
        };
        let keys = fresh_keys(&issued, requests.iter().map(|(k, _)| k.as_str()));
        let map: Map<String, Value> = keys
            .iter()
            .cloned()
            .zip(requests.iter().map(|(_, r)| r.clone()))
            .collect();
        // Only the lease holder issues keys, so the keys picked above are still new; the
        // check on issued_keys makes that a guarantee rather than an assumption.
        let done = checked!(query!(
            "UPDATE tasks SET
                 status = 'input_required',
                 input_requests = $5,
                 issued_keys = issued_keys || $6::text[],
                 status_message = coalesce($7, status_message),
                 updated_at = now(),
                 version = version + 1
             WHERE " + FENCED + " AND status = 'working' AND cancel_requested_at IS NULL
              AND NOT (issued_keys && $6::text[])",
            @lease(lease),
            Value::Object(map),
            &keys,
            status_message
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        if done.rows_affected() == 1 {
            return Ok(HeldAsk::Asked(keys));
        }
        let cancel = checked!(query_scalar!(
            r#"SELECT cancel_requested_at IS NOT NULL AS "cancel!" FROM tasks WHERE "# + FENCED,
            @lease(lease)
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(match cancel {
            Some(true) => HeldAsk::CancelRequested,
            _ => HeldAsk::Stale,
        })
    }

    /// The answers to a held request under `keys`, once all have arrived. `None` when
    /// the lease is gone (lost, or the task ended: cancelled, expired).
    #[tracing::instrument(name = "db.lease.held_answers", skip_all, err(level = "debug"))]
    pub async fn held_answers(
        &self,
        lease: &Lease,
        keys: &[String],
    ) -> Result<Option<HeldAnswers>> {
        let row = checked!(query!(
            r#"SELECT status,
                    (SELECT coalesce(jsonb_object_agg(k, input_responses -> k), '{}'::jsonb)
                     FROM unnest($5::text[]) AS k WHERE input_responses ? k) AS "answers!"
             FROM tasks WHERE "# + FENCED,
            @lease(lease),
            keys
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        let Some((status, Value::Object(mut answers))) = row.map(|r| (r.status, r.answers)) else {
            return Ok(None);
        };
        // The replica sets the task working when the last outstanding key is answered.
        if status != "working" || keys.iter().any(|k| !answers.contains_key(k)) {
            return Ok(Some(HeldAnswers::Waiting));
        }
        Ok(Some(HeldAnswers::Answered(
            keys.iter()
                .map(|k| answers.remove(k).unwrap_or(Value::Null))
                .collect(),
        )))
    }
}

/// `wanted`, each made unique against `issued` and the keys before it.
fn fresh_keys<'a>(issued: &[String], wanted: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut taken: std::collections::HashSet<String> = issued.iter().cloned().collect();
    let mut keys = Vec::new();
    for want in wanted {
        let want = if want.is_empty() { "input" } else { want };
        let mut key = want.to_owned();
        let mut n = 2u64;
        while taken.contains(&key) {
            key = format!("{want}-{n}");
            n += 1;
        }
        taken.insert(key.clone());
        keys.push(key);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::fresh_keys;

    #[test]
    fn keys_are_never_reused() {
        let issued = vec!["a".to_owned(), "a-2".to_owned()];
        assert_eq!(
            fresh_keys(&issued, ["a", "a", "b", ""].into_iter()),
            ["a-3", "a-4", "b", "input"]
        );
    }
}
