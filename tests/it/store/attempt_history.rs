//! The attempt a task is on survives its input rounds: parking for input starts the
//! attempt budget anew (`attempt` = 0), but the task page and the timeline still tell
//! which attempt asked, which attempt each archived claim was, and which one was answered.

use std::time::Duration;

use mcp_tasks_store::{HistoryEvent, HistoryKind, Lookup, Store, TaskId};
use serde_json::json;

use super::{alice, answers, confirm_schema, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, found, new_task};

async fn history(store: &Store, id: TaskId) -> Vec<HistoryEvent> {
    match store
        .console()
        .task_history(&alice(), id)
        .await
        .expect("history")
    {
        Lookup::Found(events) => events,
        other => panic!("no history for {id}: {other:?}"),
    }
}

/// (kind, worker, attempt) of each event.
fn told(events: &[HistoryEvent]) -> Vec<(HistoryKind, Option<&str>, Option<i32>)> {
    events
        .iter()
        .map(|e| (e.kind, e.worker.as_deref(), e.attempt))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_input_is_on_the_attempt_that_asked() {
    let db = TestDb::new().await;
    let store = &db.store;
    let id = create(store, &alice(), new_task("slow_compute", json!({})))
        .await
        .id;
    assert_eq!(found(store, &alice(), id).await.current_attempt(), 0);

    // w1 is lost (a short lease that runs out); w2 takes it over as attempt 2 and asks.
    let _lost = claim_id(store, "w1", 50, id).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let c2 = claim_id(store, "w2", 60_000, id).await;
    assert_eq!(c2.task.attempt, 2);
    let requests = json!({ "ok": { "method": "elicitation/create", "params": { "message": "?", "requestedSchema": confirm_schema() } } });
    store
        .worker()
        .request_input(&c2.lease, requests.as_object().expect("object"), None, None)
        .await
        .expect("request input");
    let waiting = found(store, &alice(), id).await;
    assert_eq!(waiting.attempt, 0, "the next round has its whole budget");
    assert_eq!(waiting.current_attempt(), 2, "{waiting:?}");
    assert_eq!(
        told(&history(store, id).await)[3..],
        [
            (HistoryKind::Claimed, Some("w2"), Some(2)),
            (HistoryKind::InputRequested, Some("w2"), Some(2)),
        ]
    );

    // Answered: the answer belongs to attempt 2; the next round's first claim is
    // attempt 1, and the archived claim of w2 keeps its number.
    store
        .replica()
        .update_inputs(
            &alice(),
            id,
            &answers(&[(
                "ok",
                json!({ "action": "accept", "content": { "confirm": true } }),
            )]),
            validator,
        )
        .await
        .expect("answer");
    assert_eq!(found(store, &alice(), id).await.current_attempt(), 2);
    let c3 = claim_id(store, "w3", 60_000, id).await;
    assert_eq!((c3.task.attempt, c3.task.current_attempt()), (1, 1));
    // A release gives the interrupted run back; its claim is still attempt 1.
    assert!(store.worker().release(&c3.lease).await.expect("release"));
    let c4 = claim_id(store, "w4", 60_000, id).await;
    assert_eq!(c4.task.attempt, 1);

    let events = history(store, id).await;
    assert_eq!(
        told(&events),
        [
            (HistoryKind::Created, None, None),
            (HistoryKind::Claimed, Some("w1"), Some(1)),
            (HistoryKind::LeaseLapsed, Some("w1"), Some(1)),
            (HistoryKind::Claimed, Some("w2"), Some(2)),
            (HistoryKind::InputRequested, Some("w2"), Some(2)),
            (HistoryKind::Resumed, None, Some(2)),
            (HistoryKind::Claimed, Some("w3"), Some(1)),
            (HistoryKind::Released, Some("w3"), Some(1)),
            (HistoryKind::Claimed, Some("w4"), Some(1)),
        ],
        "{events:#?}"
    );
}
