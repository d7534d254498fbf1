//! LISTEN/NOTIFY channels. Notifications are hints that carry ids at most; whoever
//! receives one re-reads the database, and everyone also polls as a backstop, so a lost
//! notification only costs latency.

/// Something may be claimable: a task was created, resumed after input, or released.
/// The payload is empty, so PostgreSQL folds repeats within a transaction into one.
pub const RUNNABLE: &str = "mcp_tasks_runnable";

/// Cancellation was requested for a leased task; the payload is its id.
pub const CANCEL: &str = "mcp_tasks_cancel";
