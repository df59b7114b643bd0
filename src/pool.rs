//! The relay's connections: a pool of its own, and the guard against connections that come back
//! to a pool inside an open transaction (docs/pools.md). Each backend's check is its driver's.
use sea_orm::DatabaseConnection;

pub use crate::config::RelayPool;
use crate::driver::Driver;
use crate::error::OutboxError;

impl RelayPool {
    /// The connections of a worker configured with `self` and `wake_on_commit`, given the
    /// application's `db`. Refused: a backend built without its feature, a mock connection
    /// with [`RelayPool::Own`], and with [`RelayPool::Shared`] and wake-on-commit where the
    /// driver listens (Postgres) a pool of fewer than `MIN_RELAY_POOL_CONNECTIONS`.
    pub(crate) fn connections(
        &self,
        db: &DatabaseConnection,
        wake_on_commit: bool,
    ) -> Result<DatabaseConnection, OutboxError> {
        let min = crate::config::MIN_RELAY_POOL_CONNECTIONS;
        let listens = |d: &Driver| wake_on_commit && d.listens();
        match *self {
            RelayPool::Shared => match Driver::of(db.get_database_backend())
                .filter(listens)
                .and_then(|d| d.pool_size(db))
            {
                Some(max) if max < min => Err(OutboxError::InvalidConfig(format!(
                    "RelayPool::Shared with a pool of {max} connection(s): wake-on-commit needs \
                     at least {min} (the LISTEN connection, its self-check's, and one for \
                     statements); give the pool more connections, use RelayPool::Own, or \
                     wake_on_commit(false)"
                ))),
                _ => Ok(db.clone()),
            },
            RelayPool::Own { .. } if sea_orm::ConnectionTrait::is_mock_connection(db) => {
                Err(OutboxError::InvalidConfig(
                    "a SeaORM mock connection has no pool options to open a relay pool with; \
                 configure the worker with relay_pool(RelayPool::Shared)"
                        .into(),
                ))
            }
            RelayPool::Own { max_connections } => {
                guarded(db, max_connections, Some("sea-orm-outbox relay"))
            }
        }
    }
}

/// A new pool with the connect and pool options of `db`'s (same server, credentials, TLS,
/// timeouts; not its `after_connect`, `before_acquire` and `after_release` hooks, its
/// `idle_timeout` or SeaORM's metric callback), at most `max_connections` connections opened
/// lazily, none kept when idle for 60 s. Every connection is checked when it is given back, and
/// before it is handed out after a second idle (in place of sqlx's ping): one found inside an
/// open transaction (Postgres: `SELECT transaction_timestamp() = statement_timestamp()`;
/// MariaDB: `@@in_transaction`, which MySQL proper lacks: there nothing is checked, said once
/// at WARN) is closed with a WARN and counted in `outbox_leaked_transactions_total`; one that
/// does not answer within 10 s is closed too. SQLite returns `db` itself (one writer, and an
/// in-memory database exists once per pool). Why and how: docs/pools.md.
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
