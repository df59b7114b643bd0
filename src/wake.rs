//! What a worker waits on between rounds: the poll delay; the process-local wake-up of its
//! table ([`crate::local_wake`]), signalled by the writers of the same process on every
//! backend; and where the driver listens (Postgres) also a `LISTEN` on
//! [`crate::driver::WAKE_CHANNEL`], notified by every committed event that keeps
//! [`crate::NewEvent::notify_relays`] on, whichever process wrote it. Polling stays as the
//! safety net; the gauge [`WAKE_LISTENING`] tells whether the `LISTEN` is live.
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio::time::Instant;

use crate::driver::{Driver, Heard, ListenFailure, Listener};
use crate::metrics::WAKE_LISTENING;

/// After a failed self-check, how long the worker polls before it checks again (at DEBUG).
const SELF_CHECK_RETRY: Duration = Duration::from_secs(300);

/// Pause before the second attempt to re-establish a lost `LISTEN` connection (the first is
/// immediate), doubled after each failed attempt.
const RECONNECT_BACKOFF_FIRST: Duration = Duration::from_millis(500);

/// Longest pause between attempts to re-establish a lost `LISTEN` connection.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Whether a worker's wake-on-commit is down, shared by the worker ([`crate::Worker::health`])
/// and its [`Wake`]: down from a failed attempt to listen (or a lost `LISTEN` connection) until
/// the next one that succeeds.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListenState(Arc<AtomicU8>);

impl ListenState {
    /// Not listening and not trying: wake-on-commit off, nothing to listen on, not running.
    const IDLE: u8 = 0;
    /// A `LISTEN` connection whose self-check passed.
    const LISTENING: u8 = 1;
    /// Wake-on-commit is wanted but down: the worker polls.
    const DOWN: u8 = 2;

    /// Whether wake-on-commit is wanted but down.
    pub(crate) fn is_down(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::DOWN
    }

    /// Marks [`WAKE_LISTENING`] as current while the worker listens or tries to (its value is
    /// moved by increments at each change only): a recorder that drops gauges left unchanged
    /// for a while (an idle timeout) keeps it.
    pub(crate) fn touch_gauge(&self) {
        if self.0.load(Ordering::Relaxed) != Self::IDLE {
            metrics::gauge!(WAKE_LISTENING).increment(0.0);
        }
    }

    fn set(&self, state: u8) {
        self.0.store(state, Ordering::Relaxed);
    }
}

/// Why the wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The poll delay passed.
    Timer,
    /// A transaction that wrote events committed, or a `LISTEN` connection was just set up.
    Notified,
    /// The follow-up after a wake-up by notification passed (see [`Wake::wait`]).
    FollowUp,
}

/// What the between-rounds wait rests on.
enum Mode {
    /// Wake-on-commit is off, or the backend cannot notify: the poll delay only.
    Off,
    /// A `LISTEN` connection whose self-check passed (counted in [`WAKE_LISTENING`]).
    Listening(Listener),
    /// Polling until the next attempt to listen, at `retry_at`.
    Polling { retry_at: Instant },
}

/// The between-rounds wait of one worker.
pub(crate) struct Wake {
    /// The pool to listen through.
    db: DatabaseConnection,
    mode: Mode,
    /// Failed attempts since the connection was last lost (or since the start).
    failures: u32,
    /// Whether a `LISTEN` connection was ever up.
    listened: bool,
    /// Whether a failed self-check was logged at WARN already (once per worker run).
    check_warned: bool,
    /// Whether the self-check failed last time.
    check_failed: bool,
    /// The next wait when it is a follow-up (see [`Wake::wait`]).
    next_follow_up: Option<Duration>,
    /// The process-local wake-up of the worker's table; `None` when wake-on-commit is off.
    local: Option<tokio::sync::watch::Receiver<()>>,
    /// What the worker is told of the mode.
    state: ListenState,
}

impl Wake {
    /// When `enabled`, wakes on the process-local signal of `table` (its label) and listens
    /// where the driver can ([`Driver::listens`]); polls otherwise. The first wait connects
    /// (one connection of `db`'s pool), so the first round is not delayed. `state` follows the
    /// mode.
    pub(crate) fn new(
        db: &DatabaseConnection,
        table: &str,
        enabled: bool,
        state: ListenState,
    ) -> Self {
        let listens = Driver::of(db.get_database_backend()).is_some_and(Driver::listens);
        let mode = if enabled && listens {
            Mode::Polling {
                retry_at: Instant::now(),
            }
        } else {
            Mode::Off
        };
        // Registers the gauge at 0 where the worker will listen, so that "not listening" is
        // visible from the start (a worker that only polls by design exports none).
        if matches!(mode, Mode::Polling { .. }) {
            metrics::gauge!(WAKE_LISTENING).increment(0.0);
        }
        state.set(ListenState::IDLE);
        Wake {
            db: db.clone(),
            mode,
            failures: 0,
            listened: false,
            check_warned: false,
            check_failed: false,
            next_follow_up: None,
            local: enabled.then(|| crate::local_wake::subscribe(table)),
            state,
        }
    }

    /// Waits `delay` (±10 %), or less when a local signal or a notification arrives or a
    /// `LISTEN` connection was just (re-)established, which it re-establishes with [`backoff`]
    /// or [`SELF_CHECK_RETRY`]. After a signal or a notification the next waits are follow-ups
    /// ([`crate::config::WAKE_FOLLOW_UP`], doubling while shorter than `delay`): a local signal
    /// comes when the event is written, before its transaction commits, and writers share a
    /// notification ([`crate::NewEvent::notify_interval`]). Cancel-safe.
    pub(crate) async fn wait(&mut self, delay: Duration) -> Woken {
        let follow_up = self.next_follow_up.take().filter(|f| *f < delay);
        let woken = match follow_up {
            // Not spread: it follows a notification, not a timer that workers share.
            Some(f) => match self.wait_until(Instant::now() + f).await {
                Woken::Timer => {
                    self.next_follow_up = Some(f.saturating_mul(2));
                    Woken::FollowUp
                }
                other => other,
            },
            // Spread so that workers started together do not poll in lockstep.
            None => {
                self.wait_until(Instant::now() + crate::retry::jitter(delay))
                    .await
            }
        };
        if woken == Woken::Notified {
            self.next_follow_up = Some(crate::config::WAKE_FOLLOW_UP);
        }
        woken
    }

    /// [`Wake::wait`] until `deadline` (a local signal, a notification or a new `LISTEN`
    /// connection ends it earlier).
    async fn wait_until(&mut self, deadline: Instant) -> Woken {
        // A clone waits, so that a wait dropped half-way leaves the worker's receiver as it was
        // (a signal it has not seen stays unseen); once woken, the receiver has seen them all.
        let Some(mut local) = self.local.clone() else {
            return self.wait_remote(deadline).await;
        };
        let woken = tokio::select! {
            woken = self.wait_remote(deadline) => woken,
            Ok(()) = local.changed() => Woken::Notified,
        };
        if woken == Woken::Notified {
            if let Some(local) = &mut self.local {
                local.mark_unchanged();
            }
        }
        woken
    }

    /// [`Wake::wait_until`] but for the local signal.
    async fn wait_remote(&mut self, deadline: Instant) -> Woken {
        loop {
            let retry_at = match &mut self.mode {
                Mode::Polling { retry_at } if *retry_at < deadline => *retry_at,
                Mode::Listening(listener) => {
                    let lost = match listener.wait_until(deadline).await {
                        Ok(Heard::Timer) => return Woken::Timer,
                        Ok(Heard::Notified) => return Woken::Notified,
                        Err(lost) => lost,
                    };
                    tracing::warn!(
                        error = %lost,
                        "LISTEN connection lost: wake-on-commit is down; re-connecting, \
                         polling meanwhile"
                    );
                    metrics::gauge!(WAKE_LISTENING).increment(-1.0);
                    self.state.set(ListenState::DOWN);
                    // Dropping the listener does not wait, not even on a half-open connection
                    // (see `Listener`). The first retry is immediate: after a failover the
                    // database is usually reachable.
                    self.mode = Mode::Polling {
                        retry_at: Instant::now(),
                    };
                    self.failures = 0;
                    Instant::now()
                }
                // Off, or the next attempt is not before the deadline.
                _ => {
                    tokio::time::sleep_until(deadline).await;
                    return Woken::Timer;
                }
            };
            tokio::time::sleep_until(retry_at).await;
            if self.attempt().await {
                return Woken::Notified;
            }
        }
    }

    /// One attempt to listen (connect, `LISTEN`, self-check); logs and records its outcome and
    /// sets the mode. Returns whether the worker listens now.
    async fn attempt(&mut self) -> bool {
        let pause = match Listener::open(&self.db).await {
            Ok(listener) => {
                if self.check_failed {
                    tracing::info!(
                        "LISTEN self-check passed: wake-on-commit is live again, a commit \
                         wakes the worker at once"
                    );
                } else if self.listened || self.failures > 0 {
                    tracing::info!(
                        failed_attempts = self.failures,
                        "LISTEN connection established: wake-on-commit is live again; \
                         claiming the events committed meanwhile"
                    );
                } else {
                    tracing::debug!("listening for committed events");
                }
                self.mode = Mode::Listening(listener);
                metrics::gauge!(WAKE_LISTENING).increment(1.0);
                self.state.set(ListenState::LISTENING);
                self.failures = 0;
                self.listened = true;
                self.check_failed = false;
                return true;
            }
            Err(ListenFailure::Unreachable(error)) => {
                self.failures += 1;
                let pause = backoff(self.failures);
                if self.failures == 1 {
                    tracing::warn!(
                        %error,
                        retry_in_ms = pause.as_millis() as u64,
                        "cannot LISTEN for committed events; polling, retrying with back-off"
                    );
                } else {
                    tracing::debug!(
                        %error,
                        failed_attempts = self.failures,
                        retry_in_ms = pause.as_millis() as u64,
                        "cannot LISTEN for committed events yet"
                    );
                }
                pause
            }
            Err(failure) => {
                let reason = match failure {
                    ListenFailure::SharedBackends => {
                        "two connections of the pool were served by one server backend: a \
                         pooler in transaction mode (PgBouncer?); no LISTEN was sent. Through \
                         such a pooler the relay's prepared statements fail too: configure \
                         statement_protocol(Simple) (`outbox relay --statement-protocol \
                         simple`), or give each client a server connection of its own (PgBouncer \
                         pool_mode)"
                    }
                    _ => {
                        "a NOTIFY sent through the pool did not reach the LISTEN connection \
                         within 2 s (a pooler in transaction mode, or a read replica?)"
                    }
                };
                let recheck_in_s = SELF_CHECK_RETRY.as_secs();
                if !self.check_warned {
                    tracing::warn!(
                        reason,
                        recheck_in_s,
                        "LISTEN self-check failed: wake-on-commit is off, the worker polls \
                         (`wake_on_commit(false)` skips the check)"
                    );
                    self.check_warned = true;
                } else {
                    tracing::debug!(reason, recheck_in_s, "LISTEN self-check failed again");
                }
                self.check_failed = true;
                self.failures = 0;
                SELF_CHECK_RETRY
            }
        };
        self.mode = Mode::Polling {
            retry_at: Instant::now() + pause,
        };
        self.state.set(ListenState::DOWN);
        false
    }
}

impl Drop for Wake {
    /// A stopped worker no longer counts as listening.
    fn drop(&mut self) {
        if matches!(self.mode, Mode::Listening(_)) {
            metrics::gauge!(WAKE_LISTENING).increment(-1.0);
        }
        self.state.set(ListenState::IDLE);
    }
}

/// The pause after `failures` failed attempts to re-establish a lost `LISTEN` connection:
/// [`RECONNECT_BACKOFF_FIRST`] doubled per further failure, at most [`RECONNECT_BACKOFF_MAX`],
/// spread by ±10 %.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let pause = RECONNECT_BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(RECONNECT_BACKOFF_MAX);
    crate::retry::jitter(pause)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        let d = std::time::Duration::from_millis(1000);
        for _ in 0..100 {
            let j = crate::retry::jitter(d).as_millis();
            assert!((900..=1100).contains(&j), "{j}");
        }
    }

    #[test]
    fn reconnect_backoff_doubles_up_to_its_bound() {
        let ms = |n| backoff(n).as_millis();
        assert!((450..=550).contains(&ms(1)), "{}", ms(1));
        assert!((900..=1100).contains(&ms(2)), "{}", ms(2));
        assert!((1800..=2200).contains(&ms(3)), "{}", ms(3));
        for n in [7, 8, 20, u32::MAX] {
            assert!((27_000..=33_000).contains(&ms(n)), "{n}: {}", ms(n));
        }
    }
}
