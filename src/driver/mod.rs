//! The driver: the only code that knows SQL and backends. The relay, the write path, the
//! wake-up, the pools and [`crate::ops`] ask it; none of them holds SQL text or branches on the
//! backend.
//!
//! [`Driver`] is chosen once from a connection's backend ([`Driver::of`]) and carries the
//! outbox table every statement names ([`Table`]: `t_event_record` unless the application's
//! [`crate::Outbox`] names another; [`Driver::with_table`]). A backend this crate does not know
//! has no driver, and is refused there: by [`crate::Worker::new`], by the first write
//! ([`insert_event`]), by each [`crate::ops`] function. Every difference between the backends
//! lives in the backend's own directory, whose files carry the same names so that
//! a reviewer compares them side by side:
//!
//! | file | Postgres (`postgres/`) | MySQL / MariaDB (`mysql/`) | SQLite (`sqlite/`) |
//! | --- | --- | --- | --- |
//! | `mod.rs`: clock, capabilities, statement forms | `CURRENT_TIMESTAMP`; status guards by id `(...) IS TRUE` | `UTC_TIMESTAMP(6)`; `FORCE INDEX (PRIMARY)`, `INSERT IGNORE` | fixed-width RFC 3339 text |
//! | `claim.rs`: the batch claim | one `UPDATE ... RETURNING`; mark and claim in one `WITH` | a `READ COMMITTED` transaction | a read, then `UPDATE ... RETURNING` |
//! | `ordered.rs`: the ordered claim's heads | checks on the window, `FOR UPDATE OF e` | a derived window, `STRAIGHT_JOIN` | `id IN (...)` |
//! | `error.rs`: error codes | SQLSTATE | error numbers | result codes |
//! | `pool.rs`: the leaked-transaction check | `transaction_timestamp()` | `@@in_transaction` | – (the pool handed over) |
//! | `notify.rs`, `listen.rs`: wake-on-commit | `pg_notify`, `LISTEN` | – (polls) | – (polls) |
//! | `simple.rs`: the simple protocol | values inlined | – | – |
//!
//! | capability | Postgres | MySQL / MariaDB | SQLite |
//! | --- | --- | --- | --- |
//! | `INSERT`/`UPDATE ... RETURNING` | yes | no (`LAST_INSERT_ID()`; MariaDB has no `UPDATE ... RETURNING`) | yes (3.35+) |
//! | `FOR UPDATE SKIP LOCKED` | yes | yes (MySQL 8, MariaDB 10.6) | no (one writer at a time) |
//! | `LISTEN`/`NOTIFY` wake-up | yes | no (polls) | no (polls) |
//!
//! Every time the outbox compares comes from the database clock ([`Driver::now`]), never the
//! application's, so that instances with skewed clocks cannot steal or keep leases wrongly
//! (the one use of the application's clock, the Postgres notify slot's lock key, is compared
//! with nothing). Within one statement every backend returns the same "now" for each use, so
//! `next_retry_time - update_time` is the back-off exactly. Durations are rendered into the
//! SQL as integer microseconds (Postgres, MySQL) or decimal seconds (SQLite) formatted from a
//! [`Duration`], so no user text reaches SQL.
//!
//! The statements common to every backend are built once with sea-query and rendered per
//! backend: `insert` (the event insert), `claim` (candidates, per-row and batch claims),
//! `ordered` (the ordered claim's heads of their keys), `runs` (the runs behind the heads),
//! `marks` (the owner-guarded transitions and lease renewal), `reclaim` (expired leases),
//! `admin` (the statements of [`crate::ops`]), `consumed` (the idempotent consumer's record),
//! and `by_ids` (the form of every statement that names its rows by id, which each backend
//! writes its own way). Each statement is built by one function and executed by another, so
//! its SQL is rendered per backend without a database (`tests/statements.rs` here). The rest
//! is shared machinery: `exec` (transient retries, the outcomes, the schema check), `relay_db`
//! (the relay's connection), and the backend-neutral halves of `error`, `pool` and `listen`;
//! `tests/` holds the driver's own suites.
pub mod admin;
mod by_ids;
mod claim;
pub mod consumed;
mod error;
mod exec;
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

pub use by_ids::{ByIds, InsertIfAbsent};
pub use claim::*;
pub use error::db_error_kind;
pub(crate) use error::is_transient;
pub use exec::*;
pub use insert::*;
pub(crate) use listen::{Heard, ListenFailure, Listener};
pub use marks::*;
pub use ordered::*;
// The channel the docs of the write path and the wake-up name.
#[allow(unused_imports)]
pub use postgres::WAKE_CHANNEL;
pub use reclaim::*;
pub use relay_db::RelayDb;
pub use table::Table;

/// How long a connection of a guarded pool may have been idle and still be handed out
/// without a check (1 second): one idle longer is checked again first (it may have died while
/// idle: a database restart, a pooler or firewall closing idle connections). Every connection
/// is checked when it is given back anyway.
pub const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
pub use runs::*;

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
    /// `mysql`, `sqlite`). sea-orm's drivers can be turned on by the application alone, but
    /// then the outbox would lack that backend's wake-up and error classification, so the
    /// worker refuses.
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
            Backend::Postgres => postgres::FEATURE,
            Backend::MySql => mysql::FEATURE,
            Backend::Sqlite => sqlite::FEATURE,
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

    /// Whether `INSERT ... RETURNING` and `UPDATE ... RETURNING` exist: Postgres and SQLite
    /// (3.35+) return a new row's id; MySQL and MariaDB report it as `LAST_INSERT_ID()`
    /// (sea-orm's `mariadb-use-returning` must stay off: MariaDB has no `UPDATE ...
    /// RETURNING`).
    pub fn returning(self) -> bool {
        match self.backend {
            Backend::Postgres => postgres::RETURNING,
            Backend::MySql => mysql::RETURNING,
            Backend::Sqlite => sqlite::RETURNING,
        }
    }

    /// Whether relays can be woken by `LISTEN`/`NOTIFY` on commit in this build (Postgres with
    /// the `postgres` feature).
    pub fn listens(self) -> bool {
        self.backend == Backend::Postgres && listen::BUILT
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

    /// `now - d` on the database clock.
    pub fn now_minus(self, d: Duration) -> Expr {
        Expr::cust(self.now_sql(Some(('-', d))))
    }

    /// The SQL text of the database clock's `now`, or `now ± d` for `Some((sign, d))`:
    ///
    /// | backend | now | now ± d |
    /// | --- | --- | --- |
    /// | Postgres | `CURRENT_TIMESTAMP` (`timestamptz`, microseconds) | `CURRENT_TIMESTAMP ± INTERVAL 'n microseconds'` |
    /// | MySQL / MariaDB | `UTC_TIMESTAMP(6)` (every connection's time zone agrees) | `UTC_TIMESTAMP(6) ± INTERVAL n MICROSECOND` |
    /// | SQLite | `strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')` | the same with a `'±s.ffffff seconds'` modifier |
    pub fn now_sql(self, offset: Option<(char, Duration)>) -> String {
        match self.backend {
            Backend::Postgres => postgres::now_sql(offset),
            Backend::MySql => mysql::now_sql(offset),
            Backend::Sqlite => sqlite::now_sql(offset),
        }
    }

    /// `"status" = <value>` as a statement that names its rows by id writes it: on Postgres
    /// `(...) IS TRUE`, so that only the id list can choose the index (see `postgres/mod.rs`);
    /// plain elsewhere.
    pub fn status_guard(self, value: Expr) -> Expr {
        let guard = Expr::col(Column::Status).eq(value);
        match self.backend {
            Backend::Postgres => postgres::primary_key_only(guard),
            Backend::MySql | Backend::Sqlite => guard,
        }
    }

    /// `stmt` as sent: read through the primary key alone (MySQL/MariaDB `FORCE INDEX
    /// (PRIMARY)`, see `mysql/by_ids.rs`; the other backends as sea-query writes it, their
    /// status guards already built by [`Driver::status_guard`]).
    pub fn by_ids(self, stmt: &ByIds) -> Statement {
        match self.backend {
            Backend::MySql => mysql::by_ids::through_primary_key(stmt),
            Backend::Postgres | Backend::Sqlite => stmt.plain(self.backend()),
        }
    }

    /// `insert` (into a table with the unique key `key`) as a statement that skips a row whose
    /// key is already taken instead of failing, and then reports 0 rows affected (1 when the
    /// row was written):
    ///
    /// | backend | SQL |
    /// | --- | --- |
    /// | Postgres, SQLite (3.24+) | `INSERT ... ON CONFLICT (key) DO NOTHING` |
    /// | MySQL / MariaDB | `INSERT IGNORE ...` |
    ///
    /// A plain `INSERT` hitting the key would fail, and on Postgres a failed statement aborts
    /// the whole transaction.
    pub fn insert_if_absent(self, insert: &InsertIfAbsent) -> Statement {
        match self.backend {
            Backend::MySql => mysql::by_ids::insert_ignore(insert),
            Backend::Postgres | Backend::Sqlite => insert.on_conflict_do_nothing(self.backend()),
        }
    }

    /// The event insert (`INSERT ... RETURNING "id"` where [`Driver::returning`]), made to also
    /// wake listening relays at commit when `notify` says so: on Postgres the notification is
    /// one more expression of the insert's `RETURNING` list (see `postgres/notify.rs`); the
    /// other backends poll and get `insert` unchanged.
    pub fn with_wakeup(self, insert: InsertStatement, notify: Option<Duration>) -> InsertStatement {
        match self.backend {
            Backend::Postgres => postgres::notify::with_wakeup(insert, notify),
            Backend::MySql | Backend::Sqlite => insert,
        }
    }

    /// The wake-up notification as a statement of its own (Postgres: `SELECT
    /// pg_notify('sea_orm_outbox', '')`, queued for the commit inside a transaction, delivered
    /// at once outside one); `None` on the backends that poll. Sent after an insert whose slot
    /// key may have gone stale (see [`insert_event`]).
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
    /// [`crate::guarded_pool`]), at most `max` connections, Postgres' named `name`; SQLite
    /// keeps `db` itself. `None` when this build lacks the backend's feature.
    pub(crate) fn guarded_pool(
        self,
        db: &DatabaseConnection,
        max: u32,
        name: Option<&str>,
    ) -> Option<DatabaseConnection> {
        match self.backend {
            Backend::Postgres => postgres::guarded_pool(db, max, name),
            Backend::MySql => mysql::guarded_pool(db, max),
            Backend::Sqlite => Some(db.clone()),
        }
    }

    /// The most connections `db`'s pool opens, where the relay's wake-up needs to know
    /// (Postgres, whose `LISTEN` holds one); `None` elsewhere.
    pub(crate) fn pool_size(self, db: &DatabaseConnection) -> Option<u32> {
        match self.backend {
            Backend::Postgres => postgres::pool_size(db),
            Backend::MySql | Backend::Sqlite => None,
        }
    }
}

/// `status` as an SQL string literal, `'WAIT'` (the statuses are ASCII words without quotes).
///
/// The relay's hot statements (the batch claim, the marks) write their statuses as literals,
/// not bound values: a prepared statement's generic plan does not know a bound status and
/// estimates `status = $1` as if every status were equally common, so Postgres would keep
/// planning those statements anew at every execution; with literals their generic plans are
/// their custom plans and each connection plans them once (see `postgres/claim.rs`).
pub(crate) fn status_literal(status: EventStatus) -> Expr {
    Expr::cust(format!("'{}'", status.as_str()))
}
