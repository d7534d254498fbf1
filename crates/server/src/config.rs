//! Replica settings. The binary fills these from flags and environment variables.

use std::time::Duration;

use mcp_tasks_wire::results::Implementation;

/// Which `Host` header values (and `Origin` hosts) a replica accepts: its defence
/// against DNS rebinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHosts {
    /// Any host. An `Origin`, when present, must then name the same host as `Host`.
    Any,
    /// Only these host names (without port), compared case-insensitively.
    List(Vec<String>),
}

impl AllowedHosts {
    /// `localhost`, `127.0.0.1` and `::1`: the right default for a replica bound to
    /// loopback.
    pub fn loopback() -> Self {
        Self::List(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])
    }

    /// Parses `*` or a comma-separated list.
    pub fn parse(spec: &str) -> Self {
        let names: Vec<String> = spec
            .split(',')
            .map(|s| {
                s.trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_ascii_lowercase()
            })
            .filter(|s| !s.is_empty())
            .collect();
        if names.iter().any(|n| n == "*") {
            Self::Any
        } else {
            Self::List(names)
        }
    }

    pub fn allows(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            Self::List(names) => names.iter().any(|n| n.eq_ignore_ascii_case(host)),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub server_info: Implementation,
    pub allowed_hosts: AllowedHosts,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Deepest JSON nesting accepted in a body.
    pub json_limits: mcp_tasks_wire::strict::JsonLimits,
    /// How long a replica waits for a worker on behalf of a client that did not declare
    /// the Tasks extension, before giving up on the call.
    pub sync_wait: Duration,
    /// On shutdown, how long synchronous waits may go on before answering 503.
    pub drain_grace: Duration,
    /// Longest a synchronous (sync-only) tool may run inside the replica.
    pub sync_tool_timeout: Duration,
    /// Minimum time a finished task stays readable.
    pub retention: Duration,
    /// How long an MRTR `requestState` stays valid.
    pub request_state_ttl: Duration,
    /// How long a session of a 2025-era client lasts (its `Mcp-Session-Id` expires then).
    pub session_ttl: Duration,
    /// Most ended sessions remembered per principal before they are ended all at once.
    pub max_session_revocations: i64,
    /// Cache freshness advertised on `server/discover` and list results.
    pub cache_ttl: Duration,
    /// Items per page of `tools/list`, `resources/list`, `resources/templates/list` and
    /// `prompts/list`.
    pub list_page_size: usize,
    pub instructions: Option<String>,
    /// Most task ids one `subscriptions/listen` may name.
    pub max_listen_tasks: usize,
    /// Most listen streams one principal may hold open on one replica.
    pub max_streams_per_principal: usize,
    /// Interval of SSE keep-alive comments on idle streams.
    pub keep_alive: Duration,
    /// Longest any SSE stream stays open (listen streams, 2025-era waits, the console's
    /// live parts); then it ends and its client reconnects, with the credentials it holds
    /// then (see `sse`).
    pub max_stream_lifetime: Duration,
    /// Shortest gap between two "there is work" notifications to the workers.
    pub wake_interval: Duration,
    pub hub: crate::HubConfig,
    /// Largest `arguments` of a `tools/call`, serialized.
    pub max_argument_bytes: usize,
    /// Largest `inputResponses` of one request, serialized.
    pub max_input_response_bytes: usize,
    /// Most unfinished tasks one principal may have.
    pub max_tasks_in_flight: i64,
    /// Requests per principal per replica; `None` turns the limit off.
    pub rate_limit: Option<crate::RateLimit>,
    /// Timeouts and limits of connections and of requests as a whole.
    pub connections: crate::ConnectionConfig,
    /// Set when tokens are required: published as RFC 9728 metadata and named in
    /// `WWW-Authenticate` challenges.
    pub protected_resource: Option<crate::ProtectedResource>,
    /// The process's metrics, served on `GET /metrics`; `None` answers 404 there.
    pub metrics: Option<mcp_tasks_observe::Metrics>,
    /// Whether the replica's own listener serves `GET /metrics`. Off when a listener of
    /// its own serves them ([`crate::serve_metrics`]), so the port clients reach need not
    /// show them: 404 there then.
    pub metrics_on_listener: bool,
    /// The web console at `/console` (`mcp-tasks-console`, merged in by the binary); `None`
    /// leaves it unserved (404), and the push hub does not listen for what only it needs.
    pub console: Option<crate::ConsoleConfig>,
    /// How the queue is shared: a new task's place in it comes from its tenant's weight
    /// and its priority (the configuration file's scheduling sections).
    pub scheduling: mcp_tasks_tools::scheduling::Scheduling,
}

impl ServerConfig {
    pub fn new(server_info: Implementation) -> Self {
        Self {
            server_info,
            allowed_hosts: AllowedHosts::loopback(),
            max_body_bytes: 1024 * 1024,
            json_limits: mcp_tasks_wire::strict::JsonLimits::default(),
            sync_wait: Duration::from_secs(60),
            sync_tool_timeout: Duration::from_secs(30),
            drain_grace: Duration::from_secs(10),
            retention: Duration::from_secs(3600),
            request_state_ttl: Duration::from_secs(15 * 60),
            session_ttl: Duration::from_secs(24 * 3600),
            max_session_revocations: 1000,
            cache_ttl: Duration::from_secs(300),
            list_page_size: 100,
            instructions: None,
            max_listen_tasks: 100,
            max_streams_per_principal: 64,
            keep_alive: Duration::from_secs(15),
            max_stream_lifetime: Duration::from_secs(30 * 60),
            wake_interval: Duration::from_millis(2),
            hub: crate::HubConfig::default(),
            protected_resource: None,
            max_argument_bytes: 256 * 1024,
            max_input_response_bytes: 256 * 1024,
            max_tasks_in_flight: 1000,
            rate_limit: Some(crate::RateLimit::default()),
            connections: crate::ConnectionConfig::default(),
            metrics: None,
            metrics_on_listener: true,
            console: None,
            scheduling: mcp_tasks_tools::scheduling::Scheduling::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_host_lists() {
        assert_eq!(AllowedHosts::parse("*"), AllowedHosts::Any);
        let l = AllowedHosts::parse("Example.com, [::1] ,");
        assert!(l.allows("example.com") && l.allows("::1") && !l.allows("evil.example.com"));
    }
}
