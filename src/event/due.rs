//! When an event becomes due: at once, after a delay, or at an instant ([`NewEvent::deliver_after`],
//! [`NewEvent::deliver_at`]).
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::NewEvent;
use crate::error::EventError;

/// When a new event is due, as the write path stores it in `next_retry_time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Due {
    /// The database's now at the insert.
    #[default]
    Now,
    /// The database's now at the insert, plus the delay.
    After(Duration),
    /// This instant, as given.
    At(DateTime<Utc>),
}

impl NewEvent {
    /// The longest delay [`NewEvent::deliver_after`] and [`NewEvent::deliver_at`] accept: 366
    /// days. A due time further out is far more often a unit slip (milliseconds given as
    /// seconds) than a plan, and an event that waits that long belongs in a scheduler.
    pub const MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 60 * 60);

    /// Delays the event: no relay publishes it before `delay` has passed on the database
    /// clock from the insert (`next_retry_time = now + delay`, `now` the database's, so an
    /// application whose clock is off changes nothing). It is published at the first poll, or
    /// wake-up, after that. [`Duration::ZERO`] is due at once, as without a delay.
    ///
    /// A delayed event wakes no relay when it is written. In ordered mode it also holds back
    /// the later events of its key until it is delivered, as an event waiting for its retry
    /// does (see `docs/ordered.md`).
    ///
    /// Checked when the event is written: [`EventError::DelayTooLong`] past
    /// [`NewEvent::MAX_DELAY`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use sea_orm_outbox::NewEvent;
    /// // cancel the order if it is still unpaid in 15 minutes
    /// let event = NewEvent::raw("ORD-1", "ORDER_PAYMENT_DUE", "{}")
    ///     .deliver_after(Duration::from_secs(15 * 60));
    /// ```
    #[must_use]
    pub fn deliver_after(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Delays the event until the instant `at`, stored as given in `next_retry_time` and
    /// compared with the database clock: an instant already past is due at once (one before
    /// the Unix epoch is stored as the epoch, which every backend can store). Use
    /// [`NewEvent::deliver_after`] for a delay counted from the insert; an instant computed
    /// from the application's clock carries that clock's error.
    ///
    /// Checked when the event is written: [`EventError::DelayTooLong`] when `at` is more than
    /// [`NewEvent::MAX_DELAY`] past the application's clock.
    #[must_use]
    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.due = Due::At(at);
        self
    }

    /// When the event is due ([`Due::Now`] unless delayed); an instant before the Unix epoch
    /// as the epoch: Postgres and MySQL/MariaDB refuse instants far enough in the past, and
    /// every instant already past is due at once alike.
    pub(crate) fn due(&self) -> Due {
        match self.due {
            Due::At(at) => Due::At(at.max(DateTime::UNIX_EPOCH)),
            due => due,
        }
    }

    /// Whether the event is not due at its insert, by the application's clock for an instant.
    pub(crate) fn is_delayed(&self) -> bool {
        match self.due {
            Due::Now => false,
            Due::After(d) => !d.is_zero(),
            Due::At(at) => at > Utc::now(),
        }
    }

    /// [`EventError::DelayTooLong`] past [`NewEvent::MAX_DELAY`].
    pub(super) fn check_due(&self) -> Result<(), EventError> {
        let delay = match self.due {
            Due::Now => return Ok(()),
            Due::After(d) => d,
            Due::At(at) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
        };
        if delay > Self::MAX_DELAY {
            return Err(EventError::DelayTooLong {
                // Rounded up: a delay just past the limit must not read as equal to it.
                seconds: delay.as_secs() + u64::from(delay.subsec_nanos() > 0),
                max: Self::MAX_DELAY.as_secs(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_just_past_the_limit_reads_past_it() {
        let e = NewEvent::raw("K", "T", "{}")
            .deliver_after(NewEvent::MAX_DELAY + Duration::from_nanos(1));
        match e.check_due() {
            Err(EventError::DelayTooLong { seconds, max }) => {
                assert!(seconds > max, "{seconds} {max}")
            }
            other => panic!("{other:?}"),
        }
        let exact = NewEvent::raw("K", "T", "{}").deliver_after(NewEvent::MAX_DELAY);
        assert!(exact.check_due().is_ok());
    }

    #[test]
    fn an_instant_before_the_epoch_is_the_epoch() {
        let e = NewEvent::raw("K", "T", "{}").deliver_at(DateTime::<Utc>::MIN_UTC);
        assert_eq!(e.due(), Due::At(DateTime::UNIX_EPOCH));
        assert!(!e.is_delayed());
    }
}
