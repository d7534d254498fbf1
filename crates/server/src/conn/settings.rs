//! Connection-level settings, and how many client connections the open-file limit allows.

use std::time::Duration;

/// Descriptors a replica needs besides its database pool and its client connections:
/// stdio, the listening socket, the runtime's epoll and wake-up descriptors, JWKS
/// fetches and their DNS lookups, a connection being accepted.
const PROCESS_FDS: usize = 64;

/// LISTEN connections outside the pool: the push hub's, a replacement being opened while
/// the old one closes, and (in `dev`) the worker's.
const LISTEN_FDS: usize = 3;

/// Connections past the cap that are still answered (health probes; a 503 for anything
/// else) before new ones are closed unanswered. Counted against the file limit too.
pub(crate) const OVERFLOW_CONNECTIONS: usize = 32;

/// Fewer client connections than this leaves a replica unable to do its job.
const MIN_CONNECTIONS: usize = 8;

/// How a replica treats connections and requests at the transport level.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Most client connections served at once. `None`: as many as the open-file limit
    /// leaves after the reserve for the database and the process.
    pub max_connections: Option<usize>,
    /// How long a request's head may take to arrive in full, from its first byte (from
    /// the accept, on a new connection).
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive in full, once its head is in.
    pub body_timeout: Duration,
    /// How long a connection may stay open with no request in progress, or with a client
    /// that reads nothing of its answers.
    pub idle_timeout: Duration,
    /// Longest a request may take from its head to its answer; not counting the stream
    /// that follows a `subscriptions/listen` answer.
    pub request_timeout: Duration,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`, in bytes.
    pub h2_max_header_list_bytes: u32,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            max_connections: None,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(65),
            request_timeout: Duration::from_secs(90),
            h2_max_concurrent_streams: 100,
            h2_max_header_list_bytes: 16 * 1024,
        }
    }
}

/// The connection cap a replica runs with, and what it was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimit {
    /// Client connections served at once.
    pub max_connections: usize,
    /// The soft `RLIMIT_NOFILE`; `None` when unlimited or unknown.
    pub file_limit: Option<u64>,
    /// Descriptors kept from clients (database pool, LISTEN connections, the process).
    pub reserved: usize,
}

impl ConnectionConfig {
    /// The cap for a replica whose pool opens at most `pool_connections`, checked against
    /// the process's open-file limit.
    pub fn limit(&self, pool_connections: u32) -> Result<ConnectionLimit, String> {
        Self::limit_within(self.max_connections, pool_connections, soft_file_limit())
    }

    fn limit_within(
        requested: Option<usize>,
        pool_connections: u32,
        file_limit: Option<u64>,
    ) -> Result<ConnectionLimit, String> {
        let reserved = pool_connections as usize + LISTEN_FDS + PROCESS_FDS;
        let available = file_limit.map(|limit| {
            usize::try_from(limit)
                .unwrap_or(usize::MAX)
                .saturating_sub(reserved + OVERFLOW_CONNECTIONS)
        });
        let why = |limit: u64| {
            format!(
                "the open-file limit is {limit}: {reserved} descriptors are kept for the database pool \
                 ({pool_connections}), LISTEN connections and the process, and {OVERFLOW_CONNECTIONS} for \
                 answering connections past the cap"
            )
        };
        let max_connections = match (requested, available, file_limit) {
            (Some(0), _, _) => return Err("the connection cap must be at least 1".into()),
            (Some(n), Some(room), Some(limit)) if n > room => {
                return Err(format!(
                    "a cap of {n} connections does not fit: {}; lower the cap to {room} or raise the limit (ulimit -n)",
                    why(limit)
                ));
            }
            (Some(n), _, _) => n,
            (None, Some(room), Some(limit)) if room < MIN_CONNECTIONS => {
                return Err(format!(
                    "only {room} connections would be left for clients: {}; raise the limit (ulimit -n)",
                    why(limit)
                ));
            }
            (None, Some(room), _) => room,
            // No file limit to respect: a cap still bounds memory and tasks.
            (None, None, _) => 1 << 20,
        };
        Ok(ConnectionLimit {
            max_connections,
            file_limit,
            reserved,
        })
    }
}

fn soft_file_limit() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft != RLIM_INFINITY => Some(soft),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the open-file limit");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_is_what_the_file_limit_leaves() {
        let l = ConnectionConfig::limit_within(None, 16, Some(1024)).expect("fits");
        assert_eq!(l.reserved, 16 + LISTEN_FDS + PROCESS_FDS);
        assert_eq!(
            l.max_connections,
            1024 - l.reserved - OVERFLOW_CONNECTIONS,
            "{l:?}"
        );
    }

    #[test]
    fn a_cap_that_does_not_fit_is_refused_and_says_what_would() {
        let room = 1024 - (16 + LISTEN_FDS + PROCESS_FDS) - OVERFLOW_CONNECTIONS;
        let e =
            ConnectionConfig::limit_within(Some(room + 1), 16, Some(1024)).expect_err("too many");
        assert!(e.contains(&format!("lower the cap to {room}")), "{e}");
        assert!(e.contains("1024"), "{e}");
        let ok = ConnectionConfig::limit_within(Some(room), 16, Some(1024)).expect("fits");
        assert_eq!(ok.max_connections, room);
    }

    #[test]
    fn a_file_limit_too_low_for_the_pool_is_refused() {
        let e = ConnectionConfig::limit_within(None, 64, Some(128)).expect_err("too low");
        assert!(e.contains("ulimit -n"), "{e}");
        assert!(ConnectionConfig::limit_within(Some(0), 16, None).is_err());
        assert_eq!(
            ConnectionConfig::limit_within(Some(5), 16, None)
                .expect("no limit")
                .max_connections,
            5
        );
    }
}
