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

/// Healing of dead letters ([`crate::WorkerConfig::heal_dead_letters`]): a dead letter whose
/// failure was transient ([`crate::FailureKind::Retryable`]: an outage, a busy broker, a
/// timeout that outlasted the retries) is put back to `WAIT`, due at once, after a quiet
/// period, for at most `rounds` rounds.
///
/// Round k (0, 1, ...) of an event comes `quiet × 2^k` after its last failure (its
/// `update_time`, database clock), and gives it one attempt: a healed event that fails again
/// is a dead letter again at once (its retries are used up), one round further. The round is
/// read from the row: a dead letter of used-up retries has `retry_count = max_retries + 1`,
/// and each healing attempt adds one, so `retry_count − (max_retries + 1)` rounds are done.
/// After the last round the event stays `FAIL`, for a person. A permanent failure, an event
/// whose lease expired on every attempt, a delivered event whose `SUCCESS` mark failed, and a
/// `last_error` without a known prefix are never healed.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox::HealPolicy;
/// let p = HealPolicy::default();
/// assert_eq!((p.quiet, p.rounds), (Duration::from_secs(300), 3));
/// assert_eq!(p.wait(2), Duration::from_secs(1200)); // the third round: 20 min after the failure
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealPolicy {
    /// How long a dead letter stays `FAIL` before its first healing (default 5 min); round k
    /// waits `quiet × 2^k`. Longer than a broker's usual restart, short enough that an outage
    /// ends in delivery without a person.
    pub quiet: Duration,
    /// Most healings of one event (default 3: 5, 10 and 20 min after each failure with the
    /// default `quiet`); 1 to 20.
    pub rounds: u32,
}

/// Most rounds a [`HealPolicy`] may have.
pub(crate) const MAX_HEAL_ROUNDS: u32 = 20;

/// Longest wait of a healing round: 7 days.
const MAX_HEAL_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for HealPolicy {
    fn default() -> Self {
        HealPolicy::new(Duration::from_secs(300), 3)
    }
}

impl HealPolicy {
    /// A policy healing a transient dead letter `quiet × 2^k` after its last failure in round
    /// k, at most `rounds` times.
    pub const fn new(quiet: Duration, rounds: u32) -> Self {
        HealPolicy { quiet, rounds }
    }

    /// The wait of round `k` (0 for the first): `quiet × 2^k` after the last failure (at most
    /// `Duration::MAX`).
    pub fn wait(&self, k: u32) -> Duration {
        2u32.checked_pow(k)
            .and_then(|f| self.quiet.checked_mul(f))
            .unwrap_or(Duration::MAX)
    }

    /// Checks the policy.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `quiet` is zero, `rounds` is 0 (turn healing off
    /// with `heal_dead_letters(None)` instead) or over 20, or the last
    /// round's wait (`quiet × 2^(rounds − 1)`) is over 7 days.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |m: String| Err(OutboxError::InvalidConfig(m));
        if self.quiet.is_zero() {
            return bad("heal_dead_letters: quiet must be greater than zero".into());
        }
        if !(1..=MAX_HEAL_ROUNDS).contains(&self.rounds) {
            return bad(format!(
                "heal_dead_letters: rounds must be 1 to {MAX_HEAL_ROUNDS} (to heal no dead \
                 letter, leave heal_dead_letters at None)"
            ));
        }
        if self.wait(self.rounds - 1) > MAX_HEAL_WAIT {
            return bad(format!(
                "heal_dead_letters: the last round waits quiet × 2^(rounds − 1) = {} s after \
                 the failure; at most 7 days: fewer rounds or a shorter quiet",
                self.wait(self.rounds - 1).as_secs()
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

    #[test]
    fn heal_rounds_double_and_are_bounded() {
        let p = HealPolicy::default();
        assert!(p.validate().is_ok());
        let mins = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(
            (p.wait(0), p.wait(1), p.wait(2)),
            (mins(5), mins(10), mins(20))
        );
        assert_eq!(p.wait(40), Duration::MAX);
        for (quiet, rounds, ok) in [
            (Duration::ZERO, 3, false),
            (mins(5), 0, false),
            (Duration::from_millis(1), MAX_HEAL_ROUNDS, true),
            (Duration::from_millis(1), MAX_HEAL_ROUNDS + 1, false),
            (mins(5), 11, true),
            (mins(5), 12, false),
        ] {
            let p = HealPolicy::new(quiet, rounds);
            assert_eq!(p.validate().is_ok(), ok, "{p:?}");
        }
    }
}
