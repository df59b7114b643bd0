//! The per-process gate in front of the notify slot's lock attempt (Postgres; see
//! [`crate::NewEvent::notify_process_window`]).
//!
//! Every debounced insert used to try the slot's advisory lock (`pg_try_advisory_xact_lock`): a
//! lock-manager round on one lock key that all writers of the database share. Within a burst
//! that attempt almost always fails (the slot's holder is still open), so the gate skips it for
//! the inserts that start less than the window after the start of a try of the same process
//! that returned from the same database: at most about one try per window and process reaches
//! the database.
//!
//! The database is told apart by a number the insert returns with its id
//! ([`IDENTITY_SQL`]: a hash of the database's name and the server's start time), because a
//! connection does not say which database it reaches before it is asked. Only tries that
//! returned count (a try still in flight, failed or cancelled may have gone to another database,
//! or nowhere). A skipping insert carries the gate's database as a parameter and, when it
//! reaches another one, tries the slot in the same statement after all; the gate then turns off
//! for the process for good (with an INFO log), so that several databases written by one process
//! never silence one another.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

/// The expression naming the database an insert reached: `hashtextextended` (Postgres 11+) of
/// the database's name, seeded with the server's start time in microseconds since 1970 (a
/// restarted or other server gives another number; the session's time zone plays no part).
pub(crate) const IDENTITY_SQL: &str = "hashtextextended(current_database()::text, \
     (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint)";

/// The column of the insert's `RETURNING` list that carries [`IDENTITY_SQL`].
pub(crate) const IDENTITY_COLUMN: &str = "outbox_db";

/// What the gate lets one insert do about the slot's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The gate is off (or the event has no window): the insert tries the lock as before, and
    /// returns no identity.
    Bypass,
    /// The insert tries the lock (and notifies when it gets it) and returns the database's
    /// identity; `started` is to be handed to [`NotifyGate::attempted`] when it returns.
    Attempt {
        /// When the try started (the gate's clock).
        started: u64,
    },
    /// A try of this process that returned from database `db` started less than the window
    /// ago: the insert skips the lock unless it reaches another database than `db`, and
    /// returns the database's identity, to be checked with [`NotifyGate::skipped`].
    Skip {
        /// The gate's database.
        db: i64,
    },
}

/// The gate's state for one process (see the module's documentation).
#[derive(Debug)]
pub(crate) struct NotifyGate {
    origin: Instant,
    /// When the latest try that returned from the gate's database started: nanoseconds after
    /// `origin`, plus one (0: none yet).
    confirmed: AtomicU64,
    /// The database the tries reached, from the first one that returned.
    db: OnceLock<i64>,
    /// Set for good once inserts of this process reached a second database.
    off: AtomicBool,
}

/// The process's gate.
pub(crate) static GATE: LazyLock<NotifyGate> = LazyLock::new(NotifyGate::new);

impl NotifyGate {
    pub(crate) fn new() -> Self {
        NotifyGate {
            origin: Instant::now(),
            confirmed: AtomicU64::new(0),
            db: OnceLock::new(),
            off: AtomicBool::new(false),
        }
    }

    /// `at` on the gate's clock (never 0).
    fn stamp(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX - 1)
            + 1
    }

    /// What an insert with the skip window `window` may do at `now`.
    pub(crate) fn decide(&self, window: Duration, now: Instant) -> Decision {
        if window.is_zero() || self.off.load(Ordering::Relaxed) {
            return Decision::Bypass;
        }
        let at = self.stamp(now);
        let confirmed = self.confirmed.load(Ordering::Acquire);
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        match self.db.get() {
            Some(&db) if confirmed != 0 && at.saturating_sub(confirmed) < window_ns => {
                Decision::Skip { db }
            }
            _ => Decision::Attempt { started: at },
        }
    }

    /// A try that started at `started` returned from the database `db`: the first one names the
    /// gate's database; another database turns the gate off (the try itself followed the slot's
    /// rule).
    pub(crate) fn attempted(&self, db: i64, started: u64) {
        if *self.db.get_or_init(|| db) == db {
            self.confirmed.fetch_max(started, Ordering::Release);
        } else {
            self.turn_off();
        }
    }

    /// A skipping insert reached the database `db`: when that is not the gate's database (the
    /// insert then tried the slot itself, in the same statement), the gate turns off for good.
    pub(crate) fn skipped(&self, db: i64) {
        if self.db.get() != Some(&db) {
            self.turn_off();
        }
    }

    fn turn_off(&self) {
        if !self.off.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "outbox: event inserts of this process reached a second Postgres database (or the \
                 server restarted): from now on every insert tries the notify slot itself \
                 (NewEvent::notify_process_window is off for the process)"
            );
        }
    }

    /// Whether the gate is off for good.
    #[cfg(test)]
    fn is_off(&self) -> bool {
        self.off.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn started(d: Decision) -> u64 {
        match d {
            Decision::Attempt { started } => started,
            other => panic!("expected an attempt, got {other:?}"),
        }
    }

    #[test]
    fn skips_only_within_the_window_of_a_try_that_returned() {
        let gate = NotifyGate::new();
        let t0 = gate.origin;
        let first = started(gate.decide(MS, t0));
        // Nothing has returned yet: the database is unknown, so nothing is skipped.
        let second = started(gate.decide(MS, t0 + Duration::from_micros(100)));
        gate.attempted(7, first);
        assert_eq!(
            gate.decide(MS, t0 + Duration::from_micros(300)),
            Decision::Skip { db: 7 }
        );
        gate.skipped(7);
        // The window counts from the start of the latest try that returned.
        assert_eq!(
            gate.decide(MS, t0 + Duration::from_micros(999)),
            Decision::Skip { db: 7 }
        );
        let third = started(gate.decide(MS, t0 + MS));
        gate.attempted(7, second);
        assert_eq!(
            gate.decide(MS, t0 + Duration::from_micros(1_050)),
            Decision::Skip { db: 7 }
        );
        // A try that returns late does not move the window back.
        gate.attempted(7, third);
        gate.attempted(7, first);
        assert_eq!(
            gate.decide(MS, t0 + Duration::from_micros(1_900)),
            Decision::Skip { db: 7 }
        );
        assert!(matches!(
            gate.decide(MS, t0 + 3 * MS),
            Decision::Attempt { .. }
        ));
        assert!(!gate.is_off());
    }

    #[test]
    fn a_try_that_never_returns_lets_nothing_skip() {
        let gate = NotifyGate::new();
        let t0 = gate.origin;
        let first = started(gate.decide(MS, t0));
        gate.attempted(1, first);
        // A later try fails or is cancelled: it is never confirmed.
        let _lost = started(gate.decide(MS, t0 + 2 * MS));
        assert!(matches!(
            gate.decide(MS, t0 + 2 * MS + Duration::from_micros(10)),
            Decision::Attempt { .. }
        ));
    }

    #[test]
    fn a_zero_window_bypasses_the_gate() {
        let gate = NotifyGate::new();
        let t0 = gate.origin;
        assert_eq!(gate.decide(Duration::ZERO, t0), Decision::Bypass);
        let first = started(gate.decide(MS, t0));
        gate.attempted(1, first);
        assert_eq!(gate.decide(Duration::ZERO, t0), Decision::Bypass);
        assert_eq!(gate.decide(MS, t0), Decision::Skip { db: 1 });
    }

    #[test]
    fn a_skip_that_reaches_another_database_turns_the_gate_off() {
        let gate = NotifyGate::new();
        let t0 = gate.origin;
        let first = started(gate.decide(MS, t0));
        gate.attempted(1, first);
        assert_eq!(gate.decide(MS, t0), Decision::Skip { db: 1 });
        gate.skipped(2);
        assert!(gate.is_off());
        assert_eq!(gate.decide(MS, t0), Decision::Bypass);
    }

    #[test]
    fn a_try_that_reaches_another_database_turns_the_gate_off() {
        let gate = NotifyGate::new();
        let t0 = gate.origin;
        let (a, b) = (started(gate.decide(MS, t0)), started(gate.decide(MS, t0)));
        gate.attempted(1, a);
        gate.attempted(2, b);
        assert!(gate.is_off());
        assert_eq!(
            gate.decide(MS, t0 + Duration::from_micros(10)),
            Decision::Bypass
        );
    }
}
