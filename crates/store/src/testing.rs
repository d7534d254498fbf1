//! Seeding (the `testing` feature): tasks written straight into the table in the state a
//! harness needs (finished long ago, queued for tomorrow, leased by a worker that is
//! gone), many at a time, with the store's own column list. The benchmarks load a million
//! rows and the tests whole tables this way, which the service's own paths (create, claim,
//! finish) could not do in the time, nor into the past.
//!
//! Rows go in with one `COPY` (CSV) in one transaction, and satisfy the table's CHECK
//! constraints by construction: a [`SeedState`] is one of the states a task can be in.
//!
//! [`RAW_CREATE`] is the one-row INSERT a create comes down to, for the benchmarks to issue
//! on their own connections beside the service's create.

use serde_json::{Map, Value};
use std::io::Write as _;
use time::OffsetDateTime;

use time::format_description::well_known::Rfc3339;

use crate::{DbResult, Owner, Result, Store, StoreError, TaskId};

pub use crate::claim::{
    CLAIM as FAIR_CLAIM, CLAIM_BY_TOOL as FAIR_CLAIM_BY_TOOL, OLDEST_FIRST_CLAIM,
};

/// A task to seed. [`Seed::new`] gives a queued one, created now; set what differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Seed {
    pub id: TaskId,
    pub owner: Owner,
    pub tool: String,
    pub arguments: Value,
    pub state: SeedState,
    pub status_message: Option<String>,
    pub created_at: OffsetDateTime,
    /// From `created_at`; the task expires (or, finished, is deleted) then. `None`: never.
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    pub retention_ms: i64,
    pub max_attempts: i32,
    /// The runs of the current input round so far.
    pub attempt: i32,
    /// The latest claim (its attempt is `attempt`); `None`: never claimed.
    pub claim: Option<SeedClaim>,
}

/// Where a seeded task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum SeedState {
    /// Working and unleased: claimable from `run_after` on; with `None`, never (a task
    /// stuck in the queue, which nothing claims).
    Queued {
        run_after: Option<OffsetDateTime>,
    },
    /// Working and leased by `worker` until `expires_at` (which may have passed: a lost
    /// worker's lease).
    Leased {
        worker: String,
        token: i64,
        expires_at: OffsetDateTime,
    },
    /// Waiting for answers to these requests (by key), no lease held.
    InputRequired {
        requests: Map<String, Value>,
    },
    Completed {
        result: Value,
        finished_at: OffsetDateTime,
    },
    Failed {
        error: Value,
        finished_at: OffsetDateTime,
    },
    Cancelled {
        finished_at: OffsetDateTime,
    },
}

/// A task's latest claim, as the claim statement records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedClaim {
    pub at: OffsetDateTime,
    pub worker: String,
    /// How long the task waited to be claimed.
    pub pickup_ms: i32,
}

impl Seed {
    /// A task of `owner` and `tool`, created now, runnable now, never claimed: arguments
    /// `{}`, an hour's retention, three attempts.
    pub fn new(owner: Owner, tool: impl Into<String>) -> Self {
        let now = OffsetDateTime::now_utc();
        Self {
            id: TaskId::random(),
            owner,
            tool: tool.into(),
            arguments: Value::Object(Map::new()),
            state: SeedState::Queued {
                run_after: Some(now),
            },
            status_message: None,
            created_at: now,
            ttl_ms: None,
            poll_interval_ms: None,
            retention_ms: 3_600_000,
            max_attempts: 3,
            attempt: 0,
            claim: None,
        }
    }
}

/// The one-row INSERT of a create on its own (autocommit): a runnable task of tool
/// `slow_compute` for `$1` (tenant), `$2` (principal), `$3` (id), with the columns the
/// service's create writes. What the benchmarks' raw create baseline issues.
pub const RAW_CREATE: &str = r"
    INSERT INTO tasks (
        tenant, principal, id, tool, arguments, trace_context,
        status_message, ttl_ms, poll_interval_ms, retention_ms, expires_at,
        input_responses, max_attempts, run_after
    ) VALUES (
        $1, $2, $3, 'slow_compute', '{}'::jsonb, NULL,
        'Queued; waiting for a worker', NULL, 500, 3600000, NULL,
        '{}'::jsonb, 3, now()
    )";

/// The columns a seed writes, in the order of [`csv_row`]; the rest take their defaults.
const COPY: &str = "COPY tasks (tenant, principal, id, tool, arguments, status, status_message,
    created_at, updated_at, finished_at, ttl_ms, poll_interval_ms, retention_ms, expires_at,
    result, error, input_requests, issued_keys, max_attempts, attempt, run_after, lease_owner,
    lease_token, lease_expires_at, claimed_at, claimed_by, pickup_ms, claimed_attempt,
    queue_key)
    FROM STDIN (FORMAT csv)";

/// How much CSV is sent at a time.
const CHUNK: usize = 1 << 20;

impl Store {
    /// Writes `tasks` into the table (one `COPY`, one transaction, no statement timeout)
    /// and returns how many it wrote. Nothing notifies: workers find queued ones by their
    /// poll.
    ///
    /// Unfinished tasks get their place in the fair order as creates in this order would,
    /// each lane (tenant, principal) one step of 1 per task from the queue's clock (as if
    /// each tenant had one lane with work); the lanes' last keys are written too.
    pub async fn seed(&self, tasks: impl IntoIterator<Item = Seed>) -> Result<u64> {
        let mut tx = self.db.pool().begin().await.db()?;
        // A load of millions of rows may take longer than any request should.
        sqlx::query!("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await
            .db()?;
        let clock = sqlx::query_scalar!(r#"SELECT mcp_tasks_queue_clock() AS "clock!""#)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let mut lanes: std::collections::HashMap<(String, String), f64> =
            std::collections::HashMap::new();
        let mut copy = tx.copy_in_raw(COPY).await.db()?;
        let mut buffer = Vec::with_capacity(CHUNK + 4096);
        let mut cache = Cache::default();
        for task in tasks {
            let unfinished = matches!(
                task.state,
                SeedState::Queued { .. }
                    | SeedState::Leased { .. }
                    | SeedState::InputRequired { .. }
            );
            let key = unfinished.then(|| {
                let last = lanes
                    .entry((task.owner.tenant.clone(), task.owner.principal.clone()))
                    .or_insert(clock);
                *last += 1.0;
                *last
            });
            csv_row(&task, key, &mut buffer, &mut cache)?;
            if buffer.len() >= CHUNK {
                copy.send(std::mem::take(&mut buffer)).await.db()?;
                buffer.reserve(CHUNK + 4096);
            }
        }
        if !buffer.is_empty() {
            copy.send(buffer).await.db()?;
        }
        let written = copy.finish().await.db()?;
        let (mut tenants, mut principals, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        for ((tenant, principal), key) in lanes {
            tenants.push(tenant);
            principals.push(principal);
            keys.push(key);
        }
        sqlx::query!(
            "INSERT INTO queue_lanes AS q (tenant, principal, last_key)
             SELECT * FROM unnest($1::text[], $2::text[], $3::float8[])
             ON CONFLICT (tenant, principal) DO UPDATE
                 SET last_key = greatest(q.last_key, EXCLUDED.last_key)",
            &tenants,
            &principals,
            &keys,
        )
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        Ok(written)
    }
}

/// The last value written in each JSON and time column, and its CSV: the rows of a bulk
/// load mostly repeat them, and encoding is most of the time a seed takes in a debug build.
#[derive(Default)]
struct Cache {
    json: [Option<(Value, Vec<u8>)>; 4],
    times: [Option<(OffsetDateTime, Vec<u8>)>; 7],
}

/// One CSV line of [`COPY`]'s columns, written straight into `out`.
fn csv_row(task: &Seed, key: Option<f64>, out: &mut Vec<u8>, cache: &mut Cache) -> Result<()> {
    let (status, result, error, requests, finished_at) = match &task.state {
        SeedState::Queued { .. } | SeedState::Leased { .. } => ("working", None, None, None, None),
        SeedState::InputRequired { requests } => {
            ("input_required", None, None, Some(requests), None)
        }
        SeedState::Completed {
            result,
            finished_at,
        } => ("completed", Some(result), None, None, Some(finished_at)),
        SeedState::Failed { error, finished_at } => {
            ("failed", None, Some(error), None, Some(finished_at))
        }
        SeedState::Cancelled { finished_at } => ("cancelled", None, None, None, Some(finished_at)),
    };
    let run_after = match &task.state {
        SeedState::Queued { run_after } => run_after.as_ref(),
        _ => None,
    };
    let lease = match &task.state {
        SeedState::Leased {
            worker,
            token,
            expires_at,
        } => Some((worker.as_str(), *token, expires_at)),
        _ => None,
    };
    let expires_at = task
        .ttl_ms
        .map(|ms| task.created_at + time::Duration::milliseconds(ms));
    let claim = task.claim.as_ref();
    let mut line = Line {
        out,
        cache,
        started: false,
    };
    line.text(Some(&task.owner.tenant));
    line.text(Some(&task.owner.principal));
    line.field();
    let mut id = uuid::Uuid::encode_buffer();
    line.out.push(b'"');
    line.out
        .extend_from_slice(task.id.0.hyphenated().encode_lower(&mut id).as_bytes());
    line.out.push(b'"');
    line.text(Some(&task.tool));
    line.json(0, Some(&task.arguments));
    line.text(Some(status));
    line.text(task.status_message.as_deref());
    line.time(0, Some(&task.created_at))?;
    line.time(1, Some(finished_at.unwrap_or(&task.created_at)))?;
    line.time(2, finished_at)?;
    line.display(task.ttl_ms);
    line.display(task.poll_interval_ms);
    line.display(Some(task.retention_ms));
    line.time(3, expires_at.as_ref())?;
    line.json(1, result);
    line.json(2, error);
    line.json(3, requests.map(|r| Value::Object(r.clone())).as_ref());
    // A text[] literal of the requests' keys: each element quoted, `\` and `"` escaped.
    let keys = requests.map_or_else(String::new, |r| {
        r.keys()
            .map(|k| format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(",")
    });
    line.text(Some(&format!("{{{keys}}}")));
    line.display(Some(task.max_attempts));
    line.display(Some(task.attempt));
    line.time(4, run_after)?;
    line.text(lease.map(|(worker, _, _)| worker));
    line.display(Some(lease.map_or(0, |(_, token, _)| token)));
    line.time(5, lease.map(|(_, _, at)| at))?;
    line.time(6, claim.map(|c| &c.at))?;
    line.text(claim.map(|c| c.worker.as_str()));
    line.display(claim.map(|c| c.pickup_ms));
    line.display(claim.map(|_| task.attempt));
    line.display(key);
    line.out.push(b'\n');
    Ok(())
}

/// A CSV line being written: every value quoted (so an empty string stays one), NULL an
/// unquoted empty field.
struct Line<'a> {
    out: &'a mut Vec<u8>,
    cache: &'a mut Cache,
    started: bool,
}

impl Line<'_> {
    /// Starts a field (after the separator): NULL unless a value follows.
    fn field(&mut self) {
        if self.started {
            self.out.push(b',');
        }
        self.started = true;
    }

    fn quoted<E>(&mut self, write: impl FnOnce(&mut Quoted<'_>) -> Result<(), E>) -> Result<(), E> {
        self.out.push(b'"');
        let written = write(&mut Quoted(self.out));
        self.out.push(b'"');
        written
    }

    fn text(&mut self, value: Option<&str>) {
        self.field();
        if let Some(v) = value {
            // Writing into memory does not fail.
            let _ = self.quoted(|q| q.write_all(v.as_bytes()));
        }
    }

    fn display(&mut self, value: Option<impl std::fmt::Display>) {
        self.field();
        if let Some(v) = value {
            let _ = self.quoted(|q| write!(q, "{v}"));
        }
    }

    /// Column `slot`'s JSON (see [`Cache`]).
    fn json(&mut self, slot: usize, value: Option<&Value>) {
        self.field();
        let Some(v) = value else { return };
        match &self.cache.json[slot] {
            Some((last, csv)) if last == v => self.out.extend_from_slice(csv),
            _ => {
                let start = self.out.len();
                let _ = self.quoted(|q| serde_json::to_writer(q, v));
                self.cache.json[slot] = Some((v.clone(), self.out[start..].to_vec()));
            }
        }
    }

    /// Column `slot`'s time (see [`Cache`]).
    fn time(&mut self, slot: usize, value: Option<&OffsetDateTime>) -> Result<()> {
        self.field();
        let Some(t) = value else { return Ok(()) };
        match &self.cache.times[slot] {
            Some((last, csv)) if last == t => self.out.extend_from_slice(csv),
            _ => {
                let start = self.out.len();
                self.quoted(|q| t.format_into(q, &Rfc3339).map(drop))
                    .map_err(|e| StoreError::refused(format!("a seed's time: {e}")))?;
                self.cache.times[slot] = Some((*t, self.out[start..].to_vec()));
            }
        }
        Ok(())
    }
}

/// Writes CSV field content, doubling quotes.
struct Quoted<'a>(&'a mut Vec<u8>);

impl std::io::Write for Quoted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b == b'"' {
                self.0.push(b'"');
            }
            self.0.push(b);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_quotes_every_value_and_leaves_nulls_empty() {
        let mut task = Seed::new(Owner::new("t", "p\"q"), "tool");
        task.state = SeedState::InputRequired {
            requests: serde_json::json!({ "a\"b": { "method": "elicitation/create" } })
                .as_object()
                .cloned()
                .unwrap_or_default(),
        };
        let mut out = Vec::new();
        csv_row(&task, Some(2.5), &mut out, &mut Cache::default()).expect("row");
        let line = String::from_utf8(out).expect("utf-8");
        assert!(line.starts_with("\"t\",\"p\"\"q\","), "{line}");
        assert!(line.contains(",\"input_required\",,"), "{line}");
        assert!(line.contains(r#","{""a\""b""}","#), "{line}");
        assert!(line.ends_with(",\"0\",,,,,,\"2.5\"\n"), "{line}");
    }

    #[test]
    fn cached_values_are_written_as_fresh_ones_would_be() {
        let now = OffsetDateTime::now_utc();
        let done = |text: &str, at| SeedState::Completed {
            result: serde_json::json!({ "text": text }),
            finished_at: at,
        };
        let owner = Owner::new("t", "p");
        let rows = [
            Seed {
                state: done("a", now),
                ..Seed::new(owner.clone(), "x")
            },
            Seed {
                state: done("b", now),
                ..Seed::new(owner.clone(), "x")
            },
            Seed {
                state: done("a", now + time::Duration::seconds(1)),
                ..Seed::new(owner.clone(), "x")
            },
        ];
        let (mut shared, mut cache) = (Vec::new(), Cache::default());
        let mut fresh = Vec::new();
        for row in &rows {
            csv_row(row, None, &mut shared, &mut cache).expect("row");
            csv_row(row, None, &mut fresh, &mut Cache::default()).expect("row");
        }
        assert_eq!(String::from_utf8(shared), String::from_utf8(fresh));
    }
}
