//! Group commit against bad requests: one request that cannot be written fails alone,
//! not the batch it shares with other tenants' creates or a worker's other finishes;
//! what PostgreSQL cannot store (U+0000, an oversized result) is refused with a clear
//! reason before it is sent; a create whose caller has gone is not inserted.

use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_store::{
    Created, Finish, Lease, MAX_RESULT_BYTES, NewTask, Owner, PoolConfig, Store, TaskId,
};
use mcp_tasks_wire::{ErrorObject, TaskStatus};
use serde_json::{Value, json};

use super::{text_result, until_lock_waiters};
use crate::harness::fixtures::{create, found, new_task};
use crate::harness::http::Request;
use crate::harness::{TestApp, TestDb, spec};

/// A store of its own (another replica or worker) whose statements give up on a locked
/// row after a second, so a test of lock timeouts does not take five.
async fn impatient_store(db: &TestDb) -> Store {
    Store::connect(
        &db.url,
        &PoolConfig {
            max_connections: 8,
            lock_timeout: Duration::from_secs(1),
            ..PoolConfig::default()
        },
    )
    .await
    .expect("connect")
}

fn tenant(i: usize) -> Owner {
    Owner::new(format!("tenant-{i}"), "someone")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_create_fails_alone_and_its_batch_commits() {
    let db = TestDb::new().await;
    let store = &db.store;
    let replica = store.replica();

    // A transaction holding the table: the first create's batch waits behind it, and
    // everything sent meanwhile goes into the next batch, together.
    let mut gate = db.pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE tasks IN SHARE MODE")
        .execute(&mut *gate)
        .await
        .expect("lock table");
    let gate_owner = tenant(999);
    let gate_create = replica.create(&gate_owner, new_task("echo", json!({})), None);
    tokio::pin!(gate_create);
    assert!(futures::poll!(&mut gate_create).is_pending());
    until_lock_waiters(&db.pool, 1).await;

    // A client's `_meta` capabilities with a NUL escape in a key (copied into jsonb).
    let nul = NewTask {
        client_capabilities: Some(json!({ "elicitation": { "form\u{0}": {} } })),
        ..new_task("echo", json!({ "poison": "nul" }))
    };
    // A create that passes every check and still fails in the statement (its expiry
    // is out of range), as an unforeseen bad row would.
    let overflow = NewTask {
        ttl_ms: Some(i64::MAX),
        ..new_task("echo", json!({ "poison": "overflow" }))
    };
    let owners: Vec<Owner> = (0..102).map(tenant).collect();
    let good = |i: usize| replica.create(&owners[i], new_task("echo", json!({ "i": i })), None);
    let rest = async {
        tokio::join!(
            join_all((0..25).map(good)),
            replica.create(&owners[100], nul, None),
            replica.create(&owners[101], overflow, None),
            join_all((25..50).map(good)),
        )
    };
    tokio::pin!(rest);
    // Queued (a create is queued before it first waits), behind the gate's batch.
    assert!(futures::poll!(&mut rest).is_pending());
    gate.commit().await.expect("commit");
    let (gate_created, (goods, nul, overflow, more)) = tokio::join!(gate_create, rest);

    assert!(matches!(gate_created, Ok(Created::New(_))));
    let goods: Vec<_> = goods.into_iter().chain(more).collect();
    for (i, created) in goods.into_iter().enumerate() {
        match created {
            Ok(Created::New(task)) => {
                assert_eq!(found(store, &tenant(i), task.id).await.id, task.id);
            }
            other => panic!("good create {i} did not land: {other:?}"),
        }
    }
    let refused = nul.expect_err("a NUL in the capabilities is refused");
    assert!(
        refused
            .refusal()
            .is_some_and(|why| why.contains("client capabilities") && why.contains("U+0000")),
        "{refused}"
    );
    let failed = overflow.expect_err("the bad row fails");
    assert!(failed.refusal().is_none(), "{failed}");
    assert_eq!(db.count_tasks("true").await, 51);
}

/// Creates one task per argument and claims them all with `store`; the leases in order.
async fn claimed(db: &TestDb, store: &Store, n: usize) -> Vec<Lease> {
    let owner = super::alice();
    let mut ids = Vec::new();
    for i in 0..n {
        let id = create(&db.store, &owner, new_task("echo", json!({ "i": i })))
            .await
            .id;
        ids.push(id);
    }
    let claimed = store
        .worker()
        .claim("W", n as i64, 600_000)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), n);
    ids.iter()
        .map(|id| {
            claimed
                .iter()
                .find(|c| c.lease.id == *id)
                .expect("claimed")
                .lease
                .clone()
        })
        .collect()
}

async fn lock_row(tx: &mut sqlx::PgConnection, id: TaskId) {
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id.0)
        .execute(tx)
        .await
        .expect("lock row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_finish_fails_alone_and_its_batch_commits() {
    let db = TestDb::new().await;
    let store = impatient_store(&db).await;
    let worker = store.worker();
    let owner = super::alice();
    // The gate, 50 good finishes, one whose row another transaction holds (it can only
    // time out), one whose result has a NUL, and one whose result is too large.
    let leases = claimed(&db, &store, 54).await;
    let (gate, goods, rest) = (&leases[0], &leases[1..51], &leases[51..]);
    let (locked, nul, big) = (&rest[0], &rest[1], &rest[2]);

    let mut holder = db.pool.begin().await.expect("begin");
    lock_row(&mut holder, locked.id).await;
    let mut gate_tx = db.pool.begin().await.expect("begin");
    lock_row(&mut gate_tx, gate.id).await;

    let ok = Finish::Completed(text_result("done"));
    let with_nul = Finish::Completed(text_result("a\u{0}b"));
    let too_big = Finish::Completed(text_result(&"x".repeat(MAX_RESULT_BYTES)));
    let first = worker.finish(gate, &ok, Some("Completed"));
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending());
    until_lock_waiters(&db.pool, 1).await;
    let rest = async {
        tokio::join!(
            join_all(goods[..25].iter().map(|l| worker.finish(l, &ok, None))),
            worker.finish(locked, &ok, None),
            worker.finish(nul, &with_nul, None),
            worker.finish(big, &too_big, None),
            join_all(goods[25..].iter().map(|l| worker.finish(l, &ok, None))),
        )
    };
    tokio::pin!(rest);
    assert!(futures::poll!(&mut rest).is_pending());
    gate_tx.commit().await.expect("commit");
    let (_, (a, poison, n, b, c)) = tokio::join!(first, rest);

    for (lease, landed) in goods.iter().zip(a.into_iter().chain(c)) {
        assert!(
            matches!(landed, Ok(true)),
            "a good finish did not land: {landed:?}"
        );
        assert_eq!(
            found(&db.store, &owner, lease.id).await.status,
            TaskStatus::Completed
        );
    }
    assert!(
        poison.is_err(),
        "the finish of the locked row times out: {poison:?}"
    );
    holder.rollback().await.expect("rollback");

    // What a tool returned that cannot be stored fails its task, saying why.
    assert!(matches!(n, Ok(true)), "{n:?}");
    let t = found(&db.store, &owner, nul.id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    let error: ErrorObject = t.error.expect("an error");
    assert!(error.message.contains("U+0000"), "{error:?}");
    assert!(matches!(b, Ok(true)), "{b:?}");
    let t = found(&db.store, &owner, big.id).await;
    assert_eq!(t.status, TaskStatus::Failed);
    let error = t.error.expect("an error");
    assert_eq!(
        error.data.as_ref().map(|d| d["limit"].clone()),
        Some(json!("result_bytes")),
        "{error:?}"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_is_refused_wherever_it_would_be_stored() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = super::alice();
    let nul = json!({ "k": "a\u{0}b" });
    let refused = |what: &str, r: Result<Created, mcp_tasks_store::StoreError>| {
        let e = r.expect_err(what);
        assert!(
            e.refusal().is_some_and(|why| why.contains("U+0000")),
            "{what}: {e}"
        );
    };
    refused(
        "arguments",
        store
            .replica()
            .create(&owner, new_task("echo", nul.clone()), None)
            .await,
    );
    let mut answers = serde_json::Map::new();
    answers.insert("k\u{0}".into(), json!(true));
    refused(
        "input responses",
        store
            .replica()
            .create(
                &owner,
                NewTask {
                    input_responses: answers,
                    ..new_task("echo", json!({}))
                },
                None,
            )
            .await,
    );
    refused(
        "status message",
        store
            .replica()
            .create(
                &owner,
                NewTask {
                    status_message: Some("a\u{0}".into()),
                    ..new_task("echo", json!({}))
                },
                None,
            )
            .await,
    );
    assert_eq!(db.count_tasks("true").await, 0);

    // A worker's writes: checkpoints, input requests and status messages.
    let task = create(store, &owner, new_task("echo", json!({}))).await;
    let claim = store.worker().claim("W", 1, 60_000).await.expect("claim");
    let lease = &claim[0].lease;
    assert_eq!(lease.id, task.id);
    let e = store
        .worker()
        .save_checkpoint(lease, &nul)
        .await
        .expect_err("checkpoint");
    assert!(e.refusal().is_some(), "{e}");
    let requests: serde_json::Map<String, Value> =
        [("ask".to_owned(), nul.clone())].into_iter().collect();
    let e = store
        .worker()
        .request_input(lease, &requests, None, None)
        .await
        .expect_err("input request");
    assert!(e.refusal().is_some(), "{e}");
    let e = store
        .worker()
        .set_status_message(lease, "a\u{0}")
        .await
        .expect_err("status");
    assert!(e.refusal().is_some(), "{e}");
    // None of it reached the row, and the lease still works.
    assert!(store.worker().holds(lease).await.expect("holds"));
    assert_eq!(found(store, &owner, task.id).await.checkpoint, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_caller_has_gone_is_not_inserted() {
    let db = TestDb::new().await;
    let store = &db.store;
    let replica = store.replica();
    let owner = super::alice();

    let mut gate = db.pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE tasks IN SHARE MODE")
        .execute(&mut *gate)
        .await
        .expect("lock table");
    let first = replica.create(&owner, new_task("echo", json!({ "who": "first" })), None);
    let gone = async {
        until_lock_waiters(&db.pool, 1).await;
        // The caller gives up (its client disconnected) while its create waits for the
        // next batch.
        let abandoned = tokio::time::timeout(
            Duration::from_millis(200),
            replica.create(&owner, new_task("echo", json!({ "who": "gone" })), None),
        )
        .await;
        assert!(abandoned.is_err(), "the create finished behind the lock");
        gate.commit().await.expect("commit");
    };
    let (first, ()) = tokio::join!(first, gone);
    assert!(matches!(first, Ok(Created::New(_))));
    // A later create, which runs after the batch the abandoned one was queued for.
    let later = create(store, &owner, new_task("echo", json!({ "who": "later" }))).await;
    assert_eq!(found(store, &owner, later.id).await.id, later.id);
    assert_eq!(db.count_tasks("arguments->>'who' = 'gone'").await, 0);
    assert_eq!(db.count_tasks("true").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_nul_in_its_capabilities_is_told_so() {
    let app = TestApp::start(1).await;
    let caps = json!({
        "elicitation": { "form\u{0}": {} },
        "extensions": { spec::TASKS: {} },
    });
    let answer = Request::rpc_as(
        json!(1),
        "tools/call",
        json!({ "name": "slow_compute", "arguments": { "seconds": 0 } }),
        caps,
    )
    .principal("alice")
    .send_to_app(&app)
    .await;
    let error = answer.error("NUL in the capabilities", 200, -32602, Some(&json!(1)));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("client capabilities"), "{error}");
    assert_eq!(app.db.count_tasks("true").await, 0);
    app.stop().await;
}
