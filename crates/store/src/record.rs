//! A task row as the rest of the service sees it.

use mcp_tasks_wire::service_messages::EndReason;
use mcp_tasks_wire::{ErrorObject, RawTaskView, TaskStatus, TaskView};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Owner, StoreError};

/// A worker's hold on one task. The token is bumped by every claim, so a lease that was
/// lost and re-granted to someone else can never write again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: Owner,
    pub id: TaskId,
    pub token: i64,
}

/// A task id: a UUIDv8 whose first 28 bits are the creation time in 16-second buckets and
/// whose other 94 bits (all but version and variant) are random, written in its hyphenated
/// lowercase form, which is safe in an `Mcp-Name` header as is.
///
/// Why not v4: the primary key is (tenant, principal, id), so with random ids every
/// create of an owner with many tasks lands on a random leaf of that owner's part of the
/// key, which is mostly not in shared buffers and, once per checkpoint, costs a full-page
/// image (measured at 1,000,000 tasks of one owner: 0.35-0.5 index reads and about 0.5
/// full-page images, 4 KB of WAL, per insert). With a time prefix the creates of the last
/// 16 s share a few leaves at the right end of the owner's range.
///
/// The bit budget: ids are bearer tokens and MUST be unguessable (WIRE.md). The prefix is
/// guessable, so only the random part counts: 94 bits, against 2^94 candidates per owner
/// and bucket (v4 has 122; UUIDv7's counter and millisecond clock would leave 62 to 74).
/// 16-second buckets keep the leaves being written few (3,000 creates/s make 48,000
/// entries, some 300 leaves) while revealing no more than the creation time the owner
/// sees anyway. 28 bits of buckets last until 2106; a wrap would cost locality, not
/// correctness, because ids are compared only as opaque uuids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub Uuid);

/// Seconds per time bucket of a task id's prefix (a power of two).
const ID_BUCKET_SHIFT: u32 = 4;

impl TaskId {
    pub fn random() -> Self {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self::at(seconds)
    }

    fn at(unix_seconds: u64) -> Self {
        // v4's 122 bits come from the operating system's generator; the first 28 of them
        // are replaced by the bucket, and the version nibble (not random) by 8.
        let mut bytes = Uuid::new_v4().into_bytes();
        let bucket = ((unix_seconds >> ID_BUCKET_SHIFT) & 0x0fff_ffff) as u32;
        let prefix = (bucket << 4).to_be_bytes();
        bytes[..3].copy_from_slice(&prefix[..3]);
        bytes[3] = prefix[3] | (bytes[3] & 0x0f);
        Self(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// Parses the wire form. Only the exact form this service hands out is accepted, so
    /// a malformed id is rejected before any lookup.
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() != 36 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        Uuid::try_parse(s).ok().map(Self)
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// Every column of a task row (`TASK_COLUMNS` in `sql.rs`). Flat, as `sqlx::query_as!`
/// fills it: what says how the task stands is read as a [`StandingRow`].
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct TaskRow {
    pub(crate) tenant: String,
    pub(crate) principal: String,
    pub(crate) id: Uuid,
    pub(crate) tool: String,
    pub(crate) status: String,
    pub(crate) status_message: Option<String>,
    pub(crate) error: Option<Value>,
    pub(crate) attempt: i32,
    pub(crate) end_reason: Option<String>,
    pub(crate) arguments: Value,
    pub(crate) trace_context: Option<Value>,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
    pub(crate) finished_at: Option<OffsetDateTime>,
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) poll_interval_ms: Option<i64>,
    pub(crate) retention_ms: i64,
    pub(crate) result: Option<Value>,
    pub(crate) input_requests: Option<Value>,
    pub(crate) input_responses: Value,
    pub(crate) issued_keys: Vec<String>,
    pub(crate) checkpoint: Option<Value>,
    pub(crate) lease_owner: Option<String>,
    pub(crate) lease_token: i64,
    pub(crate) lease_expires_at: Option<OffsetDateTime>,
    pub(crate) max_attempts: i32,
    pub(crate) claimed_attempt: Option<i32>,
    pub(crate) cancel_requested_at: Option<OffsetDateTime>,
    pub(crate) version: i64,
    pub(crate) request_digest: Option<String>,
    pub(crate) client_capabilities: Option<Value>,
}

/// The codes of `tasks.end_reason` (the migration's CHECK constraint lists the same).
pub(crate) fn end_reason(code: &str) -> Option<EndReason> {
    Some(match code {
        "cancelled_by_client" => EndReason::CancelledByClient,
        "expired" => EndReason::Expired,
        "crash_recovery" => EndReason::CrashRecovery,
        _ => return None,
    })
}

/// The columns that say how a task stands, in every row type that reads a task.
#[derive(Debug, Clone)]
pub(crate) struct StandingRow {
    status: String,
    status_message: Option<String>,
    error: Option<Value>,
    attempt: i32,
    end_reason: Option<String>,
}

/// How a row says its task stands. A task the service ended on its own account has an
/// `end_reason`; its status message and error, when the row has none, are composed from it.
struct Standing {
    status: TaskStatus,
    end_reason: Option<EndReason>,
    status_message: Option<String>,
    error: Option<ErrorObject>,
    attempt: i32,
}

impl Standing {
    fn read(id: Uuid, row: StandingRow) -> Result<Self, StoreError> {
        let status = row.status.parse().map_err(|e: String| corrupt(id, &e))?;
        let end_reason = row
            .end_reason
            .as_deref()
            .map(|code| end_reason(code).ok_or_else(|| corrupt(id, "unknown end_reason")))
            .transpose()?;
        let error = match row.error {
            Some(error) => Some(
                serde_json::from_value(error)
                    .map_err(|_| corrupt(id, "error is not a JSON-RPC error object"))?,
            ),
            None => end_reason.and_then(|r| r.error(row.attempt)),
        };
        let status_message = row
            .status_message
            .or_else(|| end_reason.map(|r| r.status_message().to_owned()));
        Ok(Self {
            status,
            end_reason,
            status_message,
            error,
            attempt: row.attempt,
        })
    }
}

fn corrupt(id: Uuid, what: &str) -> StoreError {
    StoreError::corrupt(format!("task {id}: {what}"))
}

/// A task as stored. A task the service ended on its own account has an `end_reason`,
/// and its `status_message` and `error` are composed from it (`mcp_tasks_wire` has the
/// words).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub owner: Owner,
    pub id: TaskId,
    pub tool: String,
    pub arguments: Value,
    pub trace_context: Option<Value>,
    /// What the creating client declared it can answer (see [`crate::NewTask`]).
    pub client_capabilities: Option<Value>,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    pub retention_ms: i64,
    pub result: Option<Value>,
    pub error: Option<ErrorObject>,
    pub input_requests: Option<Map<String, Value>>,
    pub input_responses: Map<String, Value>,
    pub issued_keys: Vec<String>,
    pub checkpoint: Option<Value>,
    pub lease_owner: Option<String>,
    pub lease_token: i64,
    pub lease_expires_at: Option<OffsetDateTime>,
    /// The runs of the current input round so far, against `max_attempts` (parking for
    /// input starts a new round at 0; a release takes the interrupted run back).
    pub attempt: i32,
    pub max_attempts: i32,
    /// The latest claim's attempt number (kept through input rounds); `None` before the
    /// first claim.
    pub claimed_attempt: Option<i32>,
    pub cancel_requested_at: Option<OffsetDateTime>,
    pub version: i64,
    pub end_reason: Option<EndReason>,
}

impl TryFrom<TaskRow> for TaskRecord {
    type Error = StoreError;

    fn try_from(row: TaskRow) -> Result<Self, StoreError> {
        let standing = Standing::read(
            row.id,
            StandingRow {
                status: row.status,
                status_message: row.status_message,
                error: row.error,
                attempt: row.attempt,
                end_reason: row.end_reason,
            },
        )?;
        let input_requests = match row.input_requests.clone() {
            None => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(corrupt(row.id, "input_requests is not an object")),
        };
        let Value::Object(input_responses) = row.input_responses.clone() else {
            return Err(corrupt(row.id, "input_responses is not an object"));
        };
        Ok(Self {
            owner: Owner {
                tenant: row.tenant,
                principal: row.principal,
            },
            id: TaskId(row.id),
            tool: row.tool,
            arguments: row.arguments,
            trace_context: row.trace_context,
            client_capabilities: row.client_capabilities,
            status: standing.status,
            status_message: standing.status_message,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
            ttl_ms: row.ttl_ms,
            poll_interval_ms: row.poll_interval_ms,
            retention_ms: row.retention_ms,
            result: row.result,
            error: standing.error,
            input_requests,
            input_responses,
            issued_keys: row.issued_keys,
            checkpoint: row.checkpoint,
            lease_owner: row.lease_owner,
            lease_token: row.lease_token,
            lease_expires_at: row.lease_expires_at,
            attempt: standing.attempt,
            max_attempts: row.max_attempts,
            claimed_attempt: row.claimed_attempt,
            cancel_requested_at: row.cancel_requested_at,
            version: row.version,
            end_reason: standing.end_reason,
        })
    }
}

/// The columns `tasks/get` shows, and no others (no arguments, answers or checkpoint to
/// carry and parse for nothing). The result and input requests stay the text PostgreSQL
/// sends: the answer carries them unchanged, so they are only scanned, never parsed into
/// a tree. Nothing is trusted that was not before: jsonb holds only valid JSON, and what
/// a worker stored there (a tool's result, an upstream's as its client library read it,
/// input requests the worker composed) is what parsing and re-serialising used to send.
/// (`VIEW_COLUMNS` in `sql.rs`.)
#[derive(Debug, Clone)]
pub(crate) struct ViewRow {
    /// Which request of its batch read it (1-based, `views.rs`).
    pub(crate) n: i64,
    pub(crate) id: Uuid,
    pub(crate) status: String,
    pub(crate) status_message: Option<String>,
    pub(crate) error: Option<Value>,
    pub(crate) attempt: i32,
    pub(crate) end_reason: Option<String>,
    pub(crate) created_at: OffsetDateTime,
    pub(crate) updated_at: OffsetDateTime,
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) poll_interval_ms: Option<i64>,
    pub(crate) result: Option<Box<RawValue>>,
    pub(crate) input_requests: Option<Box<RawValue>>,
}

impl TryFrom<ViewRow> for RawTaskView {
    type Error = StoreError;

    fn try_from(row: ViewRow) -> Result<Self, StoreError> {
        let standing = Standing::read(
            row.id,
            StandingRow {
                status: row.status,
                status_message: row.status_message,
                error: row.error,
                attempt: row.attempt,
                end_reason: row.end_reason,
            },
        )?;
        // jsonb prints an object with its brace first.
        if row
            .input_requests
            .as_ref()
            .is_some_and(|r| !r.get().starts_with('{'))
        {
            return Err(corrupt(row.id, "input_requests is not an object"));
        }
        Ok(TaskView {
            task_id: TaskId(row.id).to_string(),
            status: standing.status,
            status_message: standing.status_message,
            created_at: row.created_at,
            last_updated_at: row.updated_at,
            ttl_ms: row.ttl_ms,
            poll_interval_ms: row.poll_interval_ms,
            input_requests: row.input_requests,
            result: row.result,
            error: standing.error,
        })
    }
}

impl TaskRecord {
    /// The attempt the task is on: its latest claim's, also while it waits for input or
    /// for its next run; 0 before any claim.
    pub fn current_attempt(&self) -> i32 {
        self.claimed_attempt.unwrap_or(self.attempt)
    }

    /// What `tasks/get` shows of this task.
    pub fn view(&self) -> TaskView {
        TaskView {
            task_id: self.id.to_string(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at: self.created_at,
            last_updated_at: self.updated_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            input_requests: self.input_requests.clone().map(Value::Object),
            result: self.result.clone(),
            error: self.error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_reject_other_forms() {
        let id = TaskId::random();
        assert_eq!(TaskId::parse(&id.to_string()), Some(id));
        assert_eq!(id.0.get_version_num(), 8);
        assert_eq!(id.0.get_variant(), uuid::Variant::RFC4122);
        for bad in [
            "",
            "tasks-conformance-nonexistent-12345",
            "6F9619FF-8B86-D011-B42D-00CF4FC964FF",
            "6f9619ff8b86d011b42d00cf4fc964ff",
            "{6f9619ff-8b86-d011-b42d-00cf4fc964ff}",
            "6f9619ff-8b86-d011-b42d-00cf4fc964fg",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn task_ids_are_ordered_by_bucket_and_random_within_one() {
        let (a, b) = (TaskId::at(1_000_000), TaskId::at(1_000_015));
        let later = TaskId::at(1_000_016);
        assert_eq!(a.0.as_bytes()[..3], b.0.as_bytes()[..3]);
        assert_eq!(a.0.as_bytes()[3] >> 4, b.0.as_bytes()[3] >> 4);
        assert!(later > a && later > b, "{a} {b} {later}");
        // The random part: 94 bits that differ between ids of one bucket.
        let mask = |id: TaskId| {
            let mut x = u128::from_be_bytes(id.0.into_bytes());
            x &= (1u128 << 100) - 1; // below the prefix
            x & !(0xfu128 << 76) & !(0x3u128 << 62) // version and variant
        };
        let ids: Vec<u128> = (0..64).map(|_| mask(TaskId::at(1_000_000))).collect();
        let (mut ones, mut zeros) = (0u128, 0u128);
        for x in &ids {
            ones |= x;
            zeros |= !x;
        }
        let random = ((1u128 << 100) - 1) & !(0xfu128 << 76) & !(0x3u128 << 62);
        assert_eq!(random.count_ones(), 94);
        // Every random bit takes both values in 64 ids (a fixed bit would not, and the
        // chance that a random one does not is 2^-63 per bit).
        assert_eq!(ones & random, random);
        assert_eq!(zeros & random, random);
    }
}
