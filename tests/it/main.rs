//! One integration-test binary for the whole service. Every test gets its own database,
//! so they run in parallel.

mod attacks;
mod auth;
mod benches;
mod clients;
mod end_reasons;
mod events;
mod harness;
mod leases;
mod processes;
mod properties;
mod protocol;
mod push;
mod reliability;
mod sessions;
mod smoke;
