//! One integration-test binary for the whole service. Every test gets its own database,
//! so they run in parallel.

mod benches;
mod harness;
mod leases;
mod processes;
mod protocol;
mod push;
mod smoke;
