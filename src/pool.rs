//! The relay's connections: a pool of its own, and the guard against connections that come back
//! to a pool inside an open transaction.
//!
//! Why: sqlx 0.9.0 (the release SeaORM 2.0 uses; the fix is not released) can return a
//! connection to its pool with a transaction still open on the server when a `begin()` is
//! cancelled mid-round-trip, which happens whenever a web handler's future is dropped (a client
//! hung up, a timeout). The next user of that connection then works inside a transaction it did
//! not open: on Postgres its statements are undone when the connection closes (a relay's
//! `SUCCESS` marks vanish, and the events are sent again), and inside it `CURRENT_TIMESTAMP`
//! stands still (nothing looks due, no lease expires); on MariaDB the relay's claim transaction
//! fails with error 1568. So:
//!
//! - A [`crate::Worker`] runs on a pool of its own by default ([`RelayPool::Own`]), opened with
//!   the options of the pool the application hands it: the application cannot leave one of its
//!   connections in a transaction, and cannot hold every connection the relay needs to renew its
//!   leases and record its outcomes.
//! - Every connection of that pool is checked when it is given back ([`guarded_pool`]): one
//!   found inside a transaction is closed (the server rolls the transaction back) with a WARN
//!   and counted in `outbox_leaked_transactions_total`, so no one is handed such a connection.
//!   The check runs in the task in which sqlx returns a connection to its pool, off the path of
//!   the statement that waits for a connection, and is bounded: a connection that does not
//!   answer it (out of step after a command cancelled mid-answer) is closed rather than left
//!   holding its place in the pool. A connection idle for [`IDLE_RECHECK`] or longer is checked
//!   again before it is handed out (in place of sqlx's ping before acquire), so that one that
//!   died while idle is replaced instead of failing a statement. Each backend's check is its
//!   driver's (`src/driver/<backend>/pool.rs`).
//!
//! An application can build its own pool the same way (`guarded_pool(&db, n)`), so that its
//! handlers never inherit a leaked transaction either.
use sea_orm::DatabaseConnection;

pub use crate::config::{
    RelayPool, DEFAULT_RELAY_POOL_CONNECTIONS, MAX_RELAY_POOL_CONNECTIONS,
    MIN_RELAY_POOL_CONNECTIONS,
};
use crate::driver::Driver;
use crate::error::OutboxError;

pub use crate::driver::IDLE_RECHECK;

/// `application_name` of the relay's own Postgres connections (in `pg_stat_activity`).
pub const RELAY_APPLICATION_NAME: &str = "sea-orm-outbox relay";

impl RelayPool {
    /// The connections a worker configured with `self` uses, given the application's `db`
    /// (`self` was validated with the worker's config, [`crate::WorkerConfig::validate`]).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `db` is a backend this crate was built without, or
    /// a mock connection with [`RelayPool::Own`].
    pub(crate) fn connections(
        &self,
        db: &DatabaseConnection,
    ) -> Result<DatabaseConnection, OutboxError> {
        match *self {
            RelayPool::Shared => Ok(db.clone()),
            RelayPool::Own { .. } if sea_orm::ConnectionTrait::is_mock_connection(db) => {
                Err(OutboxError::InvalidConfig(
                    "a SeaORM mock connection has no pool options to open a relay pool with; \
                 configure the worker with relay_pool(RelayPool::Shared)"
                        .into(),
                ))
            }
            RelayPool::Own { max_connections } => relay_pool(db, max_connections),
        }
    }
}

/// A new pool with the connect and pool options of `db`'s (same server, credentials, TLS,
/// timeouts, sqlx's pool settings such as its `after_connect` hook; SeaORM's
/// `ConnectOptions::after_connect` callback is not run again), at most `max_connections`
/// connections opened lazily, none kept when idle for 60 s, and every connection checked when
/// it is given back (sqlx's `after_release`): one found inside an open transaction is closed
/// with a WARN (the server rolls the transaction back) and counted in
/// `outbox_leaked_transactions_total`; one that does not answer within 10 s is
/// closed too (the check first reads what remains of a cancelled command's answer, so a query
/// abandoned by its caller counts against those 10 s; sqlx's own ping that follows a passed
/// check is not bounded, but runs on a connection that has just answered). A connection idle for [`IDLE_RECHECK`] or longer gets the same check before it
/// is handed out (`before_acquire`, in place of sqlx's ping); one idle for less is handed out
/// at once, which saves a round trip per statement. So a connection that dies less than
/// [`IDLE_RECHECK`] after it was given back fails the one statement it is handed out for, and
/// the relay retries that work as after any database error.
///
/// The check:
/// - Postgres: `SELECT transaction_timestamp() = statement_timestamp()` as a simple query (the
///   two are equal in a statement of its own, and differ inside a transaction opened earlier).
/// - MySQL/MariaDB: `SELECT CAST(@@in_transaction AS SIGNED)` (MariaDB; MySQL proper has no
///   such variable: there the connections are not checked, said once at WARN).
///
/// A connection inside a transaction that already failed (Postgres refuses every statement)
/// counts as leaked too; one whose check fails otherwise is closed quietly (DEBUG).
///
/// Not carried over from `db`'s pool: its `before_acquire` and `after_release` hooks and
/// `test_before_acquire` setting (the check replaces them), its `idle_timeout` (60 s here), and
/// SeaORM's metric callback (set one on the returned connection if you need it).
/// - SQLite: returns `db` itself (nothing to check: one writer, and the pool may be an
///   in-memory database that a second pool would not see).
///
/// Opens no connection itself: the first statement does.
///
/// # Errors
/// [`OutboxError::InvalidConfig`] when `db` is a backend this crate was built without.
///
/// # Panics
/// When `db` is a SeaORM mock or proxy connection (no sqlx pool to take options from); give
/// such a connection to a worker with [`RelayPool::Shared`].
pub fn guarded_pool(
    db: &DatabaseConnection,
    max_connections: u32,
) -> Result<DatabaseConnection, OutboxError> {
    guarded(db, max_connections, None)
}

/// The relay's own pool: [`guarded_pool`] whose Postgres connections carry
/// `application_name` [`RELAY_APPLICATION_NAME`] (in `pg_stat_activity`).
fn relay_pool(db: &DatabaseConnection, max: u32) -> Result<DatabaseConnection, OutboxError> {
    guarded(db, max, Some(RELAY_APPLICATION_NAME))
}

/// [`guarded_pool`], with `application_name` set on Postgres when given.
fn guarded(
    db: &DatabaseConnection,
    max_connections: u32,
    name: Option<&str>,
) -> Result<DatabaseConnection, OutboxError> {
    let backend = db.get_database_backend();
    Driver::of(backend)
        .and_then(|driver| driver.guarded_pool(db, max_connections.max(1), name))
        .ok_or_else(|| {
            OutboxError::InvalidConfig(format!(
                "cannot open a relay pool of its own for this {backend:?} connection (built \
                 without its feature); use RelayPool::Shared"
            ))
        })
}
