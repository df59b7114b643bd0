//! What a worker waits on between rounds: the poll delay, and on Postgres also a `LISTEN` on
//! [`crate::store::dialect::WAKE_CHANNEL`], notified by every committed
//! [`crate::OutboxExt::with_event`] whose event keeps [`crate::NewEvent::notify_relays`] on.
//! Polling stays as the safety net: a notification lost while the listener reconnects only
//! delays an event until the next poll (and not even that: a round follows every reconnect).
//!
//! The listener watches its own health:
//! - **Lost connection** (backend terminated, failover, a proxy's idle timeout): noticed while
//!   the worker waits, logged at WARN, re-established at once and then with a back-off of
//!   [`RECONNECT_BACKOFF_FIRST`] doubling to [`RECONNECT_BACKOFF_MAX`] (±10 %); the worker polls
//!   meanwhile. Right after re-connecting the wait ends as if notified, so events committed in
//!   the gap are claimed at once instead of after the poll delay.
//! - **Self-check**, at start and after each reconnect, in two steps. First, before any
//!   `LISTEN`, two connections of the pool compare their backends' pids: when they share a
//!   server session, a pooler in transaction mode stands in between (`shares_sessions`), and
//!   no `LISTEN` is sent (through such a pooler it would leave a server connection subscribed,
//!   breaking the statements of whichever client gets it next). Then the new `LISTEN`
//!   connection sends itself a `NOTIFY` from the other connection, with a payload of its own
//!   ([`SELF_CHECK_PREFIX`] and a random token; never a wake reason), and expects it within
//!   [`SELF_CHECK_TIMEOUT`]. When either step fails (a pooler in transaction mode such as
//!   PgBouncer, a read replica behind a proxy), the worker logs a WARN once, gives the
//!   connections back and polls; it checks again every [`SELF_CHECK_RETRY`] (quietly, at
//!   DEBUG) in case the path to the database changed, and logs at INFO when a check passes.
//!
//! **Follow-up round.** Concurrent writers share notifications ([`crate::NewEvent::notify_interval`]):
//! an insert skips its own `NOTIFY` while another open transaction holds the current slot, and
//! relies on that transaction's commit. A skipping transaction may commit just after the
//! holder's notification woke the worker and its claim had already looked at the table: its
//! event would wait for the poll delay. So after every wake-up by notification the next waits
//! are follow-ups instead of the poll delay: [`crate::config::WAKE_FOLLOW_UP`], then
//! twice as long each time while that is shorter than the poll delay; a notification still
//! ends a follow-up at once and starts the series again. A straggler that commits `x` after
//! the woken round is claimed within about `2x + follow-up`. The cost is a handful of claim
//! statements (empty ones write nothing) per quiet period.
//!
//! An event can still wait for the poll delay (nothing is lost: the poll stays the backstop)
//! only when it skipped the notify and no notification reaches the worker after its commit:
//! the slot holder whose notification it relied on rolled back, or is still open (a long
//! transaction; the next slot's first insert notifies, if there is one), and no later insert
//! notified meanwhile. A skipping event whose slot holder did commit is claimed by the woken
//! round or a follow-up (within about twice its lateness), unless it commits after the last
//! follow-up of the series (more than half the poll delay after the wake-up).
//!
//! The gauge [`crate::metrics::WAKE_LISTENING`] tells whether wake-on-commit is live.
// Without the `postgres` feature the listener half is compiled out.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio::time::Instant;

#[cfg(feature = "postgres")]
use crate::store::dialect::WAKE_CHANNEL;
#[cfg(feature = "postgres")]
use crate::store::Dialect;
#[cfg(feature = "postgres")]
use sea_orm::sqlx::postgres::PgListener;
#[cfg(feature = "postgres")]
use sea_orm::sqlx::{AssertSqlSafe, Executor};

/// Without the `postgres` feature there is nothing to listen with: the worker polls.
#[cfg(not(feature = "postgres"))]
type PgListener = std::convert::Infallible;

/// Longest the set-up of a `LISTEN` connection may take (taking a connection from the pool and
/// running `LISTEN`; also sending the self-check's `NOTIFY`): 2 seconds. A database that is
/// down must not hold up the rounds or a shutdown for longer.
const LISTEN_SETUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest the self-check's own `NOTIFY` may take to come back to the new `LISTEN` connection
/// before the check fails: 2 seconds.
pub(crate) const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// After a failed self-check, how long the worker polls before it checks again: 5 minutes. A
/// pooler or a replica does not go away by itself, so the check is repeated rarely (each
/// repetition holds two connections for up to [`SELF_CHECK_TIMEOUT`]) and only at DEBUG.
pub(crate) const SELF_CHECK_RETRY: Duration = Duration::from_secs(300);

/// Pause before the second attempt to re-establish a lost `LISTEN` connection (the first is
/// immediate): 500 milliseconds, doubled after each failed attempt up to
/// [`RECONNECT_BACKOFF_MAX`].
pub(crate) const RECONNECT_BACKOFF_FIRST: Duration = Duration::from_millis(500);

/// Longest pause between attempts to re-establish a lost `LISTEN` connection: 30 seconds.
pub(crate) const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The payload prefix of the self-check's `NOTIFY` (followed by a random token). A
/// notification with it is never a wake reason, whichever worker sent it.
pub(crate) const SELF_CHECK_PREFIX: &str = "sea_orm_outbox:self-check:";

/// Why the wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The poll delay passed.
    Timer,
    /// A transaction that wrote events committed, or the `LISTEN` connection was just
    /// (re-)established (events committed before it may not have notified anyone).
    Notified,
    /// The follow-up after a wake-up by notification passed (see the module's documentation):
    /// claim the events of transactions that skipped their own notification and committed
    /// after the woken round's claim.
    FollowUp,
}

/// What the between-rounds wait rests on.
enum Mode {
    /// Wake-on-commit is off, or the backend cannot notify: the poll delay only.
    Off,
    /// A `LISTEN` connection whose self-check passed.
    Listening(PgListener),
    /// Polling until the next attempt to listen, at `retry_at`.
    Polling {
        /// When the next attempt may start.
        retry_at: Instant,
    },
}

/// Why an attempt to listen failed.
enum Failure {
    /// The database could not be reached, or a statement failed (the error's text).
    Unreachable(String),
    /// Listening works, but the self-check's `NOTIFY` did not come back within
    /// [`SELF_CHECK_TIMEOUT`].
    NotDelivered,
    /// Two connections of the pool shared one server session: a pooler in transaction mode
    /// (found before any `LISTEN` was sent).
    SharedSessions,
}

/// The between-rounds wait of one worker.
pub(crate) struct Wake {
    /// The pool to listen through: `Some` on Postgres with wake-on-commit on.
    db: Option<DatabaseConnection>,
    mode: Mode,
    /// Failed attempts since the connection was last lost (or since the start): sets the
    /// back-off, and only the first of an outage is logged at WARN.
    failures: u32,
    /// Whether a `LISTEN` connection was ever up (to log "re-established" rather than nothing).
    listened: bool,
    /// Whether a failed self-check was logged at WARN already (it is, once per worker run).
    check_warned: bool,
    /// Whether the self-check failed last time (so that a later pass is logged at INFO).
    check_failed: bool,
    /// Whether this wait counts in the [`crate::metrics::WAKE_LISTENING`] gauge now.
    live: bool,
    /// The next wait when it is a follow-up: [`crate::config::WAKE_FOLLOW_UP`] after a
    /// notification, doubled after each follow-up.
    next_follow_up: Option<Duration>,
}

impl Wake {
    /// Listens on Postgres when `enabled`; polls otherwise. Nothing is connected here: the
    /// first wait sets up the `LISTEN` connection (one connection of `db`'s pool, held while
    /// listening) and its self-check, so the worker's first round is not delayed by them.
    pub(crate) fn new(db: &DatabaseConnection, enabled: bool) -> Self {
        #[cfg(feature = "postgres")]
        let db = (enabled && Dialect::of(db.get_database_backend()).listen()).then(|| db.clone());
        #[cfg(not(feature = "postgres"))]
        let db = {
            let _ = (db, enabled);
            None
        };
        let mode = match db {
            Some(_) => Mode::Polling {
                retry_at: Instant::now(),
            },
            None => Mode::Off,
        };
        // Registers the gauge at 0, so that "not listening" is visible from the start.
        crate::metrics::wake_listening(0.0);
        Wake {
            db,
            mode,
            failures: 0,
            listened: false,
            check_warned: false,
            check_failed: false,
            live: false,
            next_follow_up: None,
        }
    }

    /// Waits `delay` (±10 %), or less when a notification arrives or a `LISTEN` connection was
    /// just (re-)established. Notifications already buffered are consumed together: a burst of
    /// commits wakes one round, not one each. A lost `LISTEN` connection is noticed here and
    /// re-established (see the module's documentation); while there is none, the wait polls.
    /// After a wake-up by notification the waits are follow-ups instead, each twice the
    /// previous one, while shorter than `delay` (see the module's documentation); they end in
    /// [`Woken::FollowUp`]. Cancel-safe: dropped mid-attempt, the next wait attempts again (a
    /// follow-up series cut short is given up; the next notification or poll covers it).
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
            // Spread so that workers started together do not poll in lockstep (which would
            // give several instances the latency of one).
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

    /// [`Wake::wait`] until `deadline` (a notification or a new `LISTEN` connection ends it
    /// earlier).
    async fn wait_until(&mut self, deadline: Instant) -> Woken {
        loop {
            match &mut self.mode {
                Mode::Off => {
                    tokio::time::sleep_until(deadline).await;
                    return Woken::Timer;
                }
                Mode::Polling { retry_at } => {
                    let retry_at = *retry_at;
                    if retry_at >= deadline {
                        tokio::time::sleep_until(deadline).await;
                        return Woken::Timer;
                    }
                    tokio::time::sleep_until(retry_at).await;
                    if self.attempt().await {
                        return Woken::Notified;
                    }
                }
                Mode::Listening(listener) => {
                    let lost = match Self::wait_listening(listener, deadline).await {
                        Ok(woken) => return woken,
                        Err(lost) => lost,
                    };
                    tracing::warn!(
                        error = %lost,
                        "LISTEN connection lost: wake-on-commit is down; re-connecting, \
                         polling meanwhile"
                    );
                    self.set_live(false);
                    // Dropping the listener closes its dead connection.
                    self.mode = Mode::Polling {
                        retry_at: Instant::now(),
                    };
                    self.failures = 0;
                    // The first retry is immediate: a terminated backend or a failover usually
                    // leaves the database reachable.
                    if self.attempt().await {
                        return Woken::Notified;
                    }
                }
            }
        }
    }

    /// Waits on `listener` until `deadline` or a notification (other than a self-check's).
    /// `Err` with the reason when the connection was lost.
    #[cfg(feature = "postgres")]
    async fn wait_listening(listener: &mut PgListener, deadline: Instant) -> Result<Woken, String> {
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return Ok(Woken::Timer),
                got = listener.try_recv() => match got {
                    Ok(Some(n)) if is_self_check(n.payload()) => continue,
                    Ok(Some(_)) => {
                        while listener.next_buffered().is_some() {}
                        return Ok(Woken::Notified);
                    }
                    // `try_recv` says `None` when the connection closed (it does not
                    // reconnect: `eager_reconnect(false)`).
                    Ok(None) => return Err("the connection closed".to_owned()),
                    Err(e) => return Err(e.to_string()),
                },
            }
        }
    }

    #[cfg(not(feature = "postgres"))]
    async fn wait_listening(listener: &mut PgListener, _: Instant) -> Result<Woken, String> {
        match *listener {}
    }

    /// One attempt to listen (connect, `LISTEN`, self-check); logs and records its outcome and
    /// sets the mode. Returns whether the worker listens now.
    async fn attempt(&mut self) -> bool {
        let outcome = self.listen().await;
        match outcome {
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
                self.failures = 0;
                self.listened = true;
                self.check_failed = false;
                self.set_live(true);
                true
            }
            Err(Failure::Unreachable(error)) => {
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
                self.mode = Mode::Polling {
                    retry_at: Instant::now() + pause,
                };
                false
            }
            Err(failure @ (Failure::NotDelivered | Failure::SharedSessions)) => {
                let reason = match failure {
                    Failure::SharedSessions => {
                        "two connections of the pool shared one server session: a pooler in \
                         transaction mode (PgBouncer?); no LISTEN was sent. Through such a \
                         pooler the relay's prepared statements fail too: configure \
                         statement_protocol(Simple) (`outbox relay --statement-protocol \
                         simple`), or connect in session mode"
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
                self.mode = Mode::Polling {
                    retry_at: Instant::now() + SELF_CHECK_RETRY,
                };
                false
            }
        }
    }

    /// A new `LISTEN` connection that passed the self-check.
    #[cfg(feature = "postgres")]
    async fn listen(&self) -> Result<PgListener, Failure> {
        let Some(db) = &self.db else {
            return Err(Failure::Unreachable("wake-on-commit is off".to_owned()));
        };
        let pool = db.get_postgres_connection_pool();
        let unreachable = |e: sea_orm::sqlx::Error| Failure::Unreachable(e.to_string());
        let timed_out = |what: &str| Failure::Unreachable(format!("{what} timed out"));
        // Two connections of the pool, both listeners: the one that will LISTEN, and `other`,
        // which probes for a transaction pooler and sends the self-check's NOTIFY (as a
        // commit's would come, from another connection). `other` never LISTENs, but it is a
        // listener too: behind a transaction pooler it may get a server connection that a
        // `LISTEN` left subscribed, and a plain sqlx connection fails its statement on a
        // notification it did not ask for ("expected ReadyForQuery, got NotificationResponse");
        // a listener buffers (and here drops) it.
        let setup = async {
            let mut l = PgListener::connect_with(pool).await?;
            // A lost connection must surface as `Ok(None)` from `try_recv`, not be replaced
            // behind the worker's back (which would skip the self-check and the WARN).
            l.eager_reconnect(false);
            let mut other = PgListener::connect_with(pool).await?;
            let shared = shares_sessions(&mut l, &mut other).await?;
            Ok::<_, sea_orm::sqlx::Error>((l, other, shared))
        };
        let (mut listener, mut other, shared) = tokio::time::timeout(LISTEN_SETUP_TIMEOUT, setup)
            .await
            .map_err(|_| timed_out("LISTEN set-up"))?
            .map_err(unreachable)?;
        if shared {
            // No LISTEN at all: through a transaction pooler it would leave a server connection
            // subscribed, whose notifications then reach (and break the statements of) whichever
            // client gets that server connection next.
            return Err(Failure::SharedSessions);
        }
        let payload = format!("{SELF_CHECK_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let send = async {
            listener.listen(WAKE_CHANNEL).await?;
            (&mut other)
                .execute(AssertSqlSafe(self_check_sql(&payload)))
                .await?;
            Ok::<_, sea_orm::sqlx::Error>(())
        };
        tokio::time::timeout(LISTEN_SETUP_TIMEOUT, send)
            .await
            .map_err(|_| timed_out("LISTEN and the self-check's NOTIFY"))?
            .map_err(unreachable)?;
        drop(other);
        let arrived = async {
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) if n.payload() == payload => return Ok(()),
                    // Commits' notifications meanwhile: the round after this attempt covers them.
                    Ok(Some(_)) => continue,
                    Ok(None) => return Err(Failure::Unreachable("the connection closed".into())),
                    Err(e) => return Err(unreachable(e)),
                }
            }
        };
        match tokio::time::timeout(SELF_CHECK_TIMEOUT, arrived).await {
            Ok(Ok(())) => Ok(listener),
            Ok(Err(failure)) => Err(failure),
            // Dropping the listener gives its connection back to the pool (after `UNLISTEN *`).
            Err(_) => Err(Failure::NotDelivered),
        }
    }

    #[cfg(not(feature = "postgres"))]
    async fn listen(&self) -> Result<PgListener, Failure> {
        Err(Failure::Unreachable(
            "built without the postgres feature".to_owned(),
        ))
    }

    /// Moves the [`crate::metrics::WAKE_LISTENING`] gauge when this wait starts or stops
    /// listening.
    fn set_live(&mut self, live: bool) {
        if self.live != live {
            self.live = live;
            crate::metrics::wake_listening(if live { 1.0 } else { -1.0 });
        }
    }
}

impl Drop for Wake {
    /// A stopped worker no longer counts as listening.
    fn drop(&mut self) {
        self.set_live(false);
    }
}

/// Whether the pool's connections share server sessions (a pooler in transaction or
/// statement mode), found before any `LISTEN` is sent: `mine` asks for its backend's pid,
/// `other` opens a transaction and asks for its own, then `mine` asks again. On their own
/// sessions (Postgres itself, a session-mode pooler) two connections never report the same pid
/// and one connection never changes its pid. Behind a transaction pooler the transaction of
/// `other` usually gets the server connection that `mine` just released (PgBouncer reuses the
/// most recent one), and `mine` then gets another: either pid betrays the sharing. When neither
/// does (the pooler handed out other server connections), the `NOTIFY` of the self-check
/// still finds it out.
#[cfg(feature = "postgres")]
async fn shares_sessions(
    mine: &mut PgListener,
    other: &mut PgListener,
) -> Result<bool, sea_orm::sqlx::Error> {
    use sea_orm::sqlx::{Acquire, Row};
    // Simple-protocol statements (no parameters), so that a transaction pooler runs them.
    // language=SQL
    const PID: &str = "SELECT pg_backend_pid()";
    let first: i32 = (&mut *mine).fetch_one(PID).await?.try_get(0)?;
    let mut txn = (&mut *other).begin().await?;
    let theirs: i32 = (&mut *txn).fetch_one(PID).await?.try_get(0)?;
    let again: i32 = (&mut *mine).fetch_one(PID).await?.try_get(0)?;
    txn.rollback().await?;
    Ok(pids_show_sharing(first, theirs, again))
}

/// The verdict of [`shares_sessions`] on the pids it saw: `first` and `again` of one
/// connection, `theirs` of another one in between.
fn pids_show_sharing(first: i32, theirs: i32, again: i32) -> bool {
    theirs == first || again != first
}

/// Whether `payload` is a self-check's (of this worker or another): never a wake reason.
fn is_self_check(payload: &str) -> bool {
    payload.starts_with(SELF_CHECK_PREFIX)
}

/// The self-check's `NOTIFY` (simple protocol, so that it passes any pooler). `payload` is
/// [`SELF_CHECK_PREFIX`] and a hexadecimal token: nothing to escape.
fn self_check_sql(payload: &str) -> String {
    debug_assert!(payload.bytes().all(|b| b != b'\''));
    // language=SQL
    format!("NOTIFY {WAKE_CHANNEL_SQL}, '{payload}'")
}

/// [`crate::store::dialect::WAKE_CHANNEL`] as an SQL identifier (lower case, so unquoted).
#[cfg(feature = "postgres")]
const WAKE_CHANNEL_SQL: &str = WAKE_CHANNEL;
#[cfg(not(feature = "postgres"))]
const WAKE_CHANNEL_SQL: &str = "sea_orm_outbox";

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

    #[test]
    fn pids_tell_shared_sessions() {
        // Own sessions (Postgres itself, a session-mode pooler): distinct, stable pids.
        assert!(!pids_show_sharing(10, 11, 10));
        // A transaction pooler gave the other connection this one's server session...
        assert!(pids_show_sharing(10, 10, 11));
        assert!(pids_show_sharing(10, 10, 10));
        // ... or this connection a different one the second time.
        assert!(pids_show_sharing(10, 11, 12));
    }

    #[test]
    fn self_check_payloads_are_no_wake_reason() {
        assert!(is_self_check(&format!("{SELF_CHECK_PREFIX}0123abcd")));
        assert!(!is_self_check(""), "a commit's notification wakes");
        assert!(!is_self_check("sentinel"));
        assert_eq!(
            self_check_sql("sea_orm_outbox:self-check:ab12"),
            "NOTIFY sea_orm_outbox, 'sea_orm_outbox:self-check:ab12'"
        );
    }
}
