//! Claims that do not grow with the backlog or the fleet (issue 26, item 6): a worker's
//! claim reads only its tools' queues, however long another tool's backlog ahead of them;
//! claims running side by side still come back full; claims never look at leases, and a
//! lapsed one waits for the maintenance leader to put it back in the queue, where it
//! keeps its place; one worker at a time leads.

use mcp_tasks_store::Owner;
use mcp_tasks_store::testing::{FAIR_CLAIM, FAIR_CLAIM_BY_TOOL, Seed};
use serde_json::{Value, json};

use crate::harness::TestDb;
use crate::harness::fixtures::{create, force_lapse, new_task};

/// Queues `n` tasks of `tool` for `owner`, in one COPY (in this order in the queue).
fn seeds(owner: &Owner, tool: &str, n: usize) -> Vec<Seed> {
    (0..n).map(|_| Seed::new(owner.clone(), tool)).collect()
}

/// The claim `statement` of 16 tasks of `tools`, run under its generic plan (as a
/// worker's prepared statement runs after its fifth use) and rolled back: the buffers it
/// read to find and lock its rows, and the tools of the rows it claimed.
async fn claim_cost(db: &TestDb, statement: &str, tools: &[&str]) -> (u64, Vec<String>) {
    let mut tx = db.pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan")
        .execute(&mut *tx)
        .await
        .expect("generic plans");
    let prepare = format!("PREPARE claim (text, int8, int8, text, text, text[]) AS {statement}");
    sqlx::query(sqlx::AssertSqlSafe(prepare))
        .execute(&mut *tx)
        .await
        .expect("prepare the claim");
    let tools = tools
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(",");
    let explain = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim('w', 16, 60000, 'Running', 'Again', '{{{tools}}}')"
    );
    let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_one(&mut *tx)
        .await
        .expect("explain the claim");
    let claimed: Vec<String> =
        sqlx::query_scalar("SELECT tool FROM tasks WHERE lease_owner = 'w' ORDER BY queue_key")
            .fetch_all(&mut *tx)
            .await
            .expect("the claimed rows");
    // A prepared statement outlives the transaction, on a connection the pool keeps.
    sqlx::query("DEALLOCATE claim")
        .execute(&mut *tx)
        .await
        .expect("deallocate");
    tx.rollback().await.expect("rollback");
    // What finding and locking the rows cost: the `candidates` subplan's buffers (the
    // update that follows writes the same rows, whichever way they were found).
    let candidates = plan[0]["Plan"]["Plans"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["Subplan Name"] == "CTE candidates")
        .expect("the candidates subplan");
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .map(|k| candidates[*k].as_u64().expect("buffer counts"))
        .sum();
    (buffers, claimed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_by_tool_reads_only_that_tools_queue_behind_another_tools_backlog() {
    let db = TestDb::new().await;
    let owner = Owner::new("t", "p");
    let mut queue = seeds(&owner, "big", 20_000);
    queue.extend(seeds(&owner, "small", 10));
    queue.extend(seeds(&owner, "other", 10));
    queue.extend(seeds(&owner, "small", 10));
    db.store.seed(queue).await.expect("seed");
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .expect("analyze");

    let (by_tool, claimed) = claim_cost(&db, FAIR_CLAIM_BY_TOOL, &["small", "other"]).await;
    // The first 16 of those tools, in queue order: 10 small, then 6 other.
    let mut expected = vec!["small".to_owned(); 10];
    expected.extend(vec!["other".to_owned(); 6]);
    assert_eq!(claimed, expected);
    // The walk of the whole queue in claim order, for comparison: past all of `big`.
    let (walk, claimed) = claim_cost(&db, FAIR_CLAIM, &["small", "other"]).await;
    assert_eq!(claimed, expected);
    assert!(
        walk > 400,
        "the walk read {walk} buffers: the backlog ahead is not in its way"
    );
    assert!(
        by_tool < 100,
        "the claim by tool read {by_tool} buffers for 16 rows (the walk past 20,000 rows of another tool: {walk})"
    );
    // A worker of one tool reads that tool's queue only, without merging heads.
    let (one_tool, claimed) = claim_cost(&db, FAIR_CLAIM_BY_TOOL, &["small"]).await;
    assert_eq!(claimed, vec!["small".to_owned(); 16]);
    assert!(one_tool < 100, "one tool: {one_tool} buffers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_side_by_side_come_back_full_while_their_tools_have_work() {
    let db = TestDb::new().await;
    let owner = Owner::new("t", "p");
    let mut queue = seeds(&owner, "big", 2_000);
    for _ in 0..400 {
        queue.extend(seeds(&owner, "a", 2));
        queue.extend(seeds(&owner, "b", 1));
    }
    db.store.seed(queue).await.expect("seed");
    let tools = vec!["a".to_owned(), "b".to_owned()];
    // 8 claimers, 6 rounds of 16 each: 768 of the 1,200 queued, every claim full.
    let rounds = (0..8).map(|i| {
        let (worker, tools) = (db.store.worker(), tools.clone());
        async move {
            let mut got = Vec::new();
            for _ in 0..6 {
                let claimed = worker
                    .claim_tools(&format!("w{i}"), 16, 60_000, &tools)
                    .await
                    .expect("claim");
                got.push(claimed.len());
                assert!(claimed.iter().all(|c| c.task.tool != "big"));
            }
            got
        }
    });
    let got = futures::future::join_all(rounds).await;
    assert!(
        got.iter().flatten().all(|n| *n == 16),
        "a claim came back short while work was queued: {got:?}"
    );
    let claimed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE lease_owner IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .expect("count");
    assert_eq!(claimed, 8 * 6 * 16, "no task claimed twice");
}

#[tokio::test]
async fn a_lapsed_lease_waits_for_the_leader_and_keeps_its_place() {
    let db = TestDb::new().await;
    let (store, owner) = (&db.store, Owner::new("t", "p"));
    let first = create(store, &owner, new_task("echo", json!({ "n": 1 }))).await;
    let worker = store.worker();
    let lost = worker.claim("lost", 1, 60_000).await.expect("claim");
    assert_eq!(lost[0].lease.id, first.id);
    let second = create(store, &owner, new_task("echo", json!({ "n": 2 }))).await;
    force_lapse(&db.pool, first.id).await;

    // Claims read the queue only: the lapsed lease is not theirs to take.
    let claimed = worker.claim("w", 10, 60_000).await.expect("claim");
    assert_eq!(
        claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(),
        vec![second.id]
    );
    let third = create(store, &owner, new_task("echo", json!({ "n": 3 }))).await;
    assert_eq!(worker.requeue_lapsed(100).await.expect("requeue"), 1);
    assert_eq!(worker.requeue_lapsed(100).await.expect("requeue"), 0);
    // The old lease is gone: its heartbeat does not find it.
    let beat = worker
        .heartbeat(&[lost[0].lease.clone()], 60_000)
        .await
        .expect("heartbeat");
    assert!(beat.is_empty(), "{beat:?}");
    // Back in the queue at its place, ahead of the task created after it; a reclaim.
    let again = worker.claim("w", 1, 60_000).await.expect("claim");
    assert_eq!(again[0].lease.id, first.id);
    assert!(again[0].reclaimed);
    assert_eq!(again[0].task.attempt, 2);
    let last = worker.claim("w", 1, 60_000).await.expect("claim");
    assert_eq!(last[0].lease.id, third.id);
    assert!(!last[0].reclaimed);
    // The history says what happened.
    let detail: Option<String> = sqlx::query_scalar(
        "SELECT detail FROM task_events WHERE id = $1 AND kind = 'lease_lapsed'",
    )
    .bind(first.id.0)
    .fetch_one(&db.pool)
    .await
    .expect("the lapse in the history");
    assert_eq!(detail.as_deref(), Some("requeued"));
}

#[tokio::test]
async fn one_worker_leads_until_its_term_runs_out_or_it_resigns() {
    let db = TestDb::new().await;
    let worker = db.store.worker();
    assert!(worker.lead("a", 60_000).await.expect("lead"));
    assert!(!worker.lead("b", 60_000).await.expect("lead"));
    assert!(worker.lead("a", 60_000).await.expect("renew"));
    assert_eq!(worker.leader().await.expect("leader").as_deref(), Some("a"));

    worker.resign("b").await.expect("resign");
    assert!(
        !worker.lead("b", 60_000).await.expect("lead"),
        "b never led"
    );
    worker.resign("a").await.expect("resign");
    assert!(worker.lead("b", 60_000).await.expect("lead"));

    sqlx::query("UPDATE maintenance_leader SET until = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("end the term");
    assert_eq!(worker.leader().await.expect("leader"), None);
    assert!(worker.lead("a", 60_000).await.expect("take over"));
    assert!(!worker.lead("b", 60_000).await.expect("lead"));
}
