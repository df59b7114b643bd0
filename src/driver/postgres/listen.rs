//! Wake-on-commit, the relays' side: a `LISTEN` connection on [`WAKE_CHANNEL`] that has
//! passed a self-check, and the wait on it ([`Listener`]), which probes the connection after
//! a silence. The wake-up's policy (back-off, re-checks, logging, follow-ups) is
//! `crate::wake`'s.
use sea_orm::sqlx::postgres::{PgListener, PgPool};
use sea_orm::sqlx::{AssertSqlSafe, Executor};
use sea_orm::DatabaseConnection;
use tokio::time::Instant;

use super::WAKE_CHANNEL;
use crate::driver::listen::{
    Heard, ListenFailure, LISTEN_SETUP_TIMEOUT, PROBE_AFTER, PROBE_TIMEOUT, SELF_CHECK_PREFIX,
    SELF_CHECK_TIMEOUT,
};

/// A `LISTEN` connection (one connection of the pool, held while listening) whose self-check
/// passed.
///
/// Dropping it hands its connection back to the pool after an `UNLISTEN *` that sqlx sends
/// from a task of its own, so a drop never waits. On a connection that no longer answers
/// (half-open: no FIN, no RST) that task waits until the operating system gives up on the
/// connection, and holds that pool connection meanwhile.
pub(crate) struct Listener {
    listener: PgListener,
    /// The pool the connection came from; the probes go through it.
    pool: PgPool,
    /// When the connection last delivered a notification (or was opened).
    heard_at: Instant,
    /// When the probe now awaited was sent.
    probe_sent: Option<Instant>,
}

impl Listener {
    /// A new `LISTEN` connection that passed the self-check.
    pub(crate) async fn open(db: &DatabaseConnection) -> Result<Listener, ListenFailure> {
        let pool = db.get_postgres_connection_pool();
        let unreachable = |e: sea_orm::sqlx::Error| ListenFailure::Unreachable(e.to_string());
        let timed_out = |what: &str| ListenFailure::Unreachable(format!("{what} timed out"));
        // Two listeners: the one that will LISTEN, and `other`, which probes for a transaction
        // pooler and sends the self-check's NOTIFY. `other` is a listener too because behind a
        // pooler a plain connection fails on a notification it did not ask for.
        let setup = async {
            let mut l = PgListener::connect_with(pool).await?;
            // A lost connection must surface as `Ok(None)`, not be replaced behind our back.
            l.eager_reconnect(false);
            let mut other = PgListener::connect_with(pool).await?;
            let shared = shares_backends(&mut l, &mut other).await?;
            Ok::<_, sea_orm::sqlx::Error>((l, other, shared))
        };
        let (mut listener, mut other, shared) = tokio::time::timeout(LISTEN_SETUP_TIMEOUT, setup)
            .await
            .map_err(|_| timed_out("LISTEN set-up"))?
            .map_err(unreachable)?;
        if shared {
            // No LISTEN: through a pooler it would leave a server connection subscribed.
            return Err(ListenFailure::SharedBackends);
        }
        let payload = self_check_payload();
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
                    Ok(None) => {
                        return Err(ListenFailure::Unreachable("the connection closed".into()))
                    }
                    Err(e) => return Err(unreachable(e)),
                }
            }
        };
        match tokio::time::timeout(SELF_CHECK_TIMEOUT, arrived).await {
            Ok(Ok(())) => Ok(Listener {
                listener,
                pool: pool.clone(),
                heard_at: Instant::now(),
                probe_sent: None,
            }),
            Ok(Err(failure)) => Err(failure),
            // Dropping the listener gives its connection back to the pool (after `UNLISTEN *`).
            Err(_) => Err(ListenFailure::NotDelivered),
        }
    }

    /// Waits on the connection until `deadline` or a notification (other than a self-check's).
    /// `Err` with the reason when the connection was lost.
    ///
    /// A connection that can go quiet without closing (half-open) is found by a probe: after
    /// [`PROBE_AFTER`] without any notification it sends a self-check `NOTIFY` through the
    /// pool, and `Err` when no notification arrives within [`PROBE_TIMEOUT`] after it. Any
    /// notification (another relay's probe too) proves the connection. Sending the probe can
    /// hold the wait past `deadline` by up to [`PROBE_TIMEOUT`].
    pub(crate) async fn wait_until(&mut self, deadline: Instant) -> Result<Heard, String> {
        loop {
            let probe_at = match self.probe_sent {
                Some(sent) => sent + PROBE_TIMEOUT,
                None => self.heard_at + PROBE_AFTER,
            };
            tokio::select! {
                biased;
                got = self.listener.try_recv() => match got {
                    Ok(Some(n)) => {
                        self.heard_at = Instant::now();
                        self.probe_sent = None;
                        if is_self_check(n.payload()) {
                            continue;
                        }
                        while self.listener.next_buffered().is_some() {}
                        return Ok(Heard::Notified);
                    }
                    // `try_recv` says `None` when the connection closed (it does not
                    // reconnect: `eager_reconnect(false)`).
                    Ok(None) => return Err("the connection closed".to_owned()),
                    Err(e) => return Err(e.to_string()),
                },
                () = tokio::time::sleep_until(probe_at) => {
                    if self.probe_sent.is_some() {
                        return Err(format!(
                            "its own NOTIFY did not come back within {} s: the connection is \
                             half-open or its server is gone",
                            PROBE_TIMEOUT.as_secs()
                        ));
                    }
                    self.send_probe().await;
                }
                () = tokio::time::sleep_until(deadline) => return Ok(Heard::Timer),
            }
        }
    }

    /// Sends a probe through the pool, not through the listening connection: the self-check's
    /// `NOTIFY sea_orm_outbox, 'sea_orm_outbox:self-check:<token>'` ([`self_check_sql`]).
    /// A probe that cannot be sent within [`PROBE_TIMEOUT`] says nothing about the listening
    /// connection (the database may be down, which the relay's own statements report, or the
    /// pool busy): it is logged at DEBUG and the next one goes after another [`PROBE_AFTER`].
    async fn send_probe(&mut self) {
        let sql = AssertSqlSafe(self_check_sql(&self_check_payload()));
        let error = match tokio::time::timeout(PROBE_TIMEOUT, self.pool.execute(sql)).await {
            Ok(Ok(_)) => {
                self.probe_sent = Some(Instant::now());
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        tracing::debug!(%error, "the LISTEN probe could not be sent; trying again later");
        self.heard_at = Instant::now();
    }
}

/// Whether the pool's connections share server backends (a pooler in transaction or
/// statement mode), found before any `LISTEN` is sent, in [`PID_ROUNDS`] rounds: `mine` asks
/// for its backend's pid, `other` asks for its own inside a transaction, `mine` asks again, and
/// once more after `other`'s transaction ended. Unshared connections never show one pid twice
/// nor a pid that changes. A transaction pooler hands a released server connection to the
/// next client, so each round catches it unless other clients took that connection in
/// between; the self-check's `NOTIFY` finds a pooler that every round missed, but only after
/// its `LISTEN` went through (`docs/pools.md`).
async fn shares_backends(
    mine: &mut PgListener,
    other: &mut PgListener,
) -> Result<bool, sea_orm::sqlx::Error> {
    use sea_orm::sqlx::{Acquire, Row};
    // Simple-protocol statements (no parameters), so that a transaction pooler runs them.
    // language=SQL
    const PID: &str = "SELECT pg_backend_pid()";
    for _ in 0..PID_ROUNDS {
        let first: i32 = (&mut *mine).fetch_one(PID).await?.try_get(0)?;
        let mut txn = (&mut *other).begin().await?;
        let theirs: i32 = (&mut *txn).fetch_one(PID).await?.try_get(0)?;
        let again: i32 = (&mut *mine).fetch_one(PID).await?.try_get(0)?;
        txn.rollback().await?;
        let after: i32 = (&mut *mine).fetch_one(PID).await?.try_get(0)?;
        if pids_show_sharing(first, theirs, [again, after]) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Rounds of [`shares_backends`]: a `LISTEN` that a missed pooler lets through subscribes a
/// server connection that other clients then get, so the check repeats.
const PID_ROUNDS: usize = 4;

/// The verdict of [`shares_backends`] on the pids of one round: `first` and `later` of one
/// connection, `theirs` of another one in between.
fn pids_show_sharing(first: i32, theirs: i32, later: [i32; 2]) -> bool {
    theirs == first || later.iter().any(|&pid| pid != first)
}

/// Whether `payload` is a self-check's (of this worker or another): never a wake reason.
fn is_self_check(payload: &str) -> bool {
    payload.starts_with(SELF_CHECK_PREFIX)
}

/// A fresh payload for a self-check's `NOTIFY`: [`SELF_CHECK_PREFIX`] and a random token.
fn self_check_payload() -> String {
    format!("{SELF_CHECK_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// The self-check's `NOTIFY` (simple protocol, so that it passes any pooler). `payload` is
/// [`SELF_CHECK_PREFIX`] and a hexadecimal token: nothing to escape.
fn self_check_sql(payload: &str) -> String {
    debug_assert!(payload.bytes().all(|b| b != b'\''));
    // language=SQL
    format!("NOTIFY {WAKE_CHANNEL}, '{payload}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_tell_shared_backends() {
        // Own backends (Postgres itself, a pooler that gives each client one): distinct, stable pids.
        assert!(!pids_show_sharing(10, 11, [10, 10]));
        // A transaction pooler gave the other connection this one's server backend...
        assert!(pids_show_sharing(10, 10, [11, 10]));
        assert!(pids_show_sharing(10, 10, [10, 10]));
        // ... or this connection a different one later (the other's, once it was released).
        assert!(pids_show_sharing(10, 11, [12, 10]));
        assert!(pids_show_sharing(10, 11, [10, 11]));
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
