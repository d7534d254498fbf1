//! Migrations from several replicas at once.

use mcp_tasks_store::{PoolConfig, Store};
use serde_json::json;

use super::alice;
use crate::harness::TestDb;
use crate::harness::fixtures::{create, found, new_task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations() {
    let db = TestDb::empty().await;
    let url = db.url.clone();

    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(
            Store::connect(
                &url,
                &PoolConfig {
                    max_connections: 2,
                    ..PoolConfig::default()
                },
            )
            .await
            .expect("connect"),
        );
    }
    let empty: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("tables");
    assert_eq!(empty, 0, "the scratch database is not empty");

    let runs: Vec<_> = stores
        .iter()
        .cloned()
        .map(|s| tokio::spawn(async move { s.migrate().await }))
        .collect();
    for (i, run) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        run.expect("migrate task")
            .unwrap_or_else(|e| panic!("migration {i} of 4 failed: {e}"));
    }

    // One row per migration file, each applied successfully.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut files: Vec<i64> = std::fs::read_dir(&dir)
        .expect("migrations dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .map(|n| {
            n.split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("migration file name {n:?}"))
        })
        .collect();
    files.sort_unstable();
    assert!(!files.is_empty());
    let embedded: Vec<i64> = mcp_tasks_store::migration_versions();
    assert_eq!(embedded, files, "embedded migrations differ from the files");

    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .expect("_sqlx_migrations");
    assert_eq!(
        applied,
        files.iter().map(|&v| (v, true)).collect::<Vec<_>>(),
        "each migration applied exactly once"
    );

    // Migrating again is a no-op, and the schema works.
    stores[3].migrate().await.expect("migrate again");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(count, i64::try_from(files.len()).expect("len"));
    let owner = alice();
    let task = create(
        &stores[1],
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    assert_eq!(found(&stores[2], &owner, task.id).await.id, task.id);

    for s in &stores {
        s.close().await;
    }
}
