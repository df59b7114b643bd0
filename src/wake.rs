//! What a worker waits on between rounds: the poll delay, and on Postgres also a `LISTEN` on
//! [`crate::store::dialect::WAKE_CHANNEL`], notified by every committed
//! [`crate::OutboxExt::with_event`] whose event keeps [`crate::NewEvent::notify_relays`] on. Polling stays as the safety net: a notification lost while
//! the listener reconnects only delays an event until the next poll.
// Without the `postgres` feature the listener half is compiled out.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]
use std::time::Duration;

#[cfg(feature = "postgres")]
use crate::store::Dialect;
#[cfg(feature = "postgres")]
use sea_orm::sqlx::postgres::PgListener;
use sea_orm::DatabaseConnection;

#[cfg(feature = "postgres")]
use crate::store::dialect::WAKE_CHANNEL;

/// Without the `postgres` feature there is nothing to listen with: the worker polls.
#[cfg(not(feature = "postgres"))]
type PgListener = std::convert::Infallible;

/// Why the wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The poll delay passed.
    Timer,
    /// A transaction that wrote events committed.
    Notified,
}

/// The between-rounds wait of one worker.
pub(crate) struct Wake {
    /// The pool to listen through: `Some` on Postgres with wake-on-commit on.
    db: Option<DatabaseConnection>,
    listener: Option<PgListener>,
}

/// Longest a `LISTEN` set-up may take before the worker goes on polling (a database that is
/// down must not hold up the rounds or a shutdown).
const LISTEN_SETUP_TIMEOUT: Duration = Duration::from_secs(2);

impl Wake {
    /// Listens on Postgres when `enabled`; polls otherwise. If listening cannot start (the
    /// database is down), it polls and tries again before each later wait. The listener holds
    /// one connection of `db`'s pool.
    pub(crate) async fn new(db: &DatabaseConnection, enabled: bool) -> Self {
        #[cfg(feature = "postgres")]
        let db = (enabled && Dialect::of(db.get_database_backend()).listen()).then(|| db.clone());
        #[cfg(not(feature = "postgres"))]
        let db = {
            let _ = (db, enabled);
            None
        };
        let mut wake = Wake { db, listener: None };
        wake.ensure_listening().await;
        wake
    }

    #[cfg(not(feature = "postgres"))]
    async fn ensure_listening(&mut self) {}

    #[cfg(feature = "postgres")]
    async fn ensure_listening(&mut self) {
        let Some(db) = &self.db else { return };
        if self.listener.is_some() {
            return;
        }
        let setup = async {
            let mut l = PgListener::connect_with(db.get_postgres_connection_pool()).await?;
            l.listen(WAKE_CHANNEL).await?;
            Ok::<_, sea_orm::sqlx::Error>(l)
        };
        match tokio::time::timeout(LISTEN_SETUP_TIMEOUT, setup).await {
            Ok(Ok(l)) => self.listener = Some(l),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot LISTEN for new events; polling, will try again")
            }
            Err(_) => tracing::warn!("LISTEN set-up timed out; polling, will try again"),
        }
    }

    /// Waits `delay`, or less when a notification arrives. Notifications already buffered are
    /// consumed together: a burst of commits wakes one round, not one each.
    pub(crate) async fn wait(&mut self, delay: Duration) -> Woken {
        // Spread so that workers started together do not poll in lockstep (which would give
        // several instances the latency of one).
        let delay = crate::retry::jitter(delay);
        self.ensure_listening().await;
        let Some(listener) = self.listener.as_mut() else {
            tokio::time::sleep(delay).await;
            return Woken::Timer;
        };
        Self::wait_listening(listener, delay).await
    }

    #[cfg(not(feature = "postgres"))]
    async fn wait_listening(listener: &mut PgListener, _: Duration) -> Woken {
        match *listener {}
    }

    #[cfg(feature = "postgres")]
    async fn wait_listening(listener: &mut PgListener, delay: Duration) -> Woken {
        tokio::select! {
            _ = tokio::time::sleep(delay) => Woken::Timer,
            got = listener.recv() => match got {
                Ok(_) => {
                    while listener.next_buffered().is_some() {}
                    Woken::Notified
                }
                Err(e) => {
                    // The listener reconnects on its next receive; poll meanwhile.
                    tracing::warn!(error = %e, "LISTEN connection failed; polling until it is back");
                    tokio::time::sleep(delay).await;
                    Woken::Timer
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn jitter_stays_within_ten_percent() {
        let d = std::time::Duration::from_millis(1000);
        for _ in 0..100 {
            let j = crate::retry::jitter(d).as_millis();
            assert!((900..=1100).contains(&j), "{j}");
        }
    }
}
