//! One upstream's connection: started, watched, and restarted with backoff when it ends
//! (a stdio child that died, an HTTP endpoint that went away). Calls take the current
//! peer; discovery runs after every (re)connect and on `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_wire::backoff::Backoff;
use rmcp::ClientHandler;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, Implementation,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, RequestContext, RoleClient,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::sync::{Notify, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{Transport, UpstreamConfig, expand_env};
use crate::input::Asked;
use crate::routing::{CallEvent, Calls};
use crate::stdio::{ENVELOPE_BYTES, relay_stderr};

/// The client side we present to an upstream.
pub(crate) struct Bridge {
    name: Arc<str>,
    calls: Calls,
    list_changed: Arc<Notify>,
    info: ClientConfig,
}

impl Bridge {
    /// Passes an input request from the upstream to the call it belongs to, and returns
    /// the answer our client gave.
    async fn ask_client(
        &self,
        method: &str,
        params: serde_json::Value,
        ct: CancellationToken,
    ) -> Result<serde_json::Value, McpError> {
        let (task, request) = crate::input::from_upstream(method, params);
        let route = self.calls.with(|c| c.route_input(task.as_deref()));
        let Some(route) = route else {
            tracing::warn!(upstream = %self.name, "an input request that belongs to no single call in flight (or may be another principal's); refused");
            return Err(McpError::invalid_request(
                "no single call in flight to relate this request to",
                None,
            ));
        };
        let (reply, answer) = oneshot::channel();
        if route.try_send(Asked { request, reply }).is_err() {
            return Err(McpError::invalid_request(
                "too many input requests at once",
                None,
            ));
        }
        let answer = tokio::select! {
            a = answer => a,
            () = ct.cancelled() => return Err(McpError::internal_error("cancelled by the server", None)),
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(McpError::new(
                rmcp::model::ErrorCode(i32::try_from(e.code).unwrap_or(-32603)),
                e.message,
                e.data,
            )),
            Err(_) => Err(McpError::internal_error(
                "the call this request belongs to has ended",
                None,
            )),
        }
    }
}

impl ClientHandler for Bridge {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let params = serde_json::to_value(&request)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let answer = self
            .ask_client("elicitation/create", params, context.ct)
            .await?;
        serde_json::from_value(answer)
            .map_err(|e| McpError::internal_error(format!("an unusable answer: {e}"), None))
    }

    // Sampling is deprecated from 2026-07-28 on, but 2025-era upstreams still ask for it.
    #[expect(
        deprecated,
        reason = "2025-era upstreams still send sampling/createMessage"
    )]
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        let params = serde_json::to_value(&request)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let answer = self
            .ask_client("sampling/createMessage", params, context.ct)
            .await?;
        serde_json::from_value(answer)
            .map_err(|e| McpError::internal_error(format!("an unusable answer: {e}"), None))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let tx = self.calls.with(|c| c.progress(&params.progress_token));
        if let Some(tx) = tx {
            let _ = tx.send(CallEvent::Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    // Logging is deprecated from 2026-07-28 on, but the 2025 revisions' upstreams use it
    // for exactly what a status message is.
    #[expect(
        deprecated,
        reason = "2025-era upstreams still send notifications/message"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = match &params.data {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // Log data may carry anything the upstream likes: debug only.
        tracing::debug!(upstream = %self.name, level = ?params.level, "upstream log message");
        // No association: a lone call of the only principal gets it (`routing.rs`).
        if let Some(tx) = self.calls.with(|c| c.route_by_request(None)) {
            let _ = tx.send(CallEvent::Log(text));
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(upstream = %self.name, "upstream tool list changed");
        self.list_changed.notify_one();
    }
}

/// The state of one upstream, shared by its supervisor, its tools and the status report.
pub(crate) struct Connection {
    pub(crate) config: Arc<UpstreamConfig>,
    peer: watch::Sender<Option<Peer<RoleClient>>>,
    pub(crate) calls: Calls,
    pub(crate) list_changed: Arc<Notify>,
    /// Why it is not connected: the id of the log line with the details.
    last_error: Mutex<Option<String>>,
    /// How the next connection opens (see [`Handshake`]).
    handshake: Mutex<Handshake>,
    /// Asks the supervisor for a fresh connection (a call found this one broken).
    reconnect: Notify,
}

impl Connection {
    pub(crate) fn new(config: UpstreamConfig) -> Arc<Self> {
        Arc::new(Self {
            config: Arc::new(config),
            peer: watch::channel(None).0,
            calls: Calls::default(),
            list_changed: Arc::new(Notify::new()),
            last_error: Mutex::new(None),
            handshake: Mutex::new(Handshake::Auto),
            reconnect: Notify::new(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Peer<RoleClient>>> {
        self.peer.subscribe()
    }

    /// Why it is not connected, for anyone to read: generic, with the id of the log line
    /// that has the upstream's own words (they may hold a URL's query string or a token).
    pub(crate) fn last_error(&self) -> Option<String> {
        let id = self.last_error.lock().ok().and_then(|e| e.clone())?;
        Some(format!(
            "upstream {:?} is not reachable (error {id})",
            self.config.name
        ))
    }

    /// Whether it has failed to connect since it last connected.
    pub(crate) fn has_failed(&self) -> bool {
        self.last_error.lock().is_ok_and(|e| e.is_some())
    }

    /// Waits (at most `within`) for a live peer.
    pub(crate) async fn peer_within(&self, within: Duration) -> Option<Peer<RoleClient>> {
        let mut rx = self.subscribe();
        // A peer whose transport has closed is on its way out: wait for its successor.
        let wait = rx.wait_for(|p| p.as_ref().is_some_and(|p| !p.is_transport_closed()));
        match tokio::time::timeout(within, wait).await {
            Ok(Ok(peer)) => peer.clone(),
            _ => None,
        }
    }

    /// A call found the peer broken: drop it so the supervisor starts another.
    pub(crate) fn broken(&self, peer: &Peer<RoleClient>) {
        if peer.is_transport_closed() {
            self.reconnect.notify_one();
        }
    }

    /// `raw`, the upstream's own words, goes to the log (warn) under a new id; callers
    /// see only the id (`None`: connected again).
    fn set_error(&self, raw: Option<&str>, retry: Duration) {
        let id = raw.map(|raw| {
            let id = error_id();
            tracing::warn!(upstream = %self.config.name, error_id = %id, error = %raw, retry_ms = retry.as_millis() as u64, "upstream not reachable");
            id
        });
        if let Ok(mut e) = self.last_error.lock() {
            *e = id;
        }
    }

    /// Keeps the connection up until `stop`: connect, wait for it to end, back off, again.
    pub(crate) async fn supervise(self: Arc<Self>, info: ClientConfig, stop: CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            let bridge = Bridge {
                name: self.config.name.as_str().into(),
                calls: self.calls.clone(),
                list_changed: self.list_changed.clone(),
                info: info.clone(),
            };
            let handshake = self.handshake.lock().map_or(Handshake::Auto, |h| *h);
            let started = tokio::select! {
                s = connect(&self.config, bridge, handshake) => s,
                () = stop.cancelled() => return,
            };
            // The pause after this attempt, drawn now so the error can say it.
            let delay;
            match started {
                Ok((running, stderr)) => {
                    backoff.reset();
                    let peer_info = running.peer().peer_info();
                    tracing::info!(
                        upstream = %self.config.name,
                        protocol = %peer_info.as_ref().map_or_else(String::new, |i| i.protocol_version.to_string()),
                        "upstream connected"
                    );
                    self.set_error(None, Duration::ZERO);
                    self.peer.send_replace(Some(running.peer().clone()));
                    let ct = running.cancellation_token();
                    let current = running.peer().clone();
                    // A call that found its peer closed asks for a reconnect; a request
                    // left over from an earlier connection (Notify keeps one permit) must
                    // not cancel this healthy one mid-call.
                    let asked = async {
                        loop {
                            self.reconnect.notified().await;
                            if current.is_transport_closed() {
                                break;
                            }
                        }
                    };
                    tokio::select! {
                        _ = running.waiting() => {}
                        () = relay_stderr(&self.config.name, stderr) => {}
                        () = asked => ct.cancel(),
                        () = stop.cancelled() => {
                            ct.cancel();
                            self.peer.send_replace(None);
                            return;
                        }
                    }
                    self.peer.send_replace(None);
                    delay = backoff.next_delay();
                    self.set_error(Some("the connection ended; reconnecting"), delay);
                }
                Err(e) => {
                    delay = backoff.next_delay();
                    self.set_error(Some(&e.text), delay);
                    if e.handshake_failed
                        && let Ok(mut h) = self.handshake.lock()
                    {
                        *h = h.next();
                        tracing::info!(upstream = %self.config.name, handshake = ?*h, "trying another handshake");
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}

type Running = rmcp::service::RunningService<RoleClient, Bridge>;

/// How a connection opens. Every revision an upstream may speak: 2026-07-28 through
/// `server/discover`, the 2025 ones through `initialize`. `Auto` probes with discovery
/// and falls back after 10 s (rmcp's fixed probe time); an upstream slower than that to
/// start (an interpreter importing its SDK under load) answers the probe after the
/// fallback began, which fails the handshake, so the next attempt skips the probe:
/// `initialize` only, then discovery only (without the 10 s limit), then `Auto` again.
/// The handshake that worked is kept for reconnects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handshake {
    Auto,
    Initialize,
    Discover,
}

impl Handshake {
    fn next(self) -> Self {
        match self {
            Self::Auto => Self::Initialize,
            Self::Initialize => Self::Discover,
            Self::Discover => Self::Auto,
        }
    }

    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Self::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Self::Initialize => ClientLifecycleMode::Initialize,
            Self::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        }
    }
}

/// Why a connection could not be opened.
struct ConnectError {
    text: String,
    /// The upstream answered, but not the way this handshake expects.
    handshake_failed: bool,
}

impl From<String> for ConnectError {
    fn from(text: String) -> Self {
        Self {
            text,
            handshake_failed: false,
        }
    }
}

/// How long one handshake may take (a child that never answers must not hang us).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

async fn handshake<T, E, A>(
    bridge: Bridge,
    transport: T,
    how: Handshake,
) -> Result<Running, ConnectError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        bridge.serve_with_lifecycle(transport, how.lifecycle()),
    )
    .await
    {
        Ok(Ok(running)) => Ok(running),
        Ok(Err(e)) => Err(ConnectError {
            handshake_failed: !matches!(
                e,
                rmcp::service::ClientInitializeError::ConnectionClosed(_)
                    | rmcp::service::ClientInitializeError::TransportError { .. }
                    | rmcp::service::ClientInitializeError::Cancelled
            ),
            text: e.to_string(),
        }),
        Err(_) => Err(ConnectError {
            text: format!(
                "no answer to the handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            ),
            handshake_failed: true,
        }),
    }
}

async fn connect(
    config: &UpstreamConfig,
    bridge: Bridge,
    how: Handshake,
) -> Result<(Running, Option<tokio::process::ChildStderr>), ConnectError> {
    match &config.transport {
        Transport::Stdio {
            command,
            env,
            inherit_env,
        } => {
            let env = crate::stdio::environment(std::env::vars_os(), inherit_env, env);
            let (transport, stderr) =
                crate::stdio::spawn(&config.name, command, &env, config.max_result_bytes)
                    .map_err(|e| format!("cannot start {:?}: {e}", command[0]))?;
            let running = handshake(bridge, transport, how).await?;
            Ok((running, stderr))
        }
        Transport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let value = expand_env(value).map_err(|var| format!("${{{var}}} is not set"))?;
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let value = http::HeaderValue::try_from(value)
                    .map_err(|_| format!("header {name}: not a valid header value"))?;
                custom.insert(name, value);
            }
            let cap = config.max_result_bytes.saturating_add(ENVELOPE_BYTES);
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .max_json_response_size(cap)
                    .max_sse_event_size(cap)
                    .reinit_on_expired_session(true),
            );
            let running = handshake(bridge, transport, how).await?;
            Ok((running, None))
        }
    }
}

/// A short id that ties a generic message to the log line with the details.
pub(crate) fn error_id() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(6);
    id
}

/// What we tell upstreams about ourselves.
pub(crate) fn client_info(name: &str, version: &str) -> ClientConfig {
    // Form elicitation and sampling are bridged to our tasks' inputRequests (see
    // `input.rs`), each only for a client that declared it; the upstream hears an error
    // otherwise. The Tasks extension lets a 2026-07-28 upstream run its task tools as
    // tasks of its own, which we follow (`upstream_task.rs`); a server without it ignores it.
    let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
        "elicitation": { "form": {} },
        "sampling": {},
        "extensions": { "io.modelcontextprotocol/tasks": {} },
    }))
    .unwrap_or_default();
    ClientConfig::new(
        capabilities,
        Implementation::new(name.to_owned(), version.to_owned()),
    )
}
