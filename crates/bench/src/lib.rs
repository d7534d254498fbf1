//! `mcp-tasks bench`: measurements that print ratios against a baseline taken in the
//! same run, because the machines they run on are shared and noisy.

pub mod notify_cost;
pub mod push;
mod scratch;
mod stats;
