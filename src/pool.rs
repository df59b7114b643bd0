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
//!   died while idle is replaced instead of failing a statement.
//!
//! An application can build its own pool the same way (`guarded_pool(&db, n)`), so that its
//! handlers never inherit a leaked transaction either.
use sea_orm::DatabaseConnection;

use crate::error::OutboxError;

/// Connections of the relay's own pool by default: a round, the outcome marks, the lease
/// renewal, the reclaim pass and the gauge refresh each use one at a time, and the `LISTEN` of
/// wake-on-commit (Postgres) holds one.
pub const DEFAULT_RELAY_POOL_CONNECTIONS: u32 = 5;

/// Fewest connections a relay pool may have: the `LISTEN` connection, the second one its
/// self-check borrows for a moment, and one for statements.
pub const MIN_RELAY_POOL_CONNECTIONS: u32 = 3;

/// Most connections a relay pool may have.
pub const MAX_RELAY_POOL_CONNECTIONS: u32 = 1000;

/// How long a connection of a [`guarded_pool`] may have been idle and still be handed out
/// without a check (1 second): one idle longer is checked again first (it may have died while
/// idle: a database restart, a pooler or firewall closing idle connections). Every connection
/// is checked when it is given back anyway.
pub const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// `application_name` of the relay's own Postgres connections (in `pg_stat_activity`).
pub const RELAY_APPLICATION_NAME: &str = "sea-orm-outbox relay";

/// Which connections a [`crate::Worker`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayPool {
    /// A pool of the relay's own (the default, [`DEFAULT_RELAY_POOL_CONNECTIONS`]), opened
    /// lazily with the connect and pool options of the pool handed to [`crate::Worker::new`]
    /// and at most `max_connections` connections, each checked for a leaked transaction
    /// before it is handed out ([`guarded_pool`]); on Postgres its connections carry
    /// `application_name` [`RELAY_APPLICATION_NAME`]. SQLite keeps the pool handed over (an
    /// in-memory database exists once per pool, and SQLite has one writer at a time anyway).
    Own {
        /// Most connections the relay opens (3 to 1,000).
        max_connections: u32,
    },
    /// The pool handed to [`crate::Worker::new`] itself, shared with the application: the
    /// relay is then exposed to the application's leaked transactions and can wait for a
    /// connection while the application holds them all (its leases may lapse meanwhile). For
    /// a pool that serves the relay alone.
    Shared,
}

impl Default for RelayPool {
    fn default() -> Self {
        RelayPool::Own {
            max_connections: DEFAULT_RELAY_POOL_CONNECTIONS,
        }
    }
}

impl RelayPool {
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `max_connections` is outside
    /// [`MIN_RELAY_POOL_CONNECTIONS`]..=[`MAX_RELAY_POOL_CONNECTIONS`].
    pub fn validate(&self) -> Result<(), OutboxError> {
        match *self {
            RelayPool::Own { max_connections }
                if !(MIN_RELAY_POOL_CONNECTIONS..=MAX_RELAY_POOL_CONNECTIONS)
                    .contains(&max_connections) =>
            {
                Err(OutboxError::InvalidConfig(format!(
                    "RelayPool::Own {{ max_connections: {max_connections} }}: a relay pool needs \
                     {MIN_RELAY_POOL_CONNECTIONS} to {MAX_RELAY_POOL_CONNECTIONS} connections (the \
                     LISTEN connection, its self-check's, and one for statements)"
                )))
            }
            _ => Ok(()),
        }
    }

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
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] name: Option<&str>,
) -> Result<DatabaseConnection, OutboxError> {
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    let max = max_connections.max(1);
    match db.get_database_backend() {
        #[cfg(feature = "postgres")]
        sea_orm::DbBackend::Postgres => Ok(postgres::pool(db, max, name)),
        #[cfg(feature = "mysql")]
        sea_orm::DbBackend::MySql => Ok(mysql::pool(db, max)),
        sea_orm::DbBackend::Sqlite => Ok(db.clone()),
        other => Err(OutboxError::InvalidConfig(format!(
            "cannot open a relay pool of its own for this {other:?} connection (built without \
             its feature); use RelayPool::Shared"
        ))),
    }
}

/// Logs and counts a connection found inside a transaction when it was given back (or before
/// it was handed out).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn leaked() {
    crate::metrics::leaked_transaction();
    tracing::warn!(
        "a pooled connection is inside an open transaction it did not open (a cancelled \
         begin(), or a transaction left unfinished); closing it, the server rolls the \
         transaction back"
    );
}

/// The pool options of the relay's pool, from the application's `app`: at most `max`
/// connections, opened lazily, closed after 60 s idle, sqlx's ping before acquire off (the
/// caller's checks replace it).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn relay_options<DB: sea_orm::sqlx::Database>(
    app: &sea_orm::sqlx::pool::PoolOptions<DB>,
    max: u32,
) -> sea_orm::sqlx::pool::PoolOptions<DB> {
    app.clone()
        .max_connections(max)
        .min_connections(0)
        .idle_timeout(std::time::Duration::from_secs(60))
        .test_before_acquire(false)
}

/// How long a connection of a [`guarded_pool`] may take to answer its check (10 s). A
/// connection whose command was cancelled halfway through reading its answer (a dropped
/// `begin()`) can be out of step with the server and never answer; without this bound its
/// check would hold its place in the pool for ever, and a small pool would run out of
/// connections. One that does not answer in time is closed without a goodbye and replaced.
/// Long, because the check first waits for the rest of any abandoned query's answer: a healthy
/// connection closed early would leave that query running on the server while the pool opens
/// another.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a connection's `check` within [`CHECK_TIMEOUT`]: `Ok(keep)` with its verdict, or an
/// error (sqlx then closes the connection without a goodbye) when it does not answer in time.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn bounded(
    check: impl std::future::Future<Output = bool>,
) -> Result<bool, sea_orm::sqlx::Error> {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .map_err(|_| {
            sea_orm::sqlx::Error::Protocol(format!(
                "a pooled connection did not answer the outbox's check within {CHECK_TIMEOUT:?} \
                 (a command cancelled mid-answer leaves it out of step); closing it"
            ))
        })
}

/// The check's verdict on a connection found `open` (inside a transaction) or not: a leaked
/// one is logged, counted and closed; returns whether to keep it.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn verdict(open: bool) -> bool {
    if open {
        leaked();
    }
    !open
}

/// A connection whose check failed for another reason (it died while idle, say): closed, like
/// sqlx's own ping would (and another is taken). Returns false (do not keep it).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn dead(e: &sea_orm::sqlx::Error) -> bool {
    tracing::debug!(error = %e, "a pooled relay connection failed its check; closing it");
    false
}

#[cfg(feature = "postgres")]
mod postgres {
    use sea_orm::sqlx::postgres::PgPoolOptions;
    use sea_orm::sqlx::{self, Row};
    use sea_orm::{DatabaseConnection, SqlxPostgresConnector};

    /// See [`super::guarded_pool`].
    pub(super) fn pool(
        db: &DatabaseConnection,
        max: u32,
        name: Option<&str>,
    ) -> DatabaseConnection {
        let app = db.get_postgres_connection_pool();
        let mut connect = (*app.connect_options()).clone();
        if let Some(name) = name {
            connect = connect.application_name(name);
        }
        let options: PgPoolOptions = super::relay_options(app.options(), max)
            .after_release(|conn, _| Box::pin(super::bounded(check(conn))))
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < super::IDLE_RECHECK {
                        return Ok(true);
                    }
                    super::bounded(check(conn)).await
                })
            });
        SqlxPostgresConnector::from_sqlx_postgres_pool(options.connect_lazy_with(connect))
    }

    /// The check of [`super::guarded_pool`] on one connection: whether to keep it.
    async fn check(conn: &mut sqlx::PgConnection) -> bool {
        let checked = sqlx::raw_sql("SELECT transaction_timestamp() = statement_timestamp()")
            .fetch_one(&mut *conn)
            .await;
        match checked {
            Ok(row) => match row.try_get::<bool, _>(0) {
                Ok(clean) => super::verdict(!clean),
                Err(e) => super::dead(&e),
            },
            // Inside a transaction that already failed: every statement is refused.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P02") => {
                super::verdict(true)
            }
            Err(e) => super::dead(&e),
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use std::sync::atomic::{AtomicBool, Ordering};

    use sea_orm::sqlx::mysql::MySqlPoolOptions;
    use sea_orm::sqlx::{self, Row};
    use sea_orm::{DatabaseConnection, SqlxMySqlConnector};

    /// Whether a server without `@@in_transaction` was met (warned once per process).
    static UNCHECKABLE: AtomicBool = AtomicBool::new(false);

    /// See [`super::guarded_pool`].
    pub(super) fn pool(db: &DatabaseConnection, max: u32) -> DatabaseConnection {
        let app = db.get_mysql_connection_pool();
        let connect = (*app.connect_options()).clone();
        let options: MySqlPoolOptions = super::relay_options(app.options(), max)
            .after_release(|conn, _| Box::pin(super::bounded(check(conn))))
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < super::IDLE_RECHECK {
                        return Ok(true);
                    }
                    super::bounded(check(conn)).await
                })
            });
        SqlxMySqlConnector::from_sqlx_mysql_pool(options.connect_lazy_with(connect))
    }

    /// The check of [`super::guarded_pool`] on one connection: whether to keep it.
    async fn check(conn: &mut sqlx::MySqlConnection) -> bool {
        let checked = sqlx::raw_sql("SELECT CAST(@@in_transaction AS SIGNED)")
            .fetch_one(&mut *conn)
            .await;
        match checked {
            Ok(row) => match row.try_get::<i64, _>(0) {
                Ok(open) => super::verdict(open != 0),
                Err(e) => super::dead(&e),
            },
            // MySQL proper has no `@@in_transaction` (MariaDB has): nothing to check with;
            // say so once and keep the connection.
            Err(sqlx::Error::Database(e)) if e.message().contains("in_transaction") => {
                if !UNCHECKABLE.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %e,
                        "this MySQL server has no @@in_transaction: relay connections are not \
                         checked for leaked transactions"
                    );
                }
                true
            }
            Err(e) => super::dead(&e),
        }
    }
}
