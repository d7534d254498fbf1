//! Conditions that can repeat thousands of times a second (accept errors, refusals at
//! the cap): logged when they start, every minute while they last, and when they end,
//! with how many times they happened; never once per occurrence.

use std::time::Duration;

use tokio::time::Instant;

pub(super) struct Burst {
    what: &'static str,
    count: u64,
    since: Option<Instant>,
    last_hit: Option<Instant>,
    logged: Option<Instant>,
    pause: Duration,
}

impl Burst {
    const FIRST_PAUSE: Duration = Duration::from_millis(10);
    const MAX_PAUSE: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(60);
    /// A burst is over once this has passed since its last occurrence, so a condition
    /// that comes and goes (refusals between admissions at the cap) is one burst, not a
    /// log line each way.
    const QUIET: Duration = Duration::from_secs(1);

    pub(super) fn new(what: &'static str) -> Self {
        Self {
            what,
            count: 0,
            since: None,
            last_hit: None,
            logged: None,
            pause: Self::FIRST_PAUSE,
        }
    }

    /// Counts one occurrence; returns how long to back off before trying again: from
    /// 10 ms, doubling up to 1 s while the burst lasts. Without jitter (not `Backoff`):
    /// the pause is this process's own accept loop waiting out its own condition (out of
    /// file descriptors, at the connection cap); there are no peers retrying in step.
    pub(super) fn hit(&mut self, detail: &str) -> Duration {
        let now = Instant::now();
        if self.is_quiet(now) {
            self.finish(now);
        }
        self.count += 1;
        self.last_hit = Some(now);
        if self.since.is_none() {
            self.since = Some(now);
            self.pause = Self::FIRST_PAUSE;
            self.logged = Some(now);
            tracing::warn!(%detail, "{}", self.what);
        } else {
            self.pause = (self.pause * 2).min(Self::MAX_PAUSE);
            if self
                .logged
                .is_some_and(|at| now.duration_since(at) >= Self::LOG_EVERY)
            {
                self.logged = Some(now);
                tracing::warn!(%detail, times = self.count, "{} (still)", self.what);
            }
        }
        self.pause
    }

    /// The condition did not occur this time: the burst ends if it has been quiet.
    pub(super) fn end(&mut self) {
        let now = Instant::now();
        if self.is_quiet(now) {
            self.finish(now);
        }
    }

    fn is_quiet(&self, now: Instant) -> bool {
        self.since.is_some()
            && self
                .last_hit
                .is_some_and(|at| now.duration_since(at) >= Self::QUIET)
    }

    fn finish(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            let lasted = self.last_hit.unwrap_or(now).duration_since(since);
            tracing::warn!(
                times = self.count,
                lasted_ms = u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX),
                "{}: over, after {} times",
                self.what,
                self.count
            );
        }
        self.count = 0;
        self.logged = None;
        self.pause = Self::FIRST_PAUSE;
    }

    #[cfg(test)]
    fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_second_and_a_burst_ends_only_when_quiet() {
        let mut b = Burst::new("test");
        let pauses: Vec<u128> = (0..10).map(|_| b.hit("x").as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        b.end();
        assert_eq!(
            b.count(),
            10,
            "a success right after a failure does not end it"
        );
        assert_eq!(b.hit("x").as_millis(), 1000);
        b.last_hit = Some(Instant::now() - Burst::QUIET);
        b.end();
        assert_eq!(b.count(), 0, "quiet for a second: over");
        assert_eq!(
            b.hit("x").as_millis(),
            10,
            "a new burst backs off from the start"
        );
    }
}
