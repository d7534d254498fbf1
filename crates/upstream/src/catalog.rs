//! Every upstream of a process, and the merged tool set: the built-in tools first, then
//! each upstream's (in configuration order, each sorted by name), rebuilt whenever an
//! upstream connects, drops, or changes its list.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_tools::{LiveRegistry, Registry, Tool};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::config::Config;
use crate::connection::{Connection, client_info};
use crate::forward;

/// How a process starts its upstreams.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long start-up waits for each upstream's first tool list. One that has not
    /// answered by then starts without its tools, which appear when it answers.
    pub initial_wait: Duration,
    /// Lists are read again this often, for upstreams that do not send
    /// `notifications/tools/list_changed`.
    pub refresh_interval: Duration,
    /// `clientInfo` we give upstreams.
    pub client_name: String,
    pub client_version: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            initial_wait: Duration::from_secs(10),
            refresh_interval: Duration::from_secs(60),
            client_name: "mcp-tasks".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "tool {tool:?} is exposed by both {first} and {second}; give one of them a `prefix` or a `tools` list"
    )]
    Duplicate {
        tool: String,
        first: String,
        second: String,
    },
}

/// What one upstream currently contributes.
#[derive(Default)]
struct Listed {
    reachable: bool,
    tools: Vec<Tool>,
    /// Discovery has finished at least once (or failed).
    tried: bool,
}

struct Shared {
    /// The process's own tools and catalog (packs, an `App`'s tools).
    builtin: Registry,
    conns: Vec<Arc<Connection>>,
    listed: Mutex<BTreeMap<String, Listed>>,
    registry: watch::Sender<Registry>,
    /// After start-up a clash only leaves the later tool out (logged), never stops us.
    started: std::sync::atomic::AtomicBool,
}

/// The running upstreams of a process. Dropping it stops every connection (and the stdio
/// children with them).
pub struct Upstreams {
    shared: Arc<Shared>,
    stop: CancellationToken,
    _loops: Vec<AbortOnDropHandle<()>>,
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Upstreams {
    /// Connects to every upstream, waits (bounded) for their first tool lists, and checks
    /// that no name is exposed twice. `builtin` is the process's own tools and catalog.
    pub async fn start(
        config: Config,
        builtin: Registry,
        options: Options,
    ) -> Result<(Self, LiveRegistry), StartError> {
        let registry = builtin.clone();
        let conns: Vec<Arc<Connection>> =
            config.upstreams.into_iter().map(Connection::new).collect();
        let shared = Arc::new(Shared {
            builtin,
            listed: Mutex::new(
                conns
                    .iter()
                    .map(|c| (c.name().to_owned(), Listed::default()))
                    .collect(),
            ),
            conns,
            registry: watch::channel(registry).0,
            started: false.into(),
        });
        let stop = CancellationToken::new();
        let info = client_info(&options.client_name, &options.client_version);
        let mut loops = Vec::new();
        for conn in &shared.conns {
            loops.push(spawn_owned(
                conn.clone().supervise(info.clone(), stop.clone()),
            ));
            loops.push(spawn_owned(discover(
                shared.clone(),
                conn.clone(),
                options.refresh_interval,
                stop.clone(),
            )));
        }
        let upstreams = Self {
            shared: shared.clone(),
            stop,
            _loops: loops,
        };
        // Start-up: every upstream answers or runs out of time, whichever is first.
        let deadline = tokio::time::Instant::now() + options.initial_wait;
        while tokio::time::Instant::now() < deadline && !shared.all_tried() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        shared.check_duplicates()?;
        shared
            .started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        shared.rebuild();
        for conn in &shared.conns {
            if !shared.is_reachable(conn.name()) {
                tracing::warn!(upstream = %conn.name(), "upstream not reachable at start; its tools appear when it answers");
            }
        }
        let rx = shared.registry.subscribe();
        let report = Arc::downgrade(&shared);
        let live = LiveRegistry::new(rx, move || {
            report
                .upgrade()
                .map_or(Value::Array(vec![]), |s| s.report())
        });
        Ok((upstreams, live))
    }

    /// Which upstreams answer, and how many tools each gives (what `/readyz` shows).
    pub fn report(&self) -> Value {
        self.shared.report()
    }
}

impl Shared {
    /// Every upstream has listed its tools, or failed to connect at least once.
    fn all_tried(&self) -> bool {
        let Ok(listed) = self.listed.lock() else {
            return true;
        };
        self.conns
            .iter()
            .all(|c| listed.get(c.name()).is_some_and(|l| l.tried) || c.last_error().is_some())
    }

    fn is_reachable(&self, name: &str) -> bool {
        self.listed
            .lock()
            .map(|l| l.get(name).is_some_and(|x| x.reachable))
            .unwrap_or(false)
    }

    fn report(&self) -> Value {
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        Value::Array(
            self.conns
                .iter()
                .map(|c| {
                    let l = listed.get(c.name());
                    let mut entry = json!({
                        "name": c.name(),
                        "reachable": l.is_some_and(|l| l.reachable),
                        "tools": l.map_or(0, |l| l.tools.len()),
                    });
                    if !l.is_some_and(|l| l.reachable)
                        && let Some(e) = c.last_error()
                    {
                        entry["error"] = json!(e);
                    }
                    entry
                })
                .collect(),
        )
    }

    /// The first clash between two sources, named by both.
    fn check_duplicates(&self) -> Result<(), StartError> {
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen: BTreeMap<&str, String> = self
            .builtin
            .tools()
            .map(|t| (t.name.as_str(), "the built-in tools".to_owned()))
            .collect();
        for conn in &self.conns {
            for tool in listed.get(conn.name()).map_or(&[][..], |l| &l.tools[..]) {
                let here = format!("upstream {:?}", conn.name());
                if let Some(first) = seen.insert(tool.name.as_str(), here.clone()) {
                    return Err(StartError::Duplicate {
                        tool: tool.name.clone(),
                        first,
                        second: here,
                    });
                }
            }
        }
        Ok(())
    }

    fn rebuild(&self) {
        if !self.started.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let mut tools = Vec::new();
        let mut names: std::collections::HashSet<String> =
            self.builtin.tools().map(|t| t.name.clone()).collect();
        for conn in &self.conns {
            let Some(l) = listed.get(conn.name()).filter(|l| l.reachable) else {
                continue;
            };
            for tool in &l.tools {
                if names.insert(tool.name.clone()) {
                    tools.push(tool.clone());
                } else {
                    tracing::error!(upstream = %conn.name(), tool = %tool.name, "tool name already taken by another source; left out");
                }
            }
        }
        drop(listed);
        match self.builtin.extended(tools) {
            Ok(r) => {
                self.registry.send_replace(r);
            }
            Err(e) => {
                tracing::error!(error = %e, "could not rebuild the tool set; keeping the last one")
            }
        }
    }

    /// `tools`: a list just read (`None`: unreachable, or not connected yet).
    fn set(&self, name: &str, reachable: bool, tools: Option<Vec<Tool>>) {
        if let Ok(mut listed) = self.listed.lock() {
            let l = listed.entry(name.to_owned()).or_default();
            l.reachable = reachable;
            l.tried |= tools.is_some() || reachable;
            if let Some(tools) = tools {
                l.tools = tools;
            }
        }
        self.rebuild();
    }
}

/// Reads the upstream's tool list after every (re)connect, on `list_changed`, and on
/// the refresh interval; marks it unreachable while it has no connection.
async fn discover(
    shared: Arc<Shared>,
    conn: Arc<Connection>,
    refresh: Duration,
    stop: CancellationToken,
) {
    let mut peers = conn.subscribe();
    loop {
        let peer = peers.borrow_and_update().clone();
        match peer {
            None => shared.set(conn.name(), false, None),
            Some(peer) => match peer.list_all_tools().await {
                Ok(listed) => {
                    let tools = build(&conn, listed);
                    tracing::info!(upstream = %conn.name(), tools = tools.len(), "upstream tools listed");
                    shared.set(conn.name(), true, Some(tools));
                }
                Err(e) => {
                    tracing::warn!(upstream = %conn.name(), error = %e, "upstream tools/list failed");
                    conn.broken(&peer);
                    shared.set(conn.name(), false, Some(Vec::new()));
                }
            },
        }
        tokio::select! {
            r = peers.changed() => if r.is_err() { return },
            () = conn.list_changed.notified() => {}
            () = tokio::time::sleep(refresh) => {}
            () = stop.cancelled() => return,
        }
    }
}

fn build(conn: &Arc<Connection>, listed: Vec<rmcp::model::Tool>) -> Vec<Tool> {
    let config = &conn.config;
    let mut tools: Vec<Tool> = listed
        .into_iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .filter(|d| {
            let name = d.get("name").and_then(Value::as_str).unwrap_or_default();
            config.tools.as_ref().is_none_or(|only| only.iter().any(|o| o == name))
        })
        .filter_map(|d| {
            let name = d.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let checked = forward::tool(conn, &d, *config.settings(&name)).and_then(|t| {
                // A schema our validator cannot compile would break the whole set.
                Registry::new([t.clone()]).map(|_| t).map_err(|e| e.to_string())
            });
            match checked {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(upstream = %config.name, tool = %name, error = %e, "upstream tool left out");
                    None
                }
            }
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
}

#[expect(
    clippy::disallowed_methods,
    reason = "the handle aborts the loop on drop; its owner is the Upstreams value"
)]
fn spawn_owned<F>(future: F) -> AbortOnDropHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    AbortOnDropHandle::new(tokio::spawn(future))
}
