//! The pause before trying again after a failure, shared by every retry loop.
//!
//! The pause doubles from `first` up to `max`, and each one is drawn from the upper half of
//! its step ("equal jitter"): replicas and workers that lost the same database or upstream
//! at the same moment spread their retries out instead of arriving together, while no pause
//! is shorter than half its step (no hammering) nor longer than `max` (no slower recovery).
//!
//! A plain value, not a retry combinator: the loops that use it wait in `select!` with
//! their cancellation, reset it on success, and some report the pause before taking it.
//! It only computes durations (no timer, no I/O), so it lives in the crate every other
//! depends on.

use std::time::Duration;

/// Doubling pauses with jitter; see the module's documentation.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    /// Pauses from `first` (at most), doubling to `max` (at most). `first` above `max` is
    /// taken as `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        let first = if first.as_nanos() > max.as_nanos() {
            max
        } else {
            first
        };
        Self {
            first,
            max,
            step: first,
        }
    }

    /// The pause to take now, in `[step / 2, step]`; the next step is twice this one's,
    /// up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = step.saturating_mul(2).min(self.max);
        step.mul_f64(rand::random_range(0.5..=1.0))
    }

    /// The last attempt succeeded: the next failure starts again from `first`.
    pub fn reset(&mut self) {
        self.step = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pauses_double_within_half_their_step_and_never_pass_the_max() {
        for _ in 0..200 {
            let mut b = Backoff::new(100 * MS, 5000 * MS);
            let mut step = 100 * MS;
            for _ in 0..20 {
                let d = b.next_delay();
                assert!(
                    d >= step / 2 && d <= step,
                    "{d:?} outside [{step:?}/2, {step:?}]"
                );
                assert!(d <= 5000 * MS);
                step = (step * 2).min(5000 * MS);
            }
        }
    }

    #[test]
    fn the_pauses_are_spread_out() {
        let mut seen: Vec<Duration> = (0..50)
            .map(|_| Backoff::new(1000 * MS, 1000 * MS).next_delay())
            .collect();
        seen.sort();
        seen.dedup();
        assert!(seen.len() > 10, "{seen:?}");
        assert!(
            seen[0] < 900 * MS && seen[seen.len() - 1] > 600 * MS,
            "{seen:?}"
        );
    }

    #[test]
    fn reset_starts_again_from_the_first() {
        let mut b = Backoff::new(200 * MS, 10_000 * MS);
        for _ in 0..10 {
            b.next_delay();
        }
        assert!(b.next_delay() >= 5000 * MS);
        b.reset();
        let d = b.next_delay();
        assert!(d >= 100 * MS && d <= 200 * MS, "{d:?}");
    }

    #[test]
    fn a_first_above_the_max_is_the_max() {
        let mut b = Backoff::new(3000 * MS, 2000 * MS);
        assert!(b.next_delay() <= 2000 * MS);
    }
}
