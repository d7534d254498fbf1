//! One integration-test binary for the whole service. Every test gets its own database,
//! so they run in parallel.
//!
//! - `harness`: the test app (replicas and workers in process on a fresh database,
//!   clients per principal), the one HTTP helper (reqwest, bare TCP, the router in
//!   process, SSE), the one process helper (`mcp-tasks` with a scrubbed environment),
//!   fixture builders, JWT keys and tokens.
//! - `protocol`, `attacks`, `properties`: the request path from outside: exact answers to
//!   bad requests, hand-made attacks that must change no task, generated requests.
//! - `auth`: tokens, ownership with real tokens, the limits per principal.
//! - `oauth`, `oauth_suite`: the client's OAuth against a real authorization server
//!   (oidc-provider) and against the conformance suite's own servers.
//! - `cli`: the command-line client in a pseudo-terminal and in scripts.
//! - `console`: the web console over HTTP (sign-in, access, CSRF, actions, live updates)
//!   and in a real browser (chromium over WebDriver).
//! - `push`: listen streams. `store`: the store against PostgreSQL. `workers`: workers in
//!   process. `processes`, `reliability`: real processes killed, restarted and starved of
//!   their database. `cut_off`: workers whose database goes silent (a paused relay) stop
//!   their runs in time, and the long-lived connections notice a dead peer within
//!   seconds. `failover`: a primary stopped under load and its synchronous standby
//!   promoted, with every process given both hosts. `pooler`: behind a real PgBouncer
//!   in transaction mode. `wakeups`: one notification wakes one idle worker process. `smoke`,
//!   `benches`: the demo sequence and the benchmarks still run. `skips`: the optional
//!   groups (Node and PyPI packages, chromium) are skipped, with one line each, where what
//!   they need is missing (`harness::optional`).

mod attacks;
mod auth;
mod benches;
mod cli;
mod clients;
mod connections;
mod console;
mod cut_off;
mod failover;
mod fairness;
mod harness;
mod leader;
mod limits;
mod oauth;
mod oauth_suite;
mod observe;
mod pooler;
mod processes;
mod properties;
mod protocol;
mod push;
mod ready_line;
mod reliability;
mod sessions;
mod skips;
mod smoke;
mod store;
mod upstream;
mod wakeups;
mod workers;
