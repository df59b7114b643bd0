//! The driver: every statement and every backend difference. The relay, the write path, the
//! wake-up, the pools and [`crate::ops`] ask it; none of them holds SQL text or branches on the
//! backend. [`Driver`] is chosen once from a connection's backend ([`Driver::of`]) and carries
//! the outbox table every statement names ([`Table`]). Each backend's directory (`postgres/`,
//! `mysql/`, `sqlite/`) holds files of the same names; ARCHITECTURE.md maps them.
//!
//! Every time the outbox compares comes from the database clock ([`Driver::now`]), so that
//! skewed application clocks cannot steal or keep leases. Durations reach the SQL as numbers
//! formatted from a [`Duration`], never as user text.
//!
//! Each statement is a method of [`Driver`] that builds it, its SQL in its doc; a few runners
//! send them ([`exec_by_ids`], [`query_events`], [`query_ids`], and on the relay's connection
//! [`RelayDb::run`] and its kin), so that `tests/statements.rs` renders every statement per
//! backend without a database.
pub mod admin;
mod by_ids;
mod claim;
pub mod consumed;
pub mod counter;
pub mod dead_groups;
mod error;
mod exec;
mod heal;
pub mod health;
mod insert;
// Without the `postgres` feature nothing listens, and the listener's parts go unused.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
mod listen;
mod marks;
mod mysql;
mod ordered;
mod pool;
mod postgres;
mod reclaim;
mod relay_db;
pub mod relays;
mod runs;
mod sqlite;
mod table;
#[cfg(test)]
mod tests;

use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, InsertStatement};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, StatementBuilder};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

pub use by_ids::ByIds;
pub use claim::{claim_batch, mark_success_and_claim_batch};
pub use error::db_error_kind;
pub(crate) use error::is_transient;
pub use exec::*;
pub use heal::heal_dead_letters;
pub use insert::insert_event;
pub(crate) use listen::{Heard, ListenFailure, Listener};
pub use ordered::{HeadScan, HEAD_SCAN_DEEP_EVERY_MIN};
// The channel the docs of the write path and the wake-up name.
#[allow(unused_imports)]
pub use postgres::WAKE_CHANNEL;
pub use reclaim::{reclaim_stuck, Reclaimed, RECLAIM_BATCH};
pub use relay_db::RelayDb;
pub use runs::claim_ordered;
pub use table::Table;

use crate::error::OutboxError;

/// The backend of a connection, as the outbox knows it: which directory answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// MySQL and MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

/// The driver of one backend and one outbox table: what every statement is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Driver {
    backend: Backend,
    table: Table,
}

/// The drivers of the default table, for the unit tests.
#[cfg(test)]
#[allow(non_upper_case_globals)]
impl Driver {
    pub const Postgres: Driver = Driver::on(Backend::Postgres);
    pub const MySql: Driver = Driver::on(Backend::MySql);
    pub const Sqlite: Driver = Driver::on(Backend::Sqlite);
}

impl Driver {
    /// The driver of `backend` on the default table.
    const fn on(backend: Backend) -> Driver {
        Driver {
            backend,
            table: Table::DEFAULT,
        }
    }

    /// The driver of `backend` on the default table; `None` for a backend this crate does
    /// not know.
    pub fn of(backend: DbBackend) -> Option<Driver> {
        match backend {
            DbBackend::Postgres => Some(Driver::on(Backend::Postgres)),
            DbBackend::MySql => Some(Driver::on(Backend::MySql)),
            DbBackend::Sqlite => Some(Driver::on(Backend::Sqlite)),
            _ => None,
        }
    }

    /// This driver on `table`.
    pub fn with_table(self, table: Table) -> Driver {
        Driver { table, ..self }
    }

    /// The outbox table the statements name.
    pub fn table(self) -> Table {
        self.table
    }

    /// The driver of `db`'s backend on the default table.
    ///
    /// # Errors
    /// [`DbErr::Custom`] for a backend this crate does not know.
    pub fn of_db<C: ConnectionTrait>(db: &C) -> Result<Driver, DbErr> {
        Driver::of(db.get_database_backend()).ok_or_else(|| {
            DbErr::Custom(
                "this database backend is not supported by sea-orm-outbox (Postgres, \
                 MySQL/MariaDB, SQLite)"
                    .into(),
            )
        })
    }

    /// The driver of `backend` when this build of the crate has its feature (`postgres`,
    /// `mysql`, `sqlite`): without it the outbox lacks the backend's wake-up and error codes.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the feature to turn on, or saying that the backend
    /// is not supported.
    pub fn with_feature(backend: DbBackend) -> Result<Driver, OutboxError> {
        let Some(driver) = Driver::of(backend) else {
            return Err(OutboxError::InvalidConfig(format!(
                "{backend:?} is not a backend sea-orm-outbox supports (Postgres, MySQL/MariaDB, \
                 SQLite)"
            )));
        };
        let (feature, built) = match driver.backend {
            Backend::Postgres => ("postgres", cfg!(feature = "postgres")),
            Backend::MySql => ("mysql", cfg!(feature = "mysql")),
            Backend::Sqlite => ("sqlite", cfg!(feature = "sqlite")),
        };
        if built {
            Ok(driver)
        } else {
            Err(OutboxError::InvalidConfig(format!(
                "the database is {backend:?}, but sea-orm-outbox was built without its \
                 `{feature}` feature: add `features = [\"{feature}\"]` to the sea-orm-outbox \
                 dependency"
            )))
        }
    }

    /// sea-orm's name of the backend.
    pub fn backend(self) -> DbBackend {
        match self.backend {
            Backend::Postgres => DbBackend::Postgres,
            Backend::MySql => DbBackend::MySql,
            Backend::Sqlite => DbBackend::Sqlite,
        }
    }

    /// `stmt` rendered for this backend, values bound.
    pub fn build<S: StatementBuilder>(self, stmt: &S) -> Statement {
        self.backend().build(stmt)
    }

    /// Whether `INSERT ... RETURNING` and `UPDATE ... RETURNING` exist (Postgres, SQLite 3.35+);
    /// MySQL and MariaDB report a new row's id as `LAST_INSERT_ID()` (sea-orm's
    /// `mariadb-use-returning` must stay off).
    pub fn returning(self) -> bool {
        self.backend != Backend::MySql
    }

    /// Whether relays can be woken by `LISTEN`/`NOTIFY` on commit in this build (Postgres with
    /// the `postgres` feature).
    pub fn listens(self) -> bool {
        self.backend == Backend::Postgres && cfg!(feature = "postgres")
    }

    /// Whether one statement can mark a claim's deliveries `SUCCESS` and claim the next batch
    /// (data-modifying `WITH`: Postgres only), see [`mark_success_and_claim_batch`].
    pub fn mark_and_claim_in_one(self) -> bool {
        self.backend == Backend::Postgres
    }

    /// The database clock's `now`.
    pub fn now(self) -> Expr {
        Expr::cust(self.now_sql(None))
    }

    /// `now + d` on the database clock.
    pub fn now_plus(self, d: Duration) -> Expr {
        Expr::cust(self.now_sql(Some(('+', d))))
    }

    /// The instant `at` as the backend stores the outbox's timestamps: `timestamptz` on
    /// Postgres, `DATETIME(6)` in UTC on MySQL/MariaDB, RFC 3339 text of one fixed width on
    /// SQLite (as [`Driver::now`] writes it).
    pub fn instant(self, at: chrono::DateTime<chrono::Utc>) -> Expr {
        match self.backend {
            Backend::Postgres => Expr::val(at),
            Backend::MySql => Expr::val(at.naive_utc()),
            Backend::Sqlite => Expr::val(at.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()),
        }
    }

    /// `now - d` on the database clock.
    pub fn now_minus(self, d: Duration) -> Expr {
        Expr::cust(self.now_sql(Some(('-', d))))
    }

    /// The SQL text of the database clock's `now`, or `now ± d` for `Some((sign, d))` (each
    /// backend's `mod.rs` says its form).
    pub fn now_sql(self, offset: Option<(char, Duration)>) -> String {
        match self.backend {
            Backend::Postgres => postgres::now_sql(offset),
            Backend::MySql => mysql::now_sql(offset),
            Backend::Sqlite => sqlite::now_sql(offset),
        }
    }

    /// `"status" = <value>` as a statement that names its rows by id writes it: on Postgres
    /// `(...) IS TRUE`, so that only the id list can choose the index; plain elsewhere.
    pub fn status_guard(self, value: Expr) -> Expr {
        let guard = Expr::col(Column::Status).eq(value);
        match self.backend {
            Backend::Postgres => postgres::primary_key_only(guard),
            Backend::MySql | Backend::Sqlite => guard,
        }
    }

    /// The event insert made to also wake listening relays at commit when `notify` says so
    /// (Postgres: `postgres/notify.rs`); the other backends poll and get `insert` unchanged.
    pub fn with_wakeup(self, insert: InsertStatement, notify: Option<Duration>) -> InsertStatement {
        match self.backend {
            Backend::Postgres => postgres::notify::with_wakeup(insert, notify),
            Backend::MySql | Backend::Sqlite => insert,
        }
    }

    /// The wake-up notification as a statement of its own (Postgres: `SELECT
    /// pg_notify('sea_orm_outbox', '')`); `None` on the backends that poll.
    pub fn wakeup_alone(self) -> Option<Statement> {
        match self.backend {
            Backend::Postgres => Some(postgres::notify::wakeup_alone()),
            Backend::MySql | Backend::Sqlite => None,
        }
    }

    /// Whether [`crate::StatementProtocol::Simple`] can be served: Postgres with the `postgres`
    /// feature (MySQL/MariaDB and SQLite have no transaction-mode pooler to pass).
    pub fn simple_protocol(self) -> bool {
        self.backend == Backend::Postgres && cfg!(feature = "postgres")
    }

    /// `stmt` as one simple-protocol query, its values inlined (see `postgres/simple.rs`);
    /// `None` where statements are always prepared.
    pub fn inline(self, stmt: &Statement) -> Option<String> {
        match self.backend {
            Backend::Postgres => Some(postgres::simple::inline(stmt)),
            Backend::MySql | Backend::Sqlite => None,
        }
    }

    /// A pool like `db`'s with every connection checked for a leaked transaction (see
    /// [`crate::guarded_pool`], each backend's `pool.rs`), at most `max` connections, Postgres'
    /// named `name`; SQLite keeps `db` itself. `None` when this build lacks the backend's
    /// feature.
    #[cfg_attr(
        not(all(feature = "postgres", feature = "mysql")),
        allow(unused_variables)
    )]
    pub(crate) fn guarded_pool(
        self,
        db: &DatabaseConnection,
        max: u32,
        name: Option<&str>,
    ) -> Option<DatabaseConnection> {
        match self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres => Some(postgres::pool::pool(db, max, name)),
            #[cfg(feature = "mysql")]
            Backend::MySql => Some(mysql::pool::pool(db, max)),
            Backend::Sqlite => Some(db.clone()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The most connections `db`'s pool opens, where the relay's wake-up needs to know
    /// (Postgres, whose `LISTEN` holds one); `None` elsewhere, for a mock connection, or
    /// without the `postgres` feature.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn pool_size(self, db: &DatabaseConnection) -> Option<u32> {
        match self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres => postgres::pool::size(db),
            _ => None,
        }
    }
}

/// `status` as an SQL string literal, `'WAIT'`, for the relay's hot statements: a generic plan
/// cannot see a bound status, so Postgres would plan `status = $1` anew at every execution.
pub(crate) fn status_literal(status: EventStatus) -> Expr {
    Expr::cust(format!("'{}'", status.as_str()))
}
