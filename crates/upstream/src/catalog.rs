//! Every upstream of a process, and the merged tool set: the built-in tools first, then
//! each upstream's (in configuration order, each sorted by name), rebuilt whenever an
//! upstream connects, drops, or changes its list.
//!
//! A name belongs to the source that exposed it first: a built-in tool's for good, an
//! upstream's for as long as its last list has it (unreachable or not). A list read again
//! (`notifications/tools/list_changed`, a reconnect) can add names but never take one
//! over: a clashing tool is refused, logged and reported in `/readyz`, and the old owner
//! keeps it.

use std::collections::{BTreeMap, HashMap, HashSet};
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

/// Most tools we take from one upstream; the rest of its list is left out (and reported).
pub(crate) const MAX_TOOLS: usize = 1000;

/// Most `tools/list` pages we read in one discovery.
const MAX_PAGES: usize = 100;

/// What one upstream currently contributes.
#[derive(Default)]
struct Listed {
    reachable: bool,
    /// Its last list that was read (kept while it is unreachable: its names stay its).
    tools: Vec<Tool>,
    /// Discovery has finished at least once (or failed).
    tried: bool,
    /// Tools its list had beyond [`MAX_TOOLS`] (at least; we stop reading there).
    left_out: usize,
    /// Tools of its list refused (name, why): the name is another source's.
    refused: Vec<(String, String)>,
}

#[derive(Default)]
struct State {
    listed: BTreeMap<String, Listed>,
    /// Which upstream each exposed name belongs to.
    owners: HashMap<String, String>,
}

/// What discovery found.
enum Update {
    /// Not connected.
    Unreachable,
    /// Connected, but `tools/list` failed.
    ListFailed,
    Listed {
        tools: Vec<Tool>,
        left_out: usize,
    },
}

struct Shared {
    /// The process's own tools and catalog (packs, an `App`'s tools).
    builtin: Registry,
    conns: Vec<Arc<Connection>>,
    listed: Mutex<State>,
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
            listed: Mutex::new(State {
                listed: conns
                    .iter()
                    .map(|c| (c.name().to_owned(), Listed::default()))
                    .collect(),
                owners: HashMap::new(),
            }),
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
        let Ok(state) = self.listed.lock() else {
            return true;
        };
        self.conns
            .iter()
            .all(|c| state.listed.get(c.name()).is_some_and(|l| l.tried) || c.has_failed())
    }

    fn is_reachable(&self, name: &str) -> bool {
        self.listed
            .lock()
            .map(|s| s.listed.get(name).is_some_and(|x| x.reachable))
            .unwrap_or(false)
    }

    fn report(&self) -> Value {
        let state = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        Value::Array(
            self.conns
                .iter()
                .map(|c| {
                    let l = state.listed.get(c.name());
                    let reachable = l.is_some_and(|l| l.reachable);
                    let exposed = l.map_or(0, |l| l.tools.len().saturating_sub(l.refused.len()));
                    let mut entry = json!({
                        "name": c.name(),
                        "reachable": reachable,
                        "tools": if reachable { exposed } else { 0 },
                    });
                    if !reachable && let Some(e) = c.last_error() {
                        entry["error"] = json!(e);
                    }
                    if let Some(l) = l.filter(|l| !l.refused.is_empty()) {
                        entry["refused"] = l
                            .refused
                            .iter()
                            .take(20)
                            .map(|(tool, why)| json!({ "tool": tool, "reason": why }))
                            .collect();
                    }
                    if let Some(l) = l.filter(|l| l.left_out > 0) {
                        entry["tools_left_out"] = json!(l.left_out);
                    }
                    entry
                })
                .collect(),
        )
    }

    /// The first clash between two sources, named by both.
    fn check_duplicates(&self) -> Result<(), StartError> {
        let state = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let listed = &state.listed;
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
        let mut state = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        self.rebuild_in(&mut state);
    }

    /// Builds the tool set from `state` and publishes it, under the lock its caller holds:
    /// so rebuilds never publish out of order, and nobody reads an upstream as listed
    /// (readiness, the report) before its tools are in the set that `tools/list` serves.
    /// Building takes milliseconds, and happens only when an upstream's list changes.
    fn rebuild_in(&self, state: &mut State) {
        if !self.started.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let State { listed, owners } = state;
        let builtin: HashSet<&str> = self.builtin.tools().map(|t| t.name.as_str()).collect();
        // A name its owner no longer lists is free again.
        owners.retain(|name, owner| {
            listed
                .get(owner.as_str())
                .is_some_and(|l| l.tools.iter().any(|t| t.name == *name))
        });
        let mut tools = Vec::new();
        for conn in &self.conns {
            let here = conn.name();
            let Some(l) = listed.get_mut(here) else {
                continue;
            };
            let mut seen = HashSet::new();
            let mut refused = Vec::new();
            for tool in &l.tools {
                let why = if builtin.contains(tool.name.as_str()) {
                    Some("a built-in tool has this name".to_owned())
                } else if !seen.insert(tool.name.as_str()) {
                    Some("listed twice".to_owned())
                } else {
                    match owners.get(&tool.name) {
                        Some(owner) if owner != here => {
                            Some(format!("upstream {owner:?} exposes this name"))
                        }
                        Some(_) => None,
                        None => {
                            owners.insert(tool.name.clone(), here.to_owned());
                            None
                        }
                    }
                };
                match why {
                    Some(why) => refused.push((tool.name.clone(), why)),
                    None if l.reachable => tools.push(tool.clone()),
                    None => {}
                }
            }
            for (tool, why) in &refused {
                if !l.refused.iter().any(|(t, _)| t == tool) {
                    tracing::warn!(upstream = %here, %tool, reason = %why, "upstream tool refused: its name is taken; the earlier one stays");
                }
            }
            l.refused = refused;
        }
        match self.builtin.extended(tools) {
            Ok(r) => {
                self.registry.send_replace(r);
            }
            Err(e) => {
                tracing::error!(error = %e, "could not rebuild the tool set; keeping the last one")
            }
        }
    }

    fn set(&self, name: &str, update: Update) {
        let mut state = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let l = state.listed.entry(name.to_owned()).or_default();
        match update {
            Update::Unreachable => l.reachable = false,
            Update::ListFailed => {
                l.reachable = false;
                l.tried = true;
            }
            Update::Listed { tools, left_out } => {
                l.reachable = true;
                l.tried = true;
                l.tools = tools;
                l.left_out = left_out;
            }
        }
        // In the same critical section: the report never shows the list before the set.
        self.rebuild_in(&mut state);
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
            None => shared.set(conn.name(), Update::Unreachable),
            Some(peer) => match list(&conn, &peer).await {
                Ok((listed, left_out)) => {
                    let tools = build(&conn, listed);
                    tracing::info!(upstream = %conn.name(), tools = tools.len(), "upstream tools listed");
                    if left_out > 0 {
                        tracing::warn!(upstream = %conn.name(), limit = MAX_TOOLS, left_out, "upstream lists more tools than we take; the rest are left out");
                    }
                    shared.set(conn.name(), Update::Listed { tools, left_out });
                }
                Err(e) => {
                    tracing::warn!(upstream = %conn.name(), error = %e, "upstream tools/list failed");
                    conn.broken(&peer);
                    shared.set(conn.name(), Update::ListFailed);
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

/// The upstream's tools (those the configuration takes), page by page, at most
/// [`MAX_TOOLS`] of them and [`MAX_PAGES`] pages; and how many were left out (at least).
async fn list(
    conn: &Connection,
    peer: &rmcp::Peer<rmcp::RoleClient>,
) -> Result<(Vec<rmcp::model::Tool>, usize), rmcp::ServiceError> {
    let wanted = |t: &rmcp::model::Tool| {
        conn.config
            .tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| *o == t.name))
    };
    let mut tools = Vec::new();
    let mut left_out = 0usize;
    let mut cursor = None;
    for page in 1..=MAX_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let listed = peer.list_tools(Some(params)).await?;
        for tool in listed.tools.into_iter().filter(wanted) {
            if tools.len() < MAX_TOOLS {
                tools.push(tool);
            } else {
                left_out += 1;
            }
        }
        cursor = listed.next_cursor;
        if cursor.is_none() || left_out > 0 {
            break;
        }
        if page == MAX_PAGES {
            tracing::warn!(upstream = %conn.name(), pages = MAX_PAGES, "upstream tools/list goes on for more pages than we read; the rest are left out");
            left_out += 1;
        }
    }
    Ok((tools, left_out))
}

fn build(conn: &Arc<Connection>, listed: Vec<rmcp::model::Tool>) -> Vec<Tool> {
    let config = &conn.config;
    let mut tools: Vec<Tool> = listed
        .into_iter()
        .filter_map(|t| serde_json::to_value(t).ok())
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
