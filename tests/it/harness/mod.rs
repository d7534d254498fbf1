//! The test harness: fresh databases, in-process replicas and workers built from the
//! real crates, and real `mcp-tasks` processes for the tests that kill them.

pub(crate) mod db;
pub(crate) mod procs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks_client::Client;
use mcp_tasks_server::{AppState, Authenticator, ServerConfig, StateKeys};
use mcp_tasks_store::Store;
use mcp_tasks_tools::Registry;
use mcp_tasks_wire::results::Implementation;
use mcp_tasks_worker::WorkerConfig;
use serde_json::Value;
use test_auth::HeaderAuth;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) use db::TestDb;

pub(crate) fn server_info() -> Implementation {
    Implementation {
        name: "mcp-tasks-test".into(),
        version: "0.0.0".into(),
    }
}

/// Test authentication: the owner comes from `x-test-tenant` / `x-test-principal`.
mod test_auth {
    use mcp_tasks_server::{AuthError, Authenticator};
    use mcp_tasks_store::Owner;

    pub(crate) struct HeaderAuth;

    impl Authenticator for HeaderAuth {
        fn authenticate<'a>(
            &'a self,
            headers: &'a reqwest::header::HeaderMap,
        ) -> futures::future::BoxFuture<'a, Result<Owner, AuthError>> {
            let get = |name: &str, default: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(default)
                    .to_owned()
            };
            let owner = Owner::new(
                get("x-test-tenant", "default"),
                get("x-test-principal", "anonymous"),
            );
            Box::pin(std::future::ready(Ok(owner)))
        }
    }
}

pub(crate) fn registry(packs: &str) -> Registry {
    Registry::from_packs(packs).expect("packs")
}

pub(crate) fn server_config() -> ServerConfig {
    let mut c = ServerConfig::new(server_info());
    c.sync_wait = Duration::from_secs(20);
    // Tests fire requests as fast as they can; the limit has tests of its own.
    c.rate_limit = None;
    c
}

/// A replica served in this process on a free loopback port.
pub(crate) struct Replica {
    pub(crate) addr: SocketAddr,
    pub(crate) url: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Replica {
    pub(crate) async fn start(store: &Store, registry: Registry) -> Self {
        Self::start_with(
            store,
            registry,
            server_config(),
            StateKeys::parse(&"ab".repeat(32)).expect("key"),
        )
        .await
    }

    pub(crate) async fn start_with(
        store: &Store,
        registry: Registry,
        config: ServerConfig,
        keys: StateKeys,
    ) -> Self {
        let auth: Arc<dyn Authenticator> = Arc::new(HeaderAuth);
        let shutdown = CancellationToken::new();
        let state = AppState::new(
            store.clone(),
            registry,
            config,
            auth,
            keys,
            shutdown.clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            mcp_tasks_server::serve(listener, state, async move { stop.cancelled().await })
                .await
                .expect("serve");
        });
        Self {
            addr,
            url: format!("http://{addr}/mcp"),
            shutdown,
            task,
        }
    }

    /// A client of this replica declaring tasks and elicitation, as principal `who`.
    pub(crate) fn client(&self, who: &str) -> Client {
        Client::with_tasks(&self.url).header("x-test-principal", who)
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

pub(crate) fn worker_config() -> WorkerConfig {
    let mut c = WorkerConfig::new(server_info());
    c.concurrency = 8;
    c.lease = Duration::from_secs(3);
    c.poll_interval = Duration::from_millis(100);
    c.maintenance_interval = Duration::from_millis(200);
    c.shutdown_grace = Duration::from_secs(5);
    c.cancel_grace = Duration::from_secs(2);
    c
}

/// A worker running in this process.
pub(crate) struct Worker {
    pub(crate) shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Worker {
    pub(crate) fn start(store: &Store, registry: Registry) -> Self {
        Self::start_with(store, registry, worker_config())
    }

    pub(crate) fn start_with(store: &Store, registry: Registry, config: WorkerConfig) -> Self {
        let shutdown = CancellationToken::new();
        let run = mcp_tasks_worker::run(store.clone(), registry, config, shutdown.clone());
        Self {
            shutdown,
            task: tokio::spawn(async move {
                run.await.expect("worker failed");
            }),
        }
    }

    /// Graceful stop: waits for the drain to finish.
    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Stops the worker at once, like a crash: dropping `run` aborts every loop and every
    /// running handler, and nothing is released or recorded.
    pub(crate) fn abort(self) {
        self.task.abort();
    }
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub(crate) async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) fn status(task: &Value) -> &str {
    mcp_tasks_client::status_of(task)
}

pub(crate) fn task_id(created: &Value) -> String {
    created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no taskId in {created}"))
        .to_owned()
}
