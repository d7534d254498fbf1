//! The store's event stream: typed notifications, a resync after every reconnect, a
//! self-probe that replaces a silently dead connection, and no connection left behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_tasks_store::{
    Event, EventKind, Events, EventsConfig, LISTENER_APPLICATION_NAME, NewTask, Owner, PoolConfig,
    Store, TaskId, Tenants,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::harness::fixtures::{self, new_task};
use crate::harness::{TestDb, eventually};

/// Generous: only there so that a broken stream fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(30);

async fn next(events: &mut Events) -> Event {
    tokio::time::timeout(PATIENCE, events.next())
        .await
        .expect("no event")
}

fn owner() -> Owner {
    Owner::new("t", "events")
}

async fn create(store: &Store) -> TaskId {
    let task = NewTask {
        status_message: None,
        ttl_ms: None,
        poll_interval_ms: None,
        ..new_task("slow_compute", json!({"seconds": 1}))
    };
    fixtures::create(store, &owner(), task).await.id
}

async fn version(store: &Store, id: TaskId) -> i64 {
    fixtures::found(store, &owner(), id).await.version
}

async fn listeners(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_one(&db.pool)
    .await
    .expect("count listeners")
}

/// Sends a NOTIFY the worker streams hear: a held task released.
async fn release_one(store: &Store) {
    create(store).await;
    let claimed = store.worker().claim("w", 1, 60_000).await.expect("claim");
    assert_eq!(claimed.len(), 1, "nothing to claim");
    assert!(
        store
            .worker()
            .release(&claimed[0].lease)
            .await
            .expect("release")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_typed_filtered_and_resynchronised_after_a_lost_connection() {
    let db = TestDb::new().await;
    let store = &db.store;
    let mut all = store.shared().events(
        &[
            EventKind::Runnable,
            EventKind::CancelRequested,
            EventKind::Changed,
        ],
        EventsConfig::default(),
    );
    let mut changes = store
        .shared()
        .events(&[EventKind::Changed], EventsConfig::default());
    // Connecting is the first gap: whatever happened before is unknown.
    assert_eq!(next(&mut all).await, Event::Resync);
    assert_eq!(next(&mut changes).await, Event::Resync);
    assert_eq!(listeners(&db).await, 2, "one connection per stream");

    // A watched task changes, is asked to cancel while held, and is cancelled.
    let t1 = create(store).await;
    store
        .replica()
        .watch(&[(owner(), t1)], 60_000)
        .await
        .expect("watch");
    let lease = store.worker().claim("w", 1, 60_000).await.expect("claim")[0]
        .lease
        .clone();
    let claimed = version(store, t1).await;
    store
        .replica()
        .cancel_task(&owner(), t1)
        .await
        .expect("cancel");
    assert!(store.worker().release(&lease).await.expect("release"));
    let cancelled = version(store, t1).await;
    assert!(cancelled > claimed);
    // An unwatched task is released for another worker.
    release_one(store).await;

    for expected in [
        Event::Changed {
            id: t1,
            version: claimed,
        },
        Event::CancelRequested(t1),
        Event::Changed {
            id: t1,
            version: cancelled,
        },
        // The released task's tenant, in the payload.
        Event::Runnable(Tenants::of("t")),
    ] {
        assert_eq!(next(&mut all).await, expected);
    }
    // The changes stream saw only the changes.
    for expected in [claimed, cancelled] {
        assert_eq!(
            next(&mut changes).await,
            Event::Changed {
                id: t1,
                version: expected
            }
        );
    }

    // Kill both connections: each stream reconnects, says so, and hears again.
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_all(&db.pool)
    .await
    .expect("terminate");
    assert_eq!(killed, vec![true, true]);
    assert_eq!(next(&mut all).await, Event::Resync);
    assert_eq!(next(&mut changes).await, Event::Resync);
    release_one(store).await;
    assert_eq!(next(&mut all).await, Event::Runnable(Tenants::of("t")));

    // Dropping a stream closes its connection.
    drop(all);
    drop(changes);
    eventually(PATIENCE, "the LISTEN connections to close", || async {
        (listeners(&db).await == 0).then_some(())
    })
    .await;
}

/// A TCP relay that can go silent: bytes stop flowing on every connection open at the
/// time, with the sockets left open, as behind a dead NAT entry or a hung peer. New
/// connections flow normally.
struct Relay {
    addr: std::net::SocketAddr,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Relay {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let all = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let flag = Arc::new(AtomicBool::new(false));
                all.lock().await.push(flag.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, flag.clone()));
                tokio::spawn(pipe(sr, cw, flag));
            }
        });
        Self { addr, frozen }
    }

    async fn freeze(&self) {
        for flag in self.frozen.lock().await.iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(Ordering::SeqCst) {
            // Hold both sockets open and say nothing, forever.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `postgres://user@host:port/db?x` → (`postgres://user@`, `host:port`, `/db?x`).
fn split_address(url: &str) -> (&str, &str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let start = after_scheme + url[after_scheme..].find('@').map_or(0, |i| i + 1);
    let end = start + url[start..].find(['/', '?']).unwrap_or(url.len() - start);
    (&url[..start], &url[start..end], &url[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_connection_is_found_by_its_probe_and_replaced() {
    let db = TestDb::new().await;
    let (before, upstream, after) = split_address(&db.url);
    let relay = Relay::start(upstream.to_owned()).await;
    let relayed_url = format!("{before}{}{after}", relay.addr);
    let relayed = Store::connect(
        &relayed_url,
        &PoolConfig {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(1),
            ..PoolConfig::default()
        },
    )
    .await
    .expect("connect through the relay");
    let mut events = relayed.shared().events(
        &[EventKind::Runnable],
        EventsConfig {
            probe_every: Duration::from_millis(100),
            probe_timeout: Duration::from_millis(300),
        },
    );
    assert_eq!(next(&mut events).await, Event::Resync);
    release_one(&db.store).await;
    assert_eq!(next(&mut events).await, Event::Runnable(Tenants::of("t")));

    // The connection goes silent: nothing is closed, so only the probe can tell.
    relay.freeze().await;
    assert_eq!(next(&mut events).await, Event::Resync);
    // The replacement hears what is sent now. (The pool's own connections went silent
    // too, so the probes may replace it again before they are renewed: each resync
    // means "anything sent meanwhile may be lost", so send again.)
    loop {
        release_one(&db.store).await;
        match next(&mut events).await {
            Event::Runnable(_) => break,
            Event::Resync => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn addresses_split_out_of_urls() {
    assert_eq!(
        split_address("postgres://u:p@h:5432/db?sslmode=disable"),
        ("postgres://u:p@", "h:5432", "/db?sslmode=disable")
    );
    assert_eq!(
        split_address("postgres://127.0.0.1:5432/db"),
        ("postgres://", "127.0.0.1:5432", "/db")
    );
    assert_eq!(
        split_address("postgres://h:1?x=y"),
        ("postgres://", "h:1", "?x=y")
    );
}
