//! Per-principal request rate, and the size of JSON values a request may carry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mcp_tasks_store::Owner;
use serde_json::Value;

/// A token bucket per principal: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: f64,
}

impl Default for RateLimit {
    /// Generous enough for any client that polls at `pollIntervalMs`, or polls several
    /// tasks from 20 ms up while backing off.
    fn default() -> Self {
        Self {
            per_second: 100.0,
            burst: 300.0,
        }
    }
}

struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// Buckets beyond this many are pruned of the idle (full) ones.
const MAX_IDLE_BUCKETS: usize = 10_000;

pub(crate) struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<Owner, Bucket>>,
}

impl RateLimiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one token for `owner`, or says how long until one is available.
    pub(crate) fn check(&self, owner: &Owner, now: Instant) -> Result<(), Duration> {
        let RateLimit { per_second, burst } = self.limit;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > MAX_IDLE_BUCKETS && !buckets.contains_key(owner) {
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.updated).as_secs_f64() * per_second < burst
            });
        }
        let bucket = buckets.entry(owner.clone()).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        let refill = now.duration_since(bucket.updated).as_secs_f64() * per_second;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
        }
    }
}

/// The size of `value` serialized, without building the serialization.
pub(crate) fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(p: &str) -> Owner {
        Owner::new("t", p)
    }

    #[test]
    fn bursts_then_refills_per_principal() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10.0,
            burst: 3.0,
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check(&owner("a"), t0).is_ok());
        }
        let wait = limiter.check(&owner("a"), t0).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // Another principal has its own bucket.
        assert!(limiter.check(&owner("b"), t0).is_ok());
        // A tenth of a second later one token is back.
        assert!(
            limiter
                .check(&owner("a"), t0 + Duration::from_millis(100))
                .is_ok()
        );
        assert!(
            limiter
                .check(&owner("a"), t0 + Duration::from_millis(100))
                .is_err()
        );
    }

    #[test]
    fn a_client_polling_from_20ms_with_backoff_is_never_throttled() {
        let limiter = RateLimiter::new(RateLimit::default());
        let mut t = Instant::now();
        // Four tasks polled together, backing off from 20 ms to 1 s.
        let mut every = Duration::from_millis(20);
        for _ in 0..200 {
            for _ in 0..4 {
                assert!(limiter.check(&owner("poller"), t).is_ok());
            }
            t += every;
            every = (every * 5 / 4).min(Duration::from_secs(1));
        }
    }

    #[test]
    fn sizes_json() {
        assert_eq!(
            json_size(&serde_json::json!({"a":[1,2]})),
            r#"{"a":[1,2]}"#.len()
        );
    }
}
