//! The relay's connections: a pool of its own, and the guard against connections that come back
//! to a pool inside an open transaction (sqlx can return a connection with a transaction still
//! open when a `begin()` is cancelled). Why and how: docs/pools.md. Each backend's check is its
//! driver's (`src/driver/<backend>/pool.rs`).
use sea_orm::DatabaseConnection;

pub use crate::config::RelayPool;
use crate::driver::Driver;
use crate::error::OutboxError;

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
/// timeouts; SeaORM's `ConnectOptions::after_connect` callback is not run again), at most
/// `max_connections` connections opened lazily, none kept when idle for 60 s, and every
/// connection checked when it is given back: one found inside an open transaction is closed
/// with a WARN (the server rolls the transaction back) and counted in
/// `outbox_leaked_transactions_total`; one that does not answer within 10 s is closed too. A
/// connection idle for a second or more gets the same check before it is handed out, in place
/// of sqlx's ping (docs/pools.md).
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
/// `application_name` [`RELAY_APPLICATION_NAME`].
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
