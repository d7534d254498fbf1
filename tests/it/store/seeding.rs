//! Seeding (the store's `testing` feature, what the benchmarks and the loaded tests use):
//! every state goes in whole, reads back as the service's own paths would have left it,
//! and behaves so: a queued task is claimed, a lapsed lease with no attempts left rescued,
//! an answered input request resumed, a finished task past its TTL purged.

use mcp_tasks_store::testing::{Seed, SeedClaim, SeedState};
use mcp_tasks_store::{HistoryKind, Lookup, Owner, TaskId};
use mcp_tasks_wire::TaskStatus;
use serde_json::json;
use time::OffsetDateTime;

use super::{alice, answers, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::found;

fn seed(state: SeedState) -> Seed {
    Seed {
        state,
        ..Seed::new(alice(), "echo")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_tasks_read_and_behave_as_the_service_leaves_them() {
    let db = TestDb::new().await;
    let now = OffsetDateTime::now_utc();
    let minute = time::Duration::minutes(1);
    let requests = json!({ "k\"ey": { "method": "elicitation/create", "params": {} } });
    let result = json!({ "content": [{ "type": "text", "text": "a \"quoted\", line\nbreak" }] });
    let seeds = vec![
        seed(SeedState::Queued {
            run_after: Some(now - minute),
        }),
        Seed {
            attempt: 3,
            claim: Some(SeedClaim {
                at: now - minute * 2,
                worker: "gone".into(),
                pickup_ms: 42,
            }),
            ..seed(SeedState::Leased {
                worker: "gone".into(),
                token: 7,
                expires_at: now - minute,
            })
        },
        seed(SeedState::InputRequired {
            requests: requests.as_object().cloned().unwrap_or_default(),
        }),
        Seed {
            status_message: Some("Done, \"really\"".into()),
            // Created two hours ago with a TTL of one: due for deletion.
            created_at: now - minute * 120,
            ttl_ms: Some(3_600_000),
            ..seed(SeedState::Completed {
                result: result.clone(),
                finished_at: now - minute * 90,
            })
        },
        seed(SeedState::Failed {
            error: json!({ "code": -32603, "message": "x" }),
            finished_at: now,
        }),
        Seed {
            owner: Owner::new("other", "tenant"),
            ..seed(SeedState::Cancelled { finished_at: now })
        },
    ];
    let ids: Vec<TaskId> = seeds.iter().map(|s| s.id).collect();
    let owners: Vec<Owner> = seeds.iter().map(|s| s.owner.clone()).collect();
    assert_eq!(db.store.seed(seeds).await.expect("seed"), 6);

    let mut read = Vec::new();
    for (owner, id) in owners.iter().zip(&ids) {
        read.push(found(&db.store, owner, *id).await);
    }
    let statuses: Vec<TaskStatus> = read.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [
            TaskStatus::Working,
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ]
    );
    let leased = &read[1];
    assert_eq!(leased.lease_owner.as_deref(), Some("gone"));
    assert_eq!((leased.lease_token, leased.attempt), (7, 3));
    assert_eq!(leased.current_attempt(), 3);
    assert_eq!(read[2].issued_keys, ["k\"ey"]);
    assert_eq!(
        read[2].input_requests.clone().map(Into::into),
        Some(requests)
    );
    assert_eq!(read[3].result.as_ref(), Some(&result));
    assert_eq!(read[3].status_message.as_deref(), Some("Done, \"really\""));
    assert!(read[3].finished_at.is_some() && read[0].finished_at.is_none());
    assert_eq!(
        db.count_tasks("tenant = 'other' AND principal = 'tenant'")
            .await,
        1
    );
    // The claim facts are the history's.
    let history = match db.store.console().task_history(&alice(), ids[1]).await {
        Ok(Lookup::Found(events)) => events,
        other => panic!("history: {other:?}"),
    };
    let claimed = history
        .iter()
        .find(|e| e.kind == HistoryKind::Claimed)
        .expect("claimed");
    assert_eq!(
        (claimed.worker.as_deref(), claimed.pickup_ms),
        (Some("gone"), Some(42))
    );

    // They behave: the queued one is claimable (and only it), the lapsed lease with no
    // attempts left is rescued as a lost worker's, answers resume the waiting one, and
    // the finished one past its TTL is deleted.
    let worker = db.store.worker();
    let claimed = worker.claim("w", 10, 60_000).await.expect("claim");
    assert_eq!(
        claimed.iter().map(|c| c.lease.id).collect::<Vec<_>>(),
        [ids[0]]
    );
    let rescued = worker.rescue_lapsed(10).await.expect("rescue");
    assert_eq!((rescued.failed, rescued.cancelled), (1, 0));
    let resumed = db
        .store
        .replica()
        .update_inputs(
            &alice(),
            ids[2],
            &answers(&[("k\"ey", json!({ "action": "accept", "content": {} }))]),
            validator,
        )
        .await
        .expect("answer");
    assert!(
        matches!(
            resumed,
            Lookup::Found(Ok(mcp_tasks_store::UpdateOutcome::Applied {
                resumed: true,
                ..
            }))
        ),
        "{resumed:?}"
    );
    assert_eq!(worker.purge_expired(10).await.expect("purge"), 1);
    assert_eq!(
        db.store
            .replica()
            .get_task(&alice(), ids[3])
            .await
            .expect("get"),
        Lookup::Expired
    );
}
