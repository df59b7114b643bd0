//! Retry limit and back-off.
use std::time::Duration;

use crate::error::{OutboxError, PublishError};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum RetryDecision {
    /// Back to `WAIT`, due after this back-off.
    Retry(Duration),
    /// Back to `WAIT`, due after this delay, the attempt not counted: the publisher's own
    /// configuration or permissions failed ([`crate::PublishErrorKind::Configuration`]).
    Uncounted(Duration),
    /// Retries exhausted, or a permanent failure: `FAIL` (dead letter).
    DeadLetter,
}

/// Longest wait after a configuration fault: the policy's longest back-off, at most this, so
/// that a fixed configuration is picked up soon.
const MAX_CONFIG_FAULT_DELAY: Duration = Duration::from_secs(60);

/// Quadratic back-off with a retry limit: after the n-th failed attempt the event waits
/// n² × `backoff_base` (5 s, 20 s, 45 s, ...), capped at `max_backoff`; the
/// failure that makes n greater than `max_retries` (the 13th with the default 12) turns it into
/// a dead letter.
///
/// The default rides out a broker outage of [`RetryPolicy::budget`] (52 min 5 s). A failure
/// the publisher calls permanent is a dead letter at once, whatever the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries allowed after the first attempt (default 12).
    pub max_retries: u32,
    /// Back-off unit (default 5 s).
    pub backoff_base: Duration,
    /// Upper bound of one back-off (default 10 min): after a long outage an event is tried
    /// again at most this long after the broker came back.
    pub max_backoff: Duration,
}

/// `delay` spread by up to ±10% at random, so that instances started together do not poll or
/// retry in lockstep.
pub(crate) fn jitter(delay: Duration) -> Duration {
    let r = uuid::Uuid::new_v4().as_u128() as u64 % 2001; // 0..=2000
    delay.mul_f64(0.9 + r as f64 / 10_000.0)
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new(12, Duration::from_secs(5), Duration::from_secs(600))
    }
}

impl RetryPolicy {
    /// A policy allowing `max_retries` retries after the first attempt, waiting n² ×
    /// `backoff_base` after the n-th failure, at most `max_backoff`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = sea_orm_outbox::RetryPolicy::new(12, Duration::from_secs(5), Duration::from_secs(600));
    /// assert_eq!((p.max_retries, p.backoff(2)), (12, Duration::from_secs(20)));
    /// ```
    pub const fn new(max_retries: u32, backoff_base: Duration, max_backoff: Duration) -> Self {
        RetryPolicy {
            max_retries,
            backoff_base,
            max_backoff,
        }
    }

    /// The back-off after the `n`-th failed attempt: n² × base, at most `max_backoff`.
    pub fn backoff(&self, n: u32) -> Duration {
        self.backoff_base
            .checked_mul(n.saturating_mul(n))
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }

    /// The longest outage the policy rides out: the sum of the back-offs of all `max_retries`
    /// retries, from the first failed attempt to the last retry (52 min 5 s for the default).
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = sea_orm_outbox::RetryPolicy::default();
    /// assert_eq!(p.budget(), Duration::from_secs(52 * 60 + 5));
    /// ```
    pub fn budget(&self) -> Duration {
        (1..=self.max_retries).fold(Duration::ZERO, |sum, n| sum.saturating_add(self.backoff(n)))
    }

    /// The decision after `err` failed the `n`-th attempt (n = `retry_count` + 1).
    pub(crate) fn decide(&self, n: u32, err: &PublishError) -> RetryDecision {
        if err.is_configuration() {
            RetryDecision::Uncounted(self.max_backoff.min(MAX_CONFIG_FAULT_DELAY))
        } else if n > self.max_retries || !err.is_retryable() {
            RetryDecision::DeadLetter
        } else {
            RetryDecision::Retry(self.backoff(n))
        }
    }

    /// Checks the policy.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `max_backoff` is smaller than `backoff_base`.
    /// ([`crate::WorkerConfig::validate`] also refuses either over 7 days.)
    pub fn validate(&self) -> Result<(), OutboxError> {
        if self.max_backoff < self.backoff_base {
            return Err(OutboxError::InvalidConfig(
                "retry.max_backoff must not be smaller than retry.backoff_base".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_backoff() {
        let p = RetryPolicy::default();
        let e = PublishError::retryable("broker down");
        let secs = |s| RetryDecision::Retry(Duration::from_secs(s));
        assert_eq!(p.decide(1, &e), secs(5));
        assert_eq!(p.decide(2, &e), secs(20));
        assert_eq!(p.decide(3, &e), secs(45));
        assert_eq!(p.decide(10, &e), secs(500));
        assert_eq!(p.decide(11, &e), secs(600));
        assert_eq!(p.decide(12, &e), secs(600));
        assert_eq!(p.decide(13, &e), RetryDecision::DeadLetter);
        let permanent = PublishError::permanent("bad payload");
        assert_eq!(p.decide(1, &permanent), RetryDecision::DeadLetter);
        let denied = PublishError::configuration("access denied");
        let uncounted = RetryDecision::Uncounted(Duration::from_secs(60));
        assert_eq!(p.decide(13, &denied), uncounted);
        assert_eq!(p.backoff(1000), Duration::from_secs(600));
        // A broker outage of 30 minutes leaves no dead letter.
        assert!(p.budget() >= Duration::from_secs(30 * 60));
    }
}
