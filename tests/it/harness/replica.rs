//! Replicas and workers served in this process, built from the real crates.

use std::net::SocketAddr;
use std::sync::Arc;

use mcp_tasks_client::Client;
use mcp_tasks_server::{AppState, Authenticator, ServerConfig, StateKeys};
use mcp_tasks_store::{PoolConfig, Store};
use mcp_tasks_tools::Registry;
use mcp_tasks_worker::WorkerConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{jwt, server_config, worker_config};

/// The `requestState` keys of [`Replica::start`]: the same on every replica, so an MRTR
/// exchange may go to any of them.
pub(crate) fn state_keys() -> StateKeys {
    StateKeys::parse(&"ab".repeat(32)).expect("key")
}

/// Who a replica takes its callers to be.
#[derive(Clone)]
pub(crate) enum Auth {
    /// The owner comes from `x-test-tenant` / `x-test-principal` (`default` /
    /// `anonymous` when absent).
    Headers,
    /// Bearer JWTs, checked by the real `JwtAuth` (see [`jwt::Jwt`]).
    Jwt(jwt::Jwt),
}

/// Test authentication: the owner comes from `x-test-tenant` / `x-test-principal`.
struct HeaderAuth;

impl Authenticator for HeaderAuth {
    fn authenticate<'a>(
        &'a self,
        headers: &'a reqwest::header::HeaderMap,
    ) -> futures::future::BoxFuture<'a, Result<mcp_tasks_store::Owner, mcp_tasks_server::AuthError>>
    {
        let get = |name: &str, default: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(default)
                .to_owned()
        };
        let owner = mcp_tasks_store::Owner::new(
            get("x-test-tenant", "default"),
            get("x-test-principal", "anonymous"),
        );
        Box::pin(std::future::ready(Ok(owner)))
    }
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
        Self::start_with(store, registry, server_config(), state_keys()).await
    }

    pub(crate) async fn start_with(
        store: &Store,
        registry: Registry,
        config: ServerConfig,
        keys: StateKeys,
    ) -> Self {
        Self::launch(store, registry, config, keys, Auth::Headers).await
    }

    /// A replica with the authentication of `auth`.
    pub(crate) async fn launch(
        store: &Store,
        registry: Registry,
        mut config: ServerConfig,
        keys: StateKeys,
        auth: Auth,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let url = format!("http://{addr}/mcp");
        // A JWT replica's audience is its own URL, so it is known only once bound.
        let auth: Arc<dyn Authenticator> = match auth {
            Auth::Headers => Arc::new(HeaderAuth),
            Auth::Jwt(jwt) => jwt.authenticator(&url, &mut config).await,
        };
        let shutdown = CancellationToken::new();
        let state = AppState::new(
            super::db::replica_stores(store),
            registry,
            config,
            auth,
            keys,
            shutdown.clone(),
        );
        let stop = shutdown.clone();
        let app =
            mcp_tasks_server::router(state.clone()).merge(mcp_tasks_console::routes(state.clone()));
        let task = tokio::spawn(async move {
            mcp_tasks_server::serve(listener, state, app, async move { stop.cancelled().await })
                .await
                .expect("serve");
        });
        Self {
            addr,
            url,
            shutdown,
            task,
        }
    }

    /// `http://127.0.0.1:port`, where the well-known documents are.
    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the RFC 9728 metadata of a replica that requires tokens is served.
    pub(crate) fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource", self.origin())
    }

    /// A client of this replica declaring tasks and elicitation, as principal `who`.
    pub(crate) fn client(&self, who: &str) -> Client {
        Client::with_tasks(&self.url).header("x-test-principal", who)
    }

    /// A client of this replica declaring tasks and elicitation, sending `token`.
    pub(crate) fn bearer_client(&self, token: impl Into<String>) -> Client {
        Client::with_tasks(&self.url).bearer(token)
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
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
        let run = mcp_tasks_worker::run(store.worker(), registry, config, shutdown.clone());
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

/// A worker on a runtime of its own, so that a crash can be simulated faithfully:
/// shutting the runtime down drops every task the worker spawned (claim loop, heartbeats,
/// LISTEN, maintenance, running handlers) and its database connections, with nothing
/// released or recorded.
pub(crate) struct IsolatedWorker {
    runtime: Option<tokio::runtime::Runtime>,
}

impl IsolatedWorker {
    pub(crate) fn start(url: &str, registry: Registry, config: WorkerConfig) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("worker runtime");
        let url = url.to_owned();
        runtime.spawn(async move {
            let store = Store::connect(
                &url,
                &PoolConfig {
                    max_connections: 4,
                    ..PoolConfig::default()
                },
            )
            .await
            .expect("connect");
            mcp_tasks_worker::run(store.worker(), registry, config, CancellationToken::new())
                .await
                .expect("worker failed");
        });
        Self {
            runtime: Some(runtime),
        }
    }

    /// Kills the worker at once, like a crashed process.
    pub(crate) fn crash(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for IsolatedWorker {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
