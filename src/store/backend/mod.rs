//! Each backend in a file of its own, with the same function names (the habit of sqlx's
//! drivers): [`postgres`], [`mysql`] (MySQL and MariaDB), [`sqlite`], and [`unsupported`] for a
//! backend sea-orm may add later, whose every answer is "not supported". This module is the one
//! place that maps a [`DbBackend`] to its file ([`Dialect::of`]) and asks the capability
//! questions the statements are built from: [`Dialect::returning`], [`Dialect::skip_locked`],
//! [`Dialect::listen`].
//!
//! | question | Postgres | MySQL / MariaDB | SQLite | other |
//! | --- | --- | --- | --- | --- |
//! | `INSERT`/`UPDATE ... RETURNING` | yes | no (`LAST_INSERT_ID()`; MariaDB has no `UPDATE ... RETURNING`) | yes (3.35+) | not supported |
//! | `FOR UPDATE SKIP LOCKED` | yes | yes (MySQL 8, MariaDB 10.6) | no (one writer at a time) | not supported |
//! | `LISTEN`/`NOTIFY` wake-up | yes | no (polls) | no (polls) | not supported |
pub(super) mod mysql;
mod postgres;
mod sqlite;
mod unsupported;

use std::time::Duration;

use sea_orm::sea_query::{InsertStatement, IntoIden, OnConflict};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult, Statement, TransactionTrait};
use sea_orm_outbox_entity::event_record::Model;

use crate::config::OrderedPolicy;

/// The SQL dialect of one backend: which file answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL and MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
    /// A backend this crate does not know: every capability is "no", every statement fails.
    Unsupported,
}

impl Dialect {
    /// The dialect of `backend`; [`Dialect::Unsupported`] for one this crate does not know.
    pub fn of(backend: DbBackend) -> Dialect {
        match backend {
            DbBackend::Postgres => Dialect::Postgres,
            DbBackend::MySql => Dialect::MySql,
            DbBackend::Sqlite => Dialect::Sqlite,
            _ => Dialect::Unsupported,
        }
    }

    /// The cargo feature of this crate that serves the backend, and whether this build has it;
    /// `None` when no feature does ([`Dialect::Unsupported`]).
    pub fn feature(self) -> Option<(&'static str, bool)> {
        match self {
            Dialect::Postgres => Some(postgres::FEATURE),
            Dialect::MySql => Some(mysql::FEATURE),
            Dialect::Sqlite => Some(sqlite::FEATURE),
            Dialect::Unsupported => unsupported::FEATURE,
        }
    }

    /// Whether `INSERT ... RETURNING` and `UPDATE ... RETURNING` exist.
    pub fn returning(self) -> bool {
        match self {
            Dialect::Postgres => postgres::RETURNING,
            Dialect::MySql => mysql::RETURNING,
            Dialect::Sqlite => sqlite::RETURNING,
            Dialect::Unsupported => unsupported::RETURNING,
        }
    }

    /// Whether a locking read can skip rows other transactions hold (`SKIP LOCKED`).
    pub fn skip_locked(self) -> bool {
        match self {
            Dialect::Postgres => postgres::SKIP_LOCKED,
            Dialect::MySql => mysql::SKIP_LOCKED,
            Dialect::Sqlite => sqlite::SKIP_LOCKED,
            Dialect::Unsupported => unsupported::SKIP_LOCKED,
        }
    }

    /// Whether relays can be woken by `LISTEN`/`NOTIFY` on commit.
    pub fn listen(self) -> bool {
        match self {
            Dialect::Postgres => postgres::LISTEN,
            Dialect::MySql => mysql::LISTEN,
            Dialect::Sqlite => sqlite::LISTEN,
            Dialect::Unsupported => unsupported::LISTEN,
        }
    }

    /// The SQL text of the database clock's `now`, or `now ± d` for `Some((sign, d))`.
    pub fn now_sql(self, offset: Option<(char, Duration)>) -> String {
        match self {
            Dialect::Postgres => postgres::now_sql(offset),
            Dialect::MySql => mysql::now_sql(offset),
            Dialect::Sqlite => sqlite::now_sql(offset),
            Dialect::Unsupported => unsupported::now_sql(offset),
        }
    }

    /// `insert` (built for `backend`) as a statement that skips a row whose unique `key` is
    /// taken and then reports 0 rows affected.
    pub fn insert_if_absent<I, C>(
        self,
        backend: DbBackend,
        insert: &InsertStatement,
        key: I,
    ) -> Statement
    where
        I: IntoIterator<Item = C>,
        C: IntoIden,
    {
        match self {
            Dialect::MySql => mysql::insert_if_absent(backend, insert),
            Dialect::Unsupported => unsupported::insert_if_absent(backend, insert),
            Dialect::Postgres | Dialect::Sqlite => on_conflict_do_nothing(backend, insert, key),
        }
    }

    /// `stmt`, an `UPDATE`/`DELETE` naming its rows by id, made to read through the primary key.
    ///
    /// # Errors
    /// [`DbErr::Custom`] for a statement of another form (MySQL) or an unsupported backend.
    pub fn by_primary_key(self, stmt: Statement) -> Result<Statement, DbErr> {
        match self {
            Dialect::Postgres => postgres::by_primary_key(stmt),
            Dialect::MySql => mysql::by_primary_key(stmt),
            Dialect::Sqlite => sqlite::by_primary_key(stmt),
            Dialect::Unsupported => unsupported::by_primary_key(stmt),
        }
    }

    /// The event insert, made to also wake listening relays at commit when `notify` (see
    /// [`crate::store::dialect::with_wakeup`]).
    pub fn with_wakeup(self, insert: Statement, notify: Option<std::time::Duration>) -> Statement {
        match self {
            Dialect::Postgres => postgres::with_wakeup(insert, notify),
            Dialect::MySql => mysql::with_wakeup(insert, notify),
            Dialect::Sqlite => sqlite::with_wakeup(insert, notify),
            Dialect::Unsupported => unsupported::with_wakeup(insert, notify),
        }
    }

    /// The wake-up notification as a statement of its own (Postgres: `SELECT
    /// pg_notify('sea_orm_outbox', '')`; `None` on backends without one): sent after an insert
    /// whose slot key may have gone stale (see [`crate::store::insert_event`]).
    pub fn wakeup_alone(self) -> Option<Statement> {
        match self {
            Dialect::Postgres => Some(postgres::wakeup_alone()),
            Dialect::MySql | Dialect::Sqlite | Dialect::Unsupported => None,
        }
    }

    /// Claims up to `n` due events for `owner` in one round trip (Postgres; SQLite after a
    /// lock-free read of whether anything is due) or one short transaction (MySQL/MariaDB);
    /// see [`crate::store::claim_batch`].
    ///
    /// # Errors
    /// Any database error; [`DbErr::Custom`] on an unsupported backend.
    pub async fn claim_batch<C>(self, db: &C, owner: &str, n: u64) -> Result<Vec<Model>, DbErr>
    where
        C: ConnectionTrait + TransactionTrait,
    {
        match self {
            Dialect::Postgres => postgres::claim_batch(db, owner, n).await,
            Dialect::MySql => mysql::claim_batch(db, owner, n).await,
            Dialect::Sqlite => sqlite::claim_batch(db, owner, n).await,
            Dialect::Unsupported => unsupported::claim_batch(db, owner, n).await,
        }
    }

    /// Step 1 of the ordered claim ([`crate::store::claim_ordered`]): claims up to `n` due
    /// heads of their keys for `owner` among the due rows `scan` says, the way
    /// [`Dialect::claim_batch`] claims (one `UPDATE ... RETURNING` on Postgres and SQLite, a
    /// short `READ COMMITTED` transaction on MySQL/MariaDB) over
    /// [`crate::store::ordered_heads_query`].
    ///
    /// # Errors
    /// Any database error; [`DbErr::Custom`] on an unsupported backend.
    pub async fn claim_ordered_heads<C>(
        self,
        db: &C,
        owner: &str,
        policy: OrderedPolicy,
        n: u64,
        scan: crate::store::HeadScan,
    ) -> Result<Vec<Model>, DbErr>
    where
        C: ConnectionTrait + TransactionTrait,
    {
        match self {
            Dialect::Postgres => postgres::claim_ordered_heads(db, owner, policy, n, scan).await,
            Dialect::MySql => mysql::claim_ordered_heads(db, owner, policy, n, scan).await,
            Dialect::Sqlite => sqlite::claim_ordered_heads(db, owner, policy, n, scan).await,
            Dialect::Unsupported => unsupported::claim_batch(db, owner, n).await,
        }
    }
}

impl Dialect {
    /// Whether one statement can mark a claim's deliveries `SUCCESS` and claim the next batch
    /// (data-modifying `WITH`: Postgres only), see [`crate::store::mark_success_and_claim_batch`].
    pub fn mark_and_claim_in_one(self) -> bool {
        self == Dialect::Postgres
    }

    /// The statement of [`crate::store::mark_success_and_claim_batch`]; `None` where
    /// [`Dialect::mark_and_claim_in_one`] is false.
    pub fn mark_success_and_claim_statement(
        self,
        done_ids: &[i64],
        done_owner: &str,
        owner: &str,
        n: u64,
    ) -> Option<Statement> {
        (self == Dialect::Postgres)
            .then(|| postgres::mark_success_and_claim_statement(done_ids, done_owner, owner, n))
    }

    /// Marks `done_ids` of the claim `done_owner` `SUCCESS` and claims up to `n` due events for
    /// `owner` in one statement; the rows marked and the events claimed.
    ///
    /// # Errors
    /// Any database error (then neither happened); [`DbErr::Custom`] where
    /// [`Dialect::mark_and_claim_in_one`] is false.
    pub async fn mark_success_and_claim<C: ConnectionTrait>(
        self,
        db: &C,
        done_ids: &[i64],
        done_owner: &str,
        owner: &str,
        n: u64,
    ) -> Result<(u64, Vec<Model>), DbErr> {
        match self {
            Dialect::Postgres => {
                postgres::mark_success_and_claim(db, done_ids, done_owner, owner, n).await
            }
            _ => Err(DbErr::Custom(format!(
                "{self:?}: no single statement marks and claims; mark, then claim"
            ))),
        }
    }
}

/// Runs an `UPDATE ... RETURNING *` claim (SQLite's batch claim, the ordered claim's heads on
/// Postgres and SQLite) and reads the claimed rows;
/// transient conflicts are retried.
async fn claim_returning<C: ConnectionTrait>(
    db: &C,
    stmt: &sea_orm::sea_query::UpdateStatement,
) -> Result<Vec<Model>, DbErr> {
    let rows = crate::store::retry_transient(|| db.query_all(stmt)).await?;
    rows.iter()
        .map(|r| Model::from_query_result(r, ""))
        .collect()
}

/// `INSERT ... ON CONFLICT (key) DO NOTHING` (Postgres, SQLite 3.24+).
fn on_conflict_do_nothing<I, C>(backend: DbBackend, insert: &InsertStatement, key: I) -> Statement
where
    I: IntoIterator<Item = C>,
    C: IntoIden,
{
    let mut insert = insert.clone();
    insert.on_conflict(OnConflict::columns(key).do_nothing().to_owned());
    backend.build(&insert)
}
