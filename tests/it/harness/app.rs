//! The test app: N replicas and M workers in this process on one fresh database, with
//! the chosen tool packs, replica configuration and authentication, and clients per
//! principal; and the router of one replica in process, for property tests.
//!
//! ```ignore
//! let app = TestApp::builder().workers(1).config(|c| c.max_tasks_in_flight = 2).start().await;
//! let alice = app.client("alice");
//! app.stop().await;
//! ```

use std::sync::Arc;

use mcp_tasks_client::Client;
use mcp_tasks_server::{AppState, NoAuth, ServerConfig, StateKeys};
use tokio_util::sync::CancellationToken;

use super::http::{self, Answer, Request};
use super::jwt::Jwt;
use super::replica::{Auth, Replica, Worker, state_keys};
use super::{TestDb, registry, server_config, worker_config};

/// Replicas and workers sharing one database.
pub(crate) struct TestApp {
    pub(crate) db: TestDb,
    pub(crate) replicas: Vec<Replica>,
    pub(crate) workers: Vec<Worker>,
    pub(crate) http: reqwest::Client,
}

/// What [`TestApp::builder`] brings up; by default one replica with the conformance
/// tools, no worker, header authentication and the harness's fixed state keys.
pub(crate) struct Builder {
    packs: String,
    replicas: usize,
    workers: usize,
    config: ServerConfig,
    random_keys: bool,
    keys_each: Vec<StateKeys>,
    auth: Auth,
}

impl TestApp {
    pub(crate) fn builder() -> Builder {
        Builder {
            packs: "conformance".into(),
            replicas: 1,
            workers: 0,
            config: server_config(),
            random_keys: false,
            keys_each: Vec::new(),
            auth: Auth::Headers,
        }
    }

    /// One replica and `workers` workers with the conformance tools.
    pub(crate) async fn start(workers: usize) -> Self {
        Self::builder().workers(workers).start().await
    }

    /// The first replica.
    pub(crate) fn replica(&self) -> &Replica {
        &self.replicas[0]
    }

    /// The first replica's MCP endpoint.
    pub(crate) fn url(&self) -> &str {
        &self.replica().url
    }

    /// A client of the first replica, as principal `who` (tenant `default`).
    pub(crate) fn client(&self, who: &str) -> Client {
        self.replica().client(who)
    }

    /// Stops the workers (gracefully), then the replicas.
    pub(crate) async fn stop(self) {
        for w in self.workers {
            w.stop().await;
        }
        for r in self.replicas {
            r.stop().await;
        }
    }
}

impl Request {
    /// Sends it to the app's first replica.
    pub(crate) async fn send_to_app(&self, app: &TestApp) -> Answer {
        self.send(&app.http, app.url()).await
    }
}

impl Builder {
    /// Tool packs, comma-separated, for replicas and workers alike.
    pub(crate) fn packs(mut self, packs: &str) -> Self {
        packs.clone_into(&mut self.packs);
        self
    }

    pub(crate) fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    pub(crate) fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Changes the replicas' configuration (from [`server_config`]).
    pub(crate) fn config(mut self, f: impl FnOnce(&mut ServerConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Random `requestState` keys, of each replica its own.
    pub(crate) fn random_state_keys(mut self) -> Self {
        self.random_keys = true;
        self
    }

    /// The i-th replica's state keys (`MCP_TASKS_STATE_KEY`), for rotation tests; as many
    /// replicas as key sets.
    pub(crate) fn state_keys_each(mut self, keys: &[&str]) -> Self {
        self.replicas = keys.len();
        self.keys_each = keys
            .iter()
            .map(|k| StateKeys::parse(k).expect("state keys"))
            .collect();
        self
    }

    /// Replicas that require bearer tokens.
    pub(crate) fn jwt(mut self, jwt: Jwt) -> Self {
        self.auth = Auth::Jwt(jwt);
        self
    }

    pub(crate) async fn start(self) -> TestApp {
        let db = TestDb::new().await;
        let mut replicas = Vec::new();
        for i in 0..self.replicas {
            let keys = if let Some(keys) = self.keys_each.get(i) {
                keys.clone()
            } else if self.random_keys {
                StateKeys::random()
            } else {
                state_keys()
            };
            replicas.push(
                Replica::launch(
                    &db.store,
                    registry(&self.packs),
                    self.config.clone(),
                    keys,
                    self.auth.clone(),
                )
                .await,
            );
        }
        let workers = (0..self.workers)
            .map(|i| {
                let mut config = worker_config();
                if i > 0 {
                    config.worker_id = format!("{}-{i}", config.worker_id);
                }
                Worker::start_with(&db.store, registry(&self.packs), config)
            })
            .collect();
        TestApp {
            db,
            replicas,
            workers,
            http: http::client(),
        }
    }
}

/// One replica's router in process, without sockets, on a runtime of its own so that
/// synchronous tests (property tests) can drive it: every request runs the whole request
/// path in a few milliseconds. No authentication (one anonymous owner), no worker.
pub(crate) struct InProcess {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    shutdown: CancellationToken,
    _db: TestDb,
}

impl InProcess {
    /// The conformance tools on a fresh database, with `config` changed by `f`.
    pub(crate) fn start(f: impl FnOnce(&mut ServerConfig)) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let shutdown = CancellationToken::new();
        let (db, router) = rt.block_on(async {
            let db = TestDb::new().await;
            let mut config = server_config();
            f(&mut config);
            let state = AppState::new(
                super::db::replica_stores(&db.store),
                registry("conformance"),
                config,
                Arc::new(NoAuth::default()),
                state_keys(),
                shutdown.clone(),
            );
            let app =
                mcp_tasks_server::router(state.clone()).merge(mcp_tasks_console::routes(state));
            (db, app)
        });
        Self {
            rt,
            router,
            shutdown,
            _db: db,
        }
    }

    /// Sends `req` and waits for the answer.
    pub(crate) fn send(&self, req: &Request) -> Answer {
        self.rt.block_on(req.send_to(&self.router))
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
