//! `mcp-tasks bench`: measurements that print ratios against a baseline taken in the
//! same run, because the machines they run on are shared and noisy.

mod baseline;
mod console;
mod create_get;
mod env;
mod fairness;
mod finished;
mod lifecycle;
mod load;
pub mod notify_cost;
mod pgbench;
mod pooler;
pub mod push;
mod scale;
pub mod scenarios;
mod scratch;
mod service;
mod stats;
mod wrk;
