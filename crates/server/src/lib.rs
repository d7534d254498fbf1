//! One stateless Streamable HTTP replica (MCP 2026-07-28 with the Tasks extension).
//!
//! A replica keeps nothing between requests: every request carries its own protocol
//! version and capabilities (a 2025-era client's signed session id carries them for it),
//! and every task lives in PostgreSQL. Any replica can answer any request, so replicas
//! scale behind a plain load balancer.
//!
//! The request path, in order (see `http/extract.rs` and `dispatch.rs`): Host/Origin
//! check → authentication → rate limit → media type and body size → JSON-RPC envelope →
//! `_meta` → routing headers → protocol version → method.

mod answers;
mod auth;
mod catalog;
mod config;
mod conn;
mod console_config;
pub mod core;
mod dispatch;
mod error;
mod http;
mod legacy;
mod limits;
mod mrtr;
mod origin;
mod params;
mod push;
mod reply;
mod request_state;
mod session;
mod sse;
mod tasks_methods;
mod tools_call;
mod trace;

use std::sync::Arc;

use mcp_tasks_store::{ConsoleReads, ReplicaStore, Sessions, Waker};
use mcp_tasks_tools::{LiveRegistry, Registry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::limits::RateLimiter;
use crate::push::hub::Hub;
use crate::push::streams::StreamCounts;

pub use auth::{
    AuthError, Authenticator, JwtAuth, JwtConfig, KeySource, NoAuth, ProtectedResource,
};
pub use config::{AllowedHosts, ServerConfig};
pub use conn::serve;
pub use conn::settings::{ConnectionConfig, ConnectionLimit};
pub use console_config::{AdminClaim, ConsoleConfig};
pub use http::{metrics_router, router, serve_metrics};
pub use limits::RateLimit;
pub use push::HubConfig;
pub use request_state::StateKeys;

/// The store handles a replica uses, and no others (see `mcp_tasks_store`'s roles: a
/// replica has no claim or fenced write, and never the connections themselves). The
/// binary's wiring makes them, from one `mcp_tasks_store::Store`.
#[derive(Clone, Debug)]
pub struct Stores {
    /// What the replica does for clients (and the console's cancel and answers).
    pub tasks: ReplicaStore,
    /// What the web console reads.
    pub console: ConsoleReads,
    /// 2025-era sessions ended, and the console's refresh turns.
    pub sessions: Sessions,
}

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    store: ReplicaStore,
    console_reads: ConsoleReads,
    sessions: Sessions,
    registry: LiveRegistry,
    config: ServerConfig,
    auth: Arc<dyn Authenticator>,
    state_keys: StateKeys,
    shutdown: CancellationToken,
    hub: Hub,
    waker: Waker,
    streams: Arc<StreamCounts>,
    rate: Option<RateLimiter>,
    background: Background,
}

/// The replica's own tasks (the push hub's loops, the worker waker, and what requests
/// leave running: see [`AppState::tracker`]): they outlive the drain that `shutdown`
/// starts (waits still in flight need the hub), and stop when the last handle on the
/// state is gone, or when [`serve`] has finished serving.
#[derive(Clone)]
struct Background {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Background {
    fn stop(&self) {
        self.stop.cancel();
        self.tasks.close();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.background.stop();
    }
}

impl AppState {
    /// Builds the replica's state and starts its background tasks (the push hub and the
    /// worker waker), which stop when [`serve`] is done or the last handle on the state
    /// is dropped (not with `shutdown`: the drain it starts still needs them). Must be
    /// called inside a Tokio runtime.
    pub fn new(
        stores: Stores,
        registry: impl Into<LiveRegistry>,
        config: ServerConfig,
        auth: Arc<dyn Authenticator>,
        state_keys: StateKeys,
        shutdown: CancellationToken,
    ) -> Self {
        let background = Background {
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        };
        let Stores {
            tasks: store,
            console: console_reads,
            sessions,
        } = stores;
        let hub = Hub::start(
            store.clone(),
            config.hub.clone(),
            config.console.is_some(),
            &background.tasks,
            background.stop.clone(),
        );
        let waker = Waker::start(
            store.clone(),
            config.wake_interval,
            &background.tasks,
            background.stop.clone(),
        );
        let config_rate = config.rate_limit;
        Self {
            inner: Arc::new(Inner {
                store,
                console_reads,
                sessions,
                registry: registry.into(),
                config,
                auth,
                state_keys,
                shutdown,
                hub,
                waker,
                streams: Arc::new(StreamCounts::default()),
                rate: config_rate.map(RateLimiter::new),
                background,
            }),
        }
    }

    /// The push hub: what the replica's streams (listen streams, the console's live
    /// parts) follow of their tasks.
    pub fn hub(&self) -> &Hub {
        &self.inner.hub
    }

    /// Tells the workers there is work of `tenant` (coalesced).
    fn wake_workers(&self, tenant: &str) {
        self.inner.waker.wake(tenant);
    }

    fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.inner.rate.as_ref()
    }

    /// Whether `owner` is past the replica's rate limit now (a request counted against
    /// it, as an API request is); never, without one.
    pub fn over_rate_limit(&self, owner: &mcp_tasks_store::Owner) -> bool {
        self.rate_limiter()
            .is_some_and(|limiter| limiter.check(owner, std::time::Instant::now()).is_err())
    }

    /// The streams each owner holds open on this replica, to count a new one against.
    pub fn streams(&self) -> &Arc<StreamCounts> {
        &self.inner.streams
    }

    /// Listen streams open on this replica.
    pub fn open_streams(&self) -> usize {
        self.inner.streams.total()
    }

    /// The task store as a replica uses it.
    pub fn store(&self) -> &ReplicaStore {
        &self.inner.store
    }

    /// What the web console reads.
    pub fn console_reads(&self) -> &ConsoleReads {
        &self.inner.console_reads
    }

    /// Ended 2025-era sessions and console refresh turns.
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// The tools now: one snapshot, to hold for the whole request (upstream tool sources
    /// may change the set between requests).
    pub fn registry(&self) -> Registry {
        self.inner.registry.current()
    }

    /// Where the tools come from and which sources answer, when some are upstreams.
    pub fn tool_sources(&self) -> Option<serde_json::Value> {
        self.inner.registry.sources()
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The API's authenticator (the console verifies its sessions' tokens with it).
    pub fn auth(&self) -> &dyn Authenticator {
        self.inner.auth.as_ref()
    }

    /// The replica's keys: what it signs and encrypts with (the console's cookies too).
    pub fn state_keys(&self) -> &StateKeys {
        &self.inner.state_keys
    }

    /// The replica's tracker, for work a request starts but does not await to the end (a
    /// sync-only tool's handler, the cancellation of an abandoned wait), so that [`serve`]
    /// does not return before it has finished.
    fn tracker(&self) -> &TaskTracker {
        &self.inner.background.tasks
    }

    /// Stops the replica's own tasks (the push hub, the waker, work requests left behind)
    /// and waits for them; called once every connection is closed.
    pub(crate) async fn stop_background(&self) {
        self.inner.background.stop();
        self.inner.background.tasks.wait().await;
    }

    /// The connection cap this replica serves with, checked against the open-file limit
    /// (its database pool's connections are kept out of it); an error says what does not
    /// fit.
    pub fn connection_limit(&self) -> Result<ConnectionLimit, String> {
        let pool = self.inner.store.shared().max_connections();
        self.inner.config.connections.limit(pool)
    }

    /// Fires when the replica starts shutting down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }
}
