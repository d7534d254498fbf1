//! Creating tasks, in batches: the creates that arrive together on a replica become one
//! multi-row INSERT and one commit (see `batch.rs`), each answered once it is durable.
//!
//! The in-flight limit is checked in the same statement. Creates are not serialised per
//! owner: a batch counts the owner's live tasks once and admits, in arrival order, as
//! many of the batch's creates as fit. A replica runs one create batch at a time, so on
//! one replica the limit is exact; batches of *other* replicas committing at the same
//! moment are not counted, so an owner can exceed the limit by at most
//! `(replicas - 1) * MAX_CREATE_BATCH` tasks, and only while creating that fast on
//! several replicas at once.

use mcp_tasks_wire::TaskStatus;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::record::TaskRow;
use crate::sql::checked;
use crate::{DbResult, Owner, ReplicaStore, Result, StoreError, TaskId, TaskRecord};

/// Most creates in one batch: the in-flight limit's margin per other replica.
pub const MAX_CREATE_BATCH: usize = 128;

/// A task about to be created.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub tool: String,
    pub arguments: Value,
    pub status_message: Option<String>,
    /// From creation; `None` is unlimited.
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Minimum time a finished task stays readable.
    pub retention_ms: i64,
    pub max_attempts: i32,
    /// Answers gathered before the task existed (MRTR), visible to the handler.
    pub input_responses: Map<String, Value>,
    pub trace_context: Option<Value>,
    /// What the creating client declared it can answer (a `ClientCapabilities` object
    /// reduced to its input kinds), for a run that asks it for input.
    pub client_capabilities: Option<Value>,
    /// Makes creation idempotent: a second create with the same key finds this task.
    pub idempotency: Option<Idempotency>,
}

/// An idempotency key and a digest of the request it was first used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    pub request_digest: String,
}

/// What a create did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    New(TaskRecord),
    /// An earlier create with the same idempotency key and request made this task.
    Existing(TaskRecord),
    /// The idempotency key was used before with a different request.
    KeyConflict,
    /// The owner has too many unfinished tasks.
    LimitReached,
}

/// Where a new task goes in the queue's order (see ARCHITECTURE.md, *Scheduling*): the
/// replica decides it from the scheduling policy when it creates the task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// The tenant's weight (at least 1): its share of the claims when tenants compete.
    pub weight: u32,
    /// Rounds of the fair order the task moves ahead of its turn (its priority times the
    /// policy's rounds per level; negative moves it behind).
    pub rounds_ahead: f64,
    /// Everyone in one lane: oldest first across tenants, as before fair scheduling.
    pub fifo: bool,
}

impl Default for Placement {
    /// Fair, weight 1, no priority.
    fn default() -> Self {
        Self {
            weight: 1,
            rounds_ahead: 0.0,
            fifo: false,
        }
    }
}

/// One create waiting for its batch.
pub(crate) struct CreateRequest {
    owner: Owner,
    id: TaskId,
    task: NewTask,
    max_in_flight: Option<i64>,
    placement: Placement,
}

impl CreateRequest {
    /// The lane the task queues in: its owner's, or the one lane of `fifo`.
    fn lane(&self) -> (&str, &str) {
        if self.placement.fifo {
            ("", "")
        } else {
            (&self.owner.tenant, &self.owner.principal)
        }
    }
}

/// What the batch did with one create: inserted (at this time) or not.
pub(crate) type CreateAnswer = Option<OffsetDateTime>;

impl CreateRequest {
    /// Refuses what PostgreSQL cannot store, naming it; otherwise the request's size,
    /// for the batch's byte budget.
    fn checked_bytes(&self) -> Result<usize> {
        use crate::storable::{json, json_opt, map, text, text_opt};
        use mcp_tasks_wire::json::serialized_len;
        let t = &self.task;
        text("the tenant", &self.owner.tenant)?;
        text("the principal", &self.owner.principal)?;
        text("the tool name", &t.tool)?;
        text_opt("the status message", t.status_message.as_deref())?;
        json("the arguments", &t.arguments)?;
        map("the input responses", &t.input_responses)?;
        json_opt("the trace context", t.trace_context.as_ref())?;
        json_opt("the client capabilities", t.client_capabilities.as_ref())?;
        if let Some(i) = &t.idempotency {
            text("the idempotency key", &i.key)?;
            text("the request digest", &i.request_digest)?;
        }
        Ok(serialized_len(&t.arguments)
            + serialized_len(&t.input_responses)
            + t.trace_context.as_ref().map_or(0, serialized_len)
            + t.client_capabilities.as_ref().map_or(0, serialized_len)
            + t.tool.len()
            + t.status_message.as_ref().map_or(0, String::len))
    }
}

/// Runs one batch of creates as one statement (so one commit).
pub(crate) fn insert_batch<'a>(
    pool: &'a sqlx::PgPool,
    batch: &'a [CreateRequest],
) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<CreateAnswer>>> + Send + 'a>> {
    Box::pin(async move {
        macro_rules! column {
            ($f:expr) => {
                batch.iter().map($f).collect::<Vec<_>>()
            };
        }
        let tenants = column!(|r| r.owner.tenant.as_str());
        let principals = column!(|r| r.owner.principal.as_str());
        let ids = column!(|r| r.id.0);
        let tools = column!(|r| r.task.tool.as_str());
        let arguments = column!(|r| r.task.arguments.clone());
        let trace_contexts = column!(|r| r.task.trace_context.clone());
        let messages = column!(|r| r.task.status_message.as_deref());
        let ttls = column!(|r| r.task.ttl_ms);
        let polls = column!(|r| r.task.poll_interval_ms);
        let retentions = column!(|r| r.task.retention_ms);
        let responses = column!(|r| Value::Object(r.task.input_responses.clone()));
        let max_attempts = column!(|r| r.task.max_attempts);
        let limits = column!(|r| r.max_in_flight);
        let keys = column!(|r| r.task.idempotency.as_ref().map(|i| i.key.as_str()));
        let digests = column!(|r| r
            .task
            .idempotency
            .as_ref()
            .map(|i| i.request_digest.as_str()));
        let capabilities = column!(|r| r.task.client_capabilities.clone());
        let lane_tenants = column!(|r| r.lane().0);
        let lane_principals = column!(|r| r.lane().1);
        let weights = column!(|r| i32::try_from(r.placement.weight.max(1)).unwrap_or(i32::MAX));
        let rounds_ahead = column!(|r| if r.placement.rounds_ahead.is_finite() {
            r.placement.rounds_ahead
        } else {
            0.0
        });
        // `as _`: the macros check arrays of owned, non-null elements only; each array is
        // bound as its `$n::type[]` in the statement says.
        let rows = sqlx::query!(
            r"
    WITH input AS (
        SELECT * FROM unnest(
            $1::text[], $2::text[], $3::uuid[], $4::text[], $5::jsonb[], $6::jsonb[],
            $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::jsonb[], $12::int4[],
            $13::int8[], $14::text[], $15::text[], $16::jsonb[],
            $17::text[], $18::text[], $19::int4[], $20::float8[]
        ) WITH ORDINALITY AS i(
            tenant, principal, id, tool, arguments, trace_context,
            status_message, ttl_ms, poll_interval_ms, retention_ms, input_responses, max_attempts,
            max_in_flight, idempotency_key, request_digest, client_capabilities,
            lane_tenant, lane_principal, weight, rounds_ahead, n
        )
    ),
    -- Each limited owner's live tasks, counted once per batch and never past the limit.
    live AS (
        SELECT o.tenant, o.principal, (
            SELECT count(*) FROM (
                SELECT 1 FROM tasks t
                WHERE t.tenant = o.tenant AND t.principal = o.principal AND t.finished_at IS NULL
                LIMIT o.lim
            ) AS x
        ) AS live
        FROM (
            SELECT tenant, principal, max(max_in_flight) AS lim FROM input
            WHERE max_in_flight IS NOT NULL GROUP BY tenant, principal
        ) AS o
    ),
    ranked AS (
        SELECT i.n, row_number() OVER (PARTITION BY i.tenant, i.principal ORDER BY i.n) AS k,
               l.live
        FROM input i JOIN live l ON l.tenant = i.tenant AND l.principal = i.principal
        WHERE i.max_in_flight IS NOT NULL
    ),
    admitted AS MATERIALIZED (
        SELECT i.* FROM input i LEFT JOIN ranked r ON r.n = i.n
        WHERE i.max_in_flight IS NULL OR r.live + r.k <= i.max_in_flight
    ),
    -- The queue's place (ARCHITECTURE.md, *Scheduling*): each lane of the batch moves its
    -- last key on by one step per task, from the clock at the earliest. A step is the
    -- tenant's lanes with work past the clock (this one among them) over its weight, so
    -- the tenant's lanes together advance as one lane of that weight.
    -- (`mcp_tasks_queue_clock()` written out: a SQL function's statement is planned
    -- again at every call.)
    clock AS MATERIALIZED (SELECT coalesce(max(key), 0) AS v FROM queue_clock),
    lanes AS MATERIALIZED (
        SELECT a.lane_tenant, a.lane_principal, count(*) AS tasks,
            (1 + (SELECT count(*) FROM queue_lanes q
                  WHERE q.tenant = a.lane_tenant AND q.last_key > c.v
                    AND q.principal <> a.lane_principal))::float8 / max(a.weight) AS step
        FROM admitted a CROSS JOIN clock c
        GROUP BY a.lane_tenant, a.lane_principal, c.v
    ),
    advanced AS (
        INSERT INTO queue_lanes AS q (tenant, principal, last_key)
        SELECT l.lane_tenant, l.lane_principal, c.v + l.tasks * l.step
        FROM lanes l CROSS JOIN clock c
        -- In key order, so batches sharing lanes lock them in the same order.
        ORDER BY l.lane_tenant, l.lane_principal
        ON CONFLICT (tenant, principal) DO UPDATE
            SET last_key = greatest(q.last_key, (SELECT v FROM clock))
                + (EXCLUDED.last_key - (SELECT v FROM clock))
        RETURNING q.tenant, q.principal, q.last_key
    )
    INSERT INTO tasks (
        tenant, principal, id, tool, arguments, trace_context,
        status_message, ttl_ms, poll_interval_ms, retention_ms, expires_at,
        input_responses, max_attempts, run_after, idempotency_key, request_digest,
        client_capabilities, queue_key
    )
    SELECT i.tenant, i.principal, i.id, i.tool, i.arguments, i.trace_context,
           i.status_message, i.ttl_ms, i.poll_interval_ms, i.retention_ms,
           now() + i.ttl_ms * interval '1 millisecond',
           i.input_responses, i.max_attempts, now(), i.idempotency_key, i.request_digest,
           i.client_capabilities,
           -- The lane's k-th task of the batch, k in arrival order.
           adv.last_key - (l.tasks - row_number() OVER (
               PARTITION BY i.lane_tenant, i.lane_principal ORDER BY i.n
           )) * l.step - i.rounds_ahead
    FROM admitted i
    JOIN lanes l ON l.lane_tenant = i.lane_tenant AND l.lane_principal = i.lane_principal
    JOIN advanced adv ON adv.tenant = i.lane_tenant AND adv.principal = i.lane_principal
    -- In key order: two batches inserting some of the same idempotency keys (an owner
    -- retrying on two replicas) wait for each other's key in the same order, so they
    -- cannot deadlock. (Ids are new, so the primary key never waits.)
    ORDER BY i.tenant, i.principal, i.idempotency_key, i.n
    ON CONFLICT (tenant, principal, idempotency_key) WHERE idempotency_key IS NOT NULL
        DO NOTHING
    RETURNING id, created_at",
            &tenants as _,
            &principals as _,
            &ids,
            &tools as _,
            &arguments,
            &trace_contexts as _,
            &messages as _,
            &ttls as _,
            &polls as _,
            &retentions,
            &responses,
            &max_attempts,
            &limits as _,
            &keys as _,
            &digests as _,
            &capabilities as _,
            &lane_tenants as _,
            &lane_principals as _,
            &weights,
            &rounds_ahead,
        )
        .fetch_all(pool)
        .await
        .db()?;
        let created: std::collections::HashMap<Uuid, OffsetDateTime> =
            rows.into_iter().map(|r| (r.id, r.created_at)).collect();
        Ok(batch
            .iter()
            .map(|r| created.get(&r.id.0).copied())
            .collect())
    })
}

impl ReplicaStore {
    /// Creates a task and commits it, so it is readable from every replica as soon as
    /// this returns. Wake the workers afterwards ([`crate::Waker`]).
    pub async fn create_task(&self, owner: &Owner, task: NewTask) -> Result<TaskRecord> {
        match self.create(owner, task, None).await? {
            Created::New(task) | Created::Existing(task) => Ok(task),
            other => Err(StoreError::corrupt(format!(
                "unlimited create refused: {other:?}"
            ))),
        }
    }

    /// Creates a task, unless the owner already has `max_in_flight` unfinished tasks (up
    /// to the margin the module describes), or the task's idempotency key names an
    /// existing task (returned, when the request is the same).
    ///
    /// It queues in its owner's lane with the default [`Placement`]; see
    /// [`ReplicaStore::create_placed`].
    ///
    /// A request with U+0000 in any string is refused ([`StoreError::refusal`]). A
    /// create whose caller stops waiting before its batch runs is dropped unwritten.
    pub async fn create(
        &self,
        owner: &Owner,
        task: NewTask,
        max_in_flight: Option<i64>,
    ) -> Result<Created> {
        self.create_placed(owner, task, max_in_flight, Placement::default())
            .await
    }

    /// [`ReplicaStore::create`], with the task's place in the queue's order (its tenant's
    /// weight, its priority: see [`Placement`]) as the scheduling policy sets it.
    #[tracing::instrument(name = "db.task.create", skip_all, fields(tool = %task.tool), err(level = "debug"))]
    pub async fn create_placed(
        &self,
        owner: &Owner,
        task: NewTask,
        max_in_flight: Option<i64>,
        placement: Placement,
    ) -> Result<Created> {
        let id = TaskId::random();
        let idempotency = task.idempotency.clone();
        let request = CreateRequest {
            owner: owner.clone(),
            id,
            task,
            max_in_flight,
            placement,
        };
        let bytes = request.checked_bytes()?;
        let (CreateRequest { task, .. }, answer) = self.db.creates().run(request, bytes).await?;
        if let Some(created_at) = answer {
            return Ok(Created::New(new_record(owner, id, task, created_at)));
        }
        let Some(Idempotency {
            key,
            request_digest,
        }) = idempotency
        else {
            return Ok(Created::LimitReached);
        };
        let existing = checked!(query_as!(
            TaskRow,
            "SELECT "
                + TASK_COLUMNS
                + " FROM tasks
             WHERE tenant = $1 AND principal = $2 AND idempotency_key = $3",
            &owner.tenant,
            &owner.principal,
            &key
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(match existing {
            Some(row) if row.request_digest.as_deref() == Some(request_digest.as_str()) => {
                Created::Existing(row.try_into()?)
            }
            Some(_) => Created::KeyConflict,
            // No conflict, so the limit refused it.
            None => Created::LimitReached,
        })
    }
}

/// The record of a task just inserted: all of it is what was asked for, but its time.
fn new_record(owner: &Owner, id: TaskId, task: NewTask, created_at: OffsetDateTime) -> TaskRecord {
    TaskRecord {
        owner: owner.clone(),
        id,
        tool: task.tool,
        arguments: task.arguments,
        trace_context: task.trace_context,
        client_capabilities: task.client_capabilities,
        status: TaskStatus::Working,
        status_message: task.status_message,
        created_at,
        updated_at: created_at,
        finished_at: None,
        ttl_ms: task.ttl_ms,
        poll_interval_ms: task.poll_interval_ms,
        retention_ms: task.retention_ms,
        result: None,
        error: None,
        input_requests: None,
        input_responses: task.input_responses,
        issued_keys: Vec::new(),
        checkpoint: None,
        lease_owner: None,
        lease_token: 0,
        lease_expires_at: None,
        attempt: 0,
        max_attempts: task.max_attempts,
        claimed_attempt: None,
        cancel_requested_at: None,
        version: 1,
        end_reason: None,
    }
}
