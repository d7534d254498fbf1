//! The console's store queries: the tasks list (filters, keyset pages, counts, scopes),
//! the inbox, the health figures, each task's history (and its deletion with the task),
//! and the plans of all of them at a loaded size (no sequential scan of `tasks`).

use std::time::Duration;

use mcp_tasks_store::testing::{Seed, SeedState};
use mcp_tasks_store::{
    COUNT_LIMIT, Finish, HistoryEvent, HistoryKind, ListCursor, Lookup, Owner, SCAN_LIMIT, Scope,
    Store, TaskFilter, TaskId, TaskSummary,
};
use mcp_tasks_wire::TaskStatus;
use serde_json::json;
use time::OffsetDateTime;

use super::{answers, confirm_schema, text_result, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, new_task};

const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];
const TOOLS: [&str; 3] = ["alpha", "beta", "gamma"];

/// One generated row: what the test expects the store to give back.
#[derive(Debug, Clone)]
struct Gen {
    tenant: String,
    principal: String,
    id: uuid::Uuid,
    tool: &'static str,
    status: &'static str,
    attempt: i32,
    created_at: OffsetDateTime,
}

/// `n` rows of mixed owners, tools, statuses and attempts, one second apart, inserted in
/// one statement (every CHECK constraint satisfied).
async fn load(db: &TestDb, n: usize, seed: usize) -> Vec<Gen> {
    let base = OffsetDateTime::now_utc() - time::Duration::hours(2);
    let owners = [
        ("acme", "alice"),
        ("acme", "bob"),
        ("acme", "alice"),
        ("evil", "alice"),
    ];
    let rows: Vec<Gen> = (0..n)
        .map(|i| {
            let k = i + seed;
            let (tenant, principal) = owners[k % owners.len()];
            Gen {
                tenant: tenant.into(),
                principal: principal.into(),
                id: uuid::Uuid::new_v4(),
                tool: TOOLS[(k / 2) % TOOLS.len()],
                status: STATUSES[(k * 7 / 3) % STATUSES.len()],
                attempt: i32::try_from((k / 4) % 4).unwrap_or(0),
                created_at: base + time::Duration::milliseconds(i64::try_from(i).unwrap_or(0) * 10),
            }
        })
        .collect();
    insert(&db.store, &rows).await;
    rows
}

async fn insert(store: &Store, rows: &[Gen]) {
    let seeds = rows.iter().map(|g| {
        let finished_at = g.created_at;
        let state = match g.status {
            "working" => SeedState::Queued {
                run_after: Some(OffsetDateTime::now_utc() + time::Duration::days(1)),
            },
            "input_required" => SeedState::InputRequired {
                requests: json!({ "k": {} }).as_object().cloned().unwrap_or_default(),
            },
            "completed" => SeedState::Completed {
                result: json!({ "content": [], "isError": false }),
                finished_at,
            },
            "failed" => SeedState::Failed {
                error: json!({ "code": -32603, "message": "x" }),
                finished_at,
            },
            _ => SeedState::Cancelled { finished_at },
        };
        Seed {
            id: TaskId(g.id),
            state,
            created_at: g.created_at,
            retention_ms: 60_000,
            max_attempts: 5,
            attempt: g.attempt,
            ..Seed::new(Owner::new(g.tenant.clone(), g.principal.clone()), g.tool)
        }
    });
    store.seed(seeds).await.expect("bulk insert");
}

/// Which generated rows a filter should keep.
type Keep = Box<dyn Fn(&Gen) -> bool>;

/// Every page of the list, following the cursors.
async fn all_pages(
    store: &Store,
    scope: &Scope,
    filter: &TaskFilter,
    limit: i64,
) -> Vec<TaskSummary> {
    let mut after: Option<ListCursor> = None;
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store
            .console()
            .console_tasks(scope, filter, after, limit)
            .await
            .expect("console_tasks");
        assert!(page.tasks.len() <= limit as usize);
        out.extend(page.tasks);
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
    panic!("the list never ended");
}

fn expected(rows: &[Gen], scope: &Scope, keep: impl Fn(&Gen) -> bool) -> Vec<uuid::Uuid> {
    let mut v: Vec<&Gen> = rows
        .iter()
        .filter(|g| g.tenant == scope.tenant)
        .filter(|g| scope.principal.as_ref().is_none_or(|p| *p == g.principal))
        .filter(|g| keep(g))
        .collect();
    v.sort_by_key(|g| std::cmp::Reverse((g.created_at, g.id)));
    v.into_iter().map(|g| g.id).collect()
}

fn ids(tasks: &[TaskSummary]) -> Vec<uuid::Uuid> {
    tasks.iter().map(|t| t.id.0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_filters_pages_newest_first_and_keeps_to_its_scope() {
    let db = TestDb::new().await;
    let rows = load(&db, 240, 0).await;
    let alice = Scope::owner(&Owner::new("acme", "alice"));
    let tenant = Scope::tenant("acme");
    let cut = rows[100].created_at;
    let cases: Vec<(TaskFilter, Keep)> = vec![
        (TaskFilter::default(), Box::new(|_| true)),
        (
            TaskFilter {
                status: Some(TaskStatus::Completed),
                ..Default::default()
            },
            Box::new(|g| g.status == "completed"),
        ),
        (
            TaskFilter {
                status: Some(TaskStatus::InputRequired),
                ..Default::default()
            },
            Box::new(|g| g.status == "input_required"),
        ),
        (
            TaskFilter {
                status: Some(TaskStatus::Working),
                tool: Some("beta".into()),
                ..Default::default()
            },
            Box::new(|g| g.status == "working" && g.tool == "beta"),
        ),
        (
            TaskFilter {
                tool: Some("gamma".into()),
                min_attempts: Some(2),
                ..Default::default()
            },
            Box::new(|g| g.tool == "gamma" && g.attempt >= 2),
        ),
        (
            TaskFilter {
                created_before: Some(cut),
                ..Default::default()
            },
            Box::new(move |g| g.created_at < cut),
        ),
        (
            TaskFilter {
                created_after: Some(cut),
                status: Some(TaskStatus::Failed),
                ..Default::default()
            },
            Box::new(move |g| g.created_at >= cut && g.status == "failed"),
        ),
    ];
    for scope in [&alice, &tenant, &Scope::owner(&Owner::new("acme", "bob"))] {
        for (filter, keep) in &cases {
            let want = expected(&rows, scope, keep);
            assert!(
                !want.is_empty() || filter.status == Some(TaskStatus::Failed),
                "{filter:?}"
            );
            let got = all_pages(&db.store, scope, filter, 7).await;
            assert_eq!(ids(&got), want, "scope {scope:?} filter {filter:?}");
            assert!(
                got.iter().all(|t| t.owner.tenant == "acme"),
                "another tenant's task"
            );
            if scope.principal.is_some() {
                assert!(
                    got.iter()
                        .all(|t| Some(&t.owner.principal) == scope.principal.as_ref())
                );
            }
        }
        // Counts by status, exact at this size.
        let counts = db
            .store
            .console()
            .console_status_counts(scope)
            .await
            .expect("counts");
        assert_eq!(counts.len(), 5);
        for c in counts {
            let n = expected(&rows, scope, |g| g.status == c.status.as_str()).len();
            assert_eq!(c.count, n as u64, "{scope:?} {:?}", c.status);
            assert!(!c.at_least);
        }
    }
    // The admin of acme sees bob's and alice's, never evil's alice.
    let whole = all_pages(&db.store, &tenant, &TaskFilter::default(), 50).await;
    assert!(whole.iter().any(|t| t.owner.principal == "bob"));
    assert!(whole.iter().any(|t| t.owner.principal == "alice"));
    let evil = rows.iter().filter(|g| g.tenant == "evil").count();
    assert_eq!(whole.len(), rows.len() - evil);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rare_filter_costs_bounded_pages_and_counts_cap_past_their_limit() {
    let db = TestDb::new().await;
    // One failed task, older than more than a page's scan of completed ones.
    let n = usize::try_from(COUNT_LIMIT).unwrap_or(0) + 500;
    let base = OffsetDateTime::now_utc() - time::Duration::hours(1);
    let rows: Vec<Gen> = (0..n)
        .map(|i| Gen {
            tenant: "acme".into(),
            principal: "alice".into(),
            id: uuid::Uuid::new_v4(),
            tool: "alpha",
            status: if i == 0 { "failed" } else { "completed" },
            attempt: 1,
            created_at: base + time::Duration::milliseconds(i64::try_from(i).unwrap_or(0)),
        })
        .collect();
    insert(&db.store, &rows).await;
    let scope = Scope::owner(&Owner::new("acme", "alice"));
    let filter = TaskFilter {
        status: Some(TaskStatus::Failed),
        ..Default::default()
    };
    let first = db
        .store
        .console()
        .console_tasks(&scope, &filter, None, 20)
        .await
        .expect("page");
    assert!(first.tasks.is_empty());
    assert!(first.scan_capped, "the page stops at its scan limit");
    let edge = first.next.expect("a cursor to scan on from");
    assert_eq!(
        edge.id.0,
        rows[n - usize::try_from(SCAN_LIMIT).unwrap_or(0)].id,
        "the cursor is the last row the page visited"
    );
    let all = all_pages(&db.store, &scope, &filter, 20).await;
    assert_eq!(ids(&all), vec![rows[0].id]);

    let counts = db
        .store
        .console()
        .console_status_counts(&scope)
        .await
        .expect("counts");
    let completed = counts
        .iter()
        .find(|c| c.status == TaskStatus::Completed)
        .expect("completed");
    assert!(
        completed.at_least,
        "past the limit the count is a lower bound"
    );
    assert_eq!(completed.count, COUNT_LIMIT as u64);
    let working = counts
        .iter()
        .find(|c| c.status == TaskStatus::Working)
        .expect("working");
    assert_eq!(
        (working.count, working.at_least),
        (0, false),
        "live counts stay exact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_holds_the_principals_waiting_tasks_oldest_first() {
    let db = TestDb::new().await;
    let rows = load(&db, 200, 3).await;
    let alice = Owner::new("acme", "alice");
    let inbox = db
        .store
        .console()
        .console_inbox(&alice, 500)
        .await
        .expect("inbox");
    let mut want: Vec<&Gen> = rows
        .iter()
        .filter(|g| g.tenant == "acme" && g.principal == "alice" && g.status == "input_required")
        .collect();
    want.sort_by_key(|g| (g.created_at, g.id));
    assert!(want.len() > 3);
    assert_eq!(ids(&inbox), want.iter().map(|g| g.id).collect::<Vec<_>>());
    assert!(inbox.iter().all(|t| t.status == TaskStatus::InputRequired));
}

fn kinds(events: &[HistoryEvent]) -> Vec<HistoryKind> {
    events.iter().map(|e| e.kind).collect()
}

async fn history(store: &Store, owner: &Owner, id: TaskId) -> Vec<HistoryEvent> {
    match store
        .console()
        .task_history(owner, id)
        .await
        .expect("history")
    {
        Lookup::Found(events) => events,
        other => panic!("no history for {id}: {other:?}"),
    }
}

async fn event_rows(db: &TestDb, id: TaskId) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_events WHERE id = $1")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .expect("count events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_is_in_the_history_and_goes_with_the_task() {
    let db = TestDb::new().await;
    let store = &db.store;
    let alice = Owner::new("acme", "alice");
    let task = create(store, &alice, new_task("slow_compute", json!({}))).await;
    let id = task.id;
    assert_eq!(
        kinds(&history(store, &alice, id).await),
        [HistoryKind::Created]
    );

    // Claimed by w1, which asks for input; answered; claimed by w2, which is lost;
    // reclaimed by w3, which completes it.
    let c1 = claim_id(store, "w1", 60_000, id).await;
    let requests = json!({ "ok": { "method": "elicitation/create", "params": { "message": "?", "requestedSchema": confirm_schema() } } });
    let requests = requests.as_object().expect("object").clone();
    store
        .worker()
        .request_input(&c1.lease, &requests, None, None)
        .await
        .expect("request input");
    store
        .replica()
        .update_inputs(
            &alice,
            id,
            &answers(&[(
                "ok",
                json!({ "action": "accept", "content": { "confirm": true } }),
            )]),
            validator,
        )
        .await
        .expect("answer");
    // A short lease that runs out, as a lost worker's does.
    let _lost = claim_id(store, "w2", 50, id).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let c3 = claim_id(store, "w3", 60_000, id).await;
    assert!(c3.reclaimed);
    assert!(
        store
            .worker()
            .finish(&c3.lease, &Finish::Completed(text_result("done")), None)
            .await
            .expect("finish")
    );

    let events = history(store, &alice, id).await;
    assert_eq!(
        kinds(&events),
        [
            HistoryKind::Created,
            HistoryKind::Claimed,
            HistoryKind::InputRequested,
            HistoryKind::Resumed,
            HistoryKind::Claimed,
            HistoryKind::LeaseLapsed,
            HistoryKind::Claimed,
            HistoryKind::Finished,
        ],
        "{events:#?}"
    );
    let workers: Vec<Option<&str>> = events.iter().map(|e| e.worker.as_deref()).collect();
    assert_eq!(workers[1], Some("w1"));
    assert_eq!(workers[2], Some("w1"));
    assert_eq!(workers[4], Some("w2"));
    assert_eq!(workers[5], Some("w2"));
    assert_eq!(workers[6], Some("w3"));
    assert_eq!(workers[7], Some("w3"));
    assert_eq!(events[2].detail.as_deref(), Some("ok"));
    assert_eq!(events[7].status, Some(TaskStatus::Completed));
    assert_eq!(
        events[6].attempt,
        Some(2),
        "the reclaim is the second attempt after input"
    );
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));

    // Another principal, another tenant: the same answer as an unknown id.
    for stranger in [Owner::new("acme", "bob"), Owner::new("evil", "alice")] {
        assert_eq!(
            store
                .console()
                .task_history(&stranger, id)
                .await
                .expect("history"),
            Lookup::NotFound
        );
    }
    assert_eq!(
        store
            .console()
            .task_history(&alice, TaskId::random())
            .await
            .expect("history"),
        Lookup::NotFound
    );

    // Cancelled before anyone ran it; expired while queued.
    let cancelled = create(store, &alice, new_task("slow_compute", json!({})))
        .await
        .id;
    store
        .replica()
        .cancel_task(&alice, cancelled)
        .await
        .expect("cancel");
    let events = history(store, &alice, cancelled).await;
    assert_eq!(
        kinds(&events),
        [
            HistoryKind::Created,
            HistoryKind::CancelRequested,
            HistoryKind::Finished
        ]
    );
    assert_eq!(events[2].status, Some(TaskStatus::Cancelled));
    let expiring = create(
        store,
        &alice,
        mcp_tasks_store::NewTask {
            ttl_ms: Some(1),
            ..new_task("slow_compute", json!({}))
        },
    )
    .await
    .id;
    tokio::time::sleep(Duration::from_millis(20)).await;
    while store.worker().expire_overdue(100).await.expect("expire") > 0 {}
    let events = history(store, &alice, expiring).await;
    let last = events.last().expect("events");
    assert_eq!(
        (last.kind, last.status),
        (HistoryKind::Finished, Some(TaskStatus::Failed))
    );
    assert_eq!(
        last.end_reason,
        Some(mcp_tasks_wire::service_messages::EndReason::Expired)
    );

    // Deletion takes the history with the task.
    assert!(event_rows(&db, id).await >= 4);
    sqlx::query("UPDATE tasks SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id.0)
        .execute(&db.pool)
        .await
        .expect("age the task");
    assert_eq!(store.worker().purge_expired(100).await.expect("purge"), 1);
    assert_eq!(event_rows(&db, id).await, 0);
    assert_eq!(
        store
            .console()
            .task_history(&alice, id)
            .await
            .expect("history"),
        Lookup::Expired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_figures_move_with_claims_finishes_and_lapses() {
    let db = TestDb::new().await;
    let store = &db.store;
    let alice = Owner::new("acme", "alice");
    let scope = Scope::tenant("acme");
    let tools = ["slow_compute".to_owned()];
    let health = || async {
        store
            .console()
            .console_health(&scope, Duration::from_secs(3600), 12)
            .await
            .expect("health")
    };
    for _ in 0..3 {
        create(store, &alice, new_task("slow_compute", json!({}))).await;
    }
    // Another tenant's queue and workers are not this tenant's figures.
    create(
        store,
        &Owner::new("evil", "eve"),
        new_task("other_tool", json!({})),
    )
    .await;
    store
        .worker()
        .claim_tools("w-evil", 1, 60_000, &["other_tool".to_owned()])
        .await
        .expect("claim");
    let h = health().await;
    assert_eq!(h.queue_depth, 3);
    assert!(h.oldest_claimable.is_some());
    assert!(h.workers.is_empty(), "{:?}", h.workers);
    assert!(h.percentiles.is_empty() && h.lapses.total() == 0);

    let first = store
        .worker()
        .claim_tools("w1", 1, 60_000, &tools)
        .await
        .expect("claim");
    let first = first.into_iter().next().expect("claimed one");
    let h = health().await;
    assert_eq!(h.queue_depth, 2);
    assert_eq!(h.workers.len(), 1);
    assert_eq!(h.workers[0].worker, "w1");
    assert_eq!(
        h.workers[0]
            .running
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        vec![first.lease.id]
    );

    // w2 is lost (its short lease runs out); w3 reclaims its task and takes the last one.
    let lost = store
        .worker()
        .claim_tools("w2", 1, 50, &tools)
        .await
        .expect("claim");
    assert_eq!(lost.len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    // The maintenance leader puts the lapsed lease back in the queue.
    assert_eq!(
        store.worker().requeue_lapsed(100).await.expect("requeue"),
        1
    );
    let rest = store
        .worker()
        .claim_tools("w3", 10, 60_000, &tools)
        .await
        .expect("claim");
    assert_eq!(rest.len(), 2);
    assert_eq!(rest.iter().filter(|c| c.reclaimed).count(), 1);
    for c in std::iter::once(&first).chain(rest.iter()) {
        assert!(
            store
                .worker()
                .finish(&c.lease, &Finish::Completed(text_result("ok")), None)
                .await
                .expect("finish")
        );
    }
    let h = health().await;
    assert_eq!(h.queue_depth, 0);
    assert_eq!(h.oldest_claimable, None);
    assert_eq!(h.lapses.reclaimed, 1, "{:?}", h.lapses);
    assert!(h.workers.is_empty());
    let samples: u64 = h
        .percentiles
        .iter()
        .filter(|p| p.tool == "slow_compute")
        .map(|p| p.samples)
        .sum();
    assert_eq!(samples, 3);
    assert!(h.percentiles.iter().all(|p| p.tool == "slow_compute"));
    assert!(
        h.percentiles
            .iter()
            .all(|p| p.pickup_ms[0] >= 0.0 && p.run_ms[2] >= p.run_ms[0])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_queries_read_indexes_not_the_table_at_a_loaded_size() {
    let db = TestDb::new().await;
    // Many principals, as a loaded service has: one principal's share is small.
    let mut rows = load(&db, 20_000, 0).await;
    for (i, g) in rows.iter_mut().enumerate() {
        g.principal = format!("p{}", i % 40);
    }
    sqlx::query("DELETE FROM tasks")
        .execute(&db.pool)
        .await
        .expect("clear");
    insert(&db.store, &rows).await;
    sqlx::query(
        "INSERT INTO task_events (tenant, id, at, kind, worker, attempt, detail)
                 SELECT tenant, id, created_at, 'lease_lapsed', 'gone', 1, 'reclaimed'
                 FROM tasks",
    )
    .execute(&db.pool)
    .await
    .expect("events");
    for sql in ["VACUUM ANALYZE tasks", "VACUUM ANALYZE task_events"] {
        sqlx::query(sql).execute(&db.pool).await.expect("analyze");
    }
    let seqscan: String = sqlx::query_scalar("SHOW enable_seqscan")
        .fetch_one(&db.pool)
        .await
        .expect("show");
    assert_eq!(seqscan, "on", "the planner may choose a sequential scan");
    let tool = rows[0].tool;
    for scope in [
        Scope::tenant("acme"),
        Scope::owner(&Owner::new("acme", "alice")),
    ] {
        let plans = db
            .store
            .console()
            .console_plans(&scope, tool)
            .await
            .expect("plans");
        assert!(plans.len() >= 11);
        for plan in &plans {
            assert!(
                !plan.scans_table(),
                "{} scans the table:\n{}",
                plan.name,
                plan.plan
            );
            assert!(
                !plan.indexes().is_empty(),
                "{} reads no index:\n{}",
                plan.name,
                plan.plan
            );
        }
    }
}
