//! The one place that knows how each backend writes "now", "now + d" and "now - d", how it
//! returns a new row's id, and how it skips an insert whose unique key is taken.
//!
//! Every time the outbox compares comes from the database clock, never the application's, so
//! that instances with skewed clocks cannot steal or keep leases wrongly (the design's rule;
//! the one use of the application's clock, the Postgres notify slot's lock key in
//! [`with_wakeup`], is compared with nothing):
//!
//! | backend | now | now ± d |
//! | --- | --- | --- |
//! | Postgres | `CURRENT_TIMESTAMP` (`timestamptz`, microseconds) | `CURRENT_TIMESTAMP ± INTERVAL 'n microseconds'` |
//! | MySQL / MariaDB | `UTC_TIMESTAMP(6)` (any session time zone agrees) | `UTC_TIMESTAMP(6) ± INTERVAL n MICROSECOND` |
//! | SQLite | `strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')` | the same with a `'±s.ffffff seconds'` modifier |
//!
//! Postgres' `CURRENT_TIMESTAMP` is the start of the transaction; the relay's statements run
//! alone (autocommit), where it equals the statement's time. Within one statement every backend
//! returns the same "now" for each use, so `next_retry_time - update_time` is the back-off exactly.
//!
//! SQLite keeps time as text: every value the outbox writes has the one fixed-width form
//! `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (SQLite's clock has milliseconds; the last three digits
//! are zero), so text order is time order and chrono reads it back as RFC 3339.
//!
//! Durations are rendered into the SQL as integer microseconds (Postgres, MySQL) or decimal
//! seconds (SQLite) formatted by this module from a [`Duration`], so no user text reaches SQL.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, InsertStatement, IntoIden};
use sea_orm::{DbBackend, DbErr, Statement};
use sea_orm_outbox_entity::event_record::{Column, Entity};
use sea_orm_outbox_entity::EventStatus;

pub use super::backend::Dialect;

/// `status` as an SQL string literal, `'WAIT'` (the statuses are ASCII words without quotes).
///
/// The relay's hot statements (the batch claim, the marks) write their statuses as literals,
/// not bound values: a prepared statement's generic plan does not know a bound status and
/// estimates `status = $1` as if every status were equally common, so Postgres would keep
/// planning those statements anew at every execution; with literals their generic plans are
/// their custom plans and each connection plans them once (see
/// [`crate::store::claim_limit_bucket`]).
pub(crate) fn status_literal(status: EventStatus) -> Expr {
    Expr::cust(format!("'{}'", status.as_str()))
}

/// `"t_event_record"."status" = '<status>'` ([`status_literal`]).
pub(crate) fn status_is(status: EventStatus) -> Expr {
    Expr::col((Entity, Column::Status)).eq(status_literal(status))
}

/// `now` on `backend`'s clock.
pub fn now(backend: DbBackend) -> Expr {
    Expr::cust(now_sql(backend, None))
}

/// `now + d` on `backend`'s clock.
pub fn now_plus(backend: DbBackend, d: Duration) -> Expr {
    Expr::cust(now_sql(backend, Some(('+', d))))
}

/// `now - d` on `backend`'s clock.
pub fn now_minus(backend: DbBackend, d: Duration) -> Expr {
    Expr::cust(now_sql(backend, Some(('-', d))))
}

/// The SQL text of `now` or `now ± d` (the table above).
pub fn now_sql(backend: DbBackend, offset: Option<(char, Duration)>) -> String {
    Dialect::of(backend).now_sql(offset)
}

/// Whether `INSERT ... RETURNING id` is the way to learn a new row's id on `backend`.
///
/// Postgres and SQLite (3.35+) return it; MySQL and MariaDB report it as `LAST_INSERT_ID()`
/// (sea-orm's `mariadb-use-returning` must stay off: MariaDB has no `UPDATE ... RETURNING`).
pub fn insert_returns_id(backend: DbBackend) -> bool {
    Dialect::of(backend).returning()
}

/// Whether `UPDATE ... RETURNING` exists on `backend` (Postgres, SQLite 3.35+; not MySQL or
/// MariaDB), which decides how [`super::claim_batch`] claims.
pub fn update_returns_rows(backend: DbBackend) -> bool {
    Dialect::of(backend).returning()
}

/// `insert` as a statement that skips a row whose unique key (`key`) is already taken instead of
/// failing, and then reports 0 rows affected (1 when the row was written).
///
/// | backend | SQL |
/// | --- | --- |
/// | Postgres, SQLite (3.24+) | `INSERT ... ON CONFLICT (key) DO NOTHING` |
/// | MySQL / MariaDB | `INSERT IGNORE ...` |
///
/// A plain `INSERT` hitting the key would fail, and on Postgres a failed statement aborts the
/// whole transaction.
pub fn insert_if_absent<I, C>(backend: DbBackend, insert: &InsertStatement, key: I) -> Statement
where
    I: IntoIterator<Item = C>,
    C: IntoIden,
{
    Dialect::of(backend).insert_if_absent(backend, insert, key)
}

/// `stmt`, an `UPDATE` or `DELETE` of one table whose `WHERE` names its rows by primary key
/// (`id IN (...)`), made to read the table through the primary key alone: on MySQL/MariaDB
/// `UPDATE t FORCE INDEX (PRIMARY) SET ...` / `DELETE t FROM t FORCE INDEX (PRIMARY) WHERE ...`
/// (why: see the MySQL backend file, `store/backend/mysql.rs`); on Postgres every status guard
/// written `("t_event_record"."status" = ...) IS TRUE`, which no status-leading index can serve
/// (why: `store/backend/postgres.rs`, `by_primary_key`); SQLite unchanged. `stmt` must carry its
/// values as bound parameters (apply this before any inlining).
///
/// # Errors
/// [`DbErr::Custom`] when `stmt` is not of the form this expects (a programming error), or the
/// backend is not supported.
pub fn by_primary_key(backend: DbBackend, stmt: Statement) -> Result<Statement, DbErr> {
    Dialect::of(backend).by_primary_key(stmt)
}

/// Whether this build of the crate has the feature for `backend` (`postgres`, `mysql`,
/// `sqlite`). sea-orm's drivers can be turned on by the application alone, but then the
/// outbox would lack that backend's wake-up and error classification, so the worker refuses.
///
/// # Errors
/// [`crate::OutboxError::InvalidConfig`] naming the feature to turn on, or saying that the
/// backend is not supported.
pub fn check_backend_feature(backend: DbBackend) -> Result<(), crate::OutboxError> {
    match Dialect::of(backend).feature() {
        None => Err(crate::OutboxError::InvalidConfig(format!(
            "{backend:?} is not a backend sea-orm-outbox supports (Postgres, MySQL/MariaDB, SQLite)"
        ))),
        Some((_, true)) => Ok(()),
        Some((feature, false)) => Err(crate::OutboxError::InvalidConfig(format!(
            "the database is {backend:?}, but sea-orm-outbox was built without its `{feature}` \
             feature: add `features = [\"{feature}\"]` to the sea-orm-outbox dependency"
        ))),
    }
}

/// The Postgres `LISTEN`/`NOTIFY` channel on which event inserts wake relays.
pub const WAKE_CHANNEL: &str = "sea_orm_outbox";

/// The first key of the advisory locks that share the wake-up notification among concurrent
/// writers (`pg_try_advisory_xact_lock(NOTIFY_SLOT_LOCK_CLASS, slot)`): 1329745752, `"OBOX"`
/// in ASCII. See [`crate::NewEvent::notify_interval`].
pub const NOTIFY_SLOT_LOCK_CLASS: i32 = 0x4F42_4F58;

/// On Postgres, wraps the event insert (`INSERT ... RETURNING id`) so that the same round trip
/// queues `pg_notify('sea_orm_outbox', '')`, delivered at commit and dropped on rollback
/// (identical notifications of one transaction are delivered once). Other backends get
/// `insert` unchanged (they poll).
///
/// `notify` is the event's [`crate::NewEvent::notify_relays`] and
/// [`crate::NewEvent::notify_interval`]:
/// - `None` leaves `insert` unchanged on every backend;
/// - `Some(Duration::ZERO)`: `<insert>, pg_notify(...) IS NOT NULL AS notified` (every event
///   notifies; the notify is one more expression of the insert's `RETURNING` list);
/// - `Some(interval)`: the notification only when the insert gets the advisory lock of the
///   current slot of `interval` (the slot's number by this process's clock: whole
///   milliseconds since the Unix epoch divided by `interval` in whole milliseconds rounded
///   up, modulo 2^31 − 1, bound as the last parameter), so that one
///   open transaction at a time notifies per slot: `<insert>, CASE WHEN
///   pg_try_advisory_xact_lock(1329745752, $n::int) THEN pg_notify(...) IS NOT NULL ELSE false
///   END AS notified` (the second column says whether it notified).
///
/// The insert's `RETURNING` list carries the notification rather than a `WITH` around the
/// insert: a data-modifying CTE makes every write slower (BENCHMARKS.md).
pub fn with_wakeup(backend: DbBackend, insert: Statement, notify: Option<Duration>) -> Statement {
    Dialect::of(backend).with_wakeup(insert, notify)
}

/// On Postgres, `SELECT pg_notify('sea_orm_outbox', '')`: the wake-up as a statement of its own
/// (queued for the commit inside a transaction, delivered at once outside one); `None` on the
/// backends that poll.
pub(crate) fn wakeup_alone(backend: DbBackend) -> Option<Statement> {
    Dialect::of(backend).wakeup_alone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::{Alias, Query};

    #[test]
    fn insert_if_absent_per_backend() {
        let mut insert = Query::insert();
        insert
            .into_table(Alias::new("t"))
            .columns([Alias::new("k"), Alias::new("v")])
            .values_panic([1.into(), 2.into()]);
        let key = || [Alias::new("k")];
        assert_eq!(
            insert_if_absent(DbBackend::MySql, &insert, key()).sql,
            "INSERT IGNORE INTO `t` (`k`, `v`) VALUES (?, ?)"
        );
        assert_eq!(
            insert_if_absent(DbBackend::Postgres, &insert, key()).sql,
            r#"INSERT INTO "t" ("k", "v") VALUES ($1, $2) ON CONFLICT ("k") DO NOTHING"#
        );
        assert_eq!(
            insert_if_absent(DbBackend::Sqlite, &insert, key()).sql,
            r#"INSERT INTO "t" ("k", "v") VALUES (?, ?) ON CONFLICT ("k") DO NOTHING"#
        );
    }

    #[test]
    fn by_primary_key_per_backend() {
        let update = Statement::from_string(
            DbBackend::MySql,
            "UPDATE `t` SET `a` = ? WHERE `id` IN (?, ?)",
        );
        assert_eq!(
            by_primary_key(DbBackend::MySql, update.clone())
                .expect("update")
                .sql,
            "UPDATE `t` FORCE INDEX (PRIMARY) SET `a` = ? WHERE `id` IN (?, ?)"
        );
        let delete =
            Statement::from_string(DbBackend::MySql, "DELETE FROM `t` WHERE `id` IN (?, ?)");
        assert_eq!(
            by_primary_key(DbBackend::MySql, delete)
                .expect("delete")
                .sql,
            "DELETE `t` FROM `t` FORCE INDEX (PRIMARY) WHERE `id` IN (?, ?)"
        );
        let select = Statement::from_string(DbBackend::MySql, "SELECT 1");
        assert!(by_primary_key(DbBackend::MySql, select).is_err());
        let limited =
            Statement::from_string(DbBackend::MySql, "DELETE FROM `t` WHERE `id` > ? LIMIT 10");
        assert!(by_primary_key(DbBackend::MySql, limited).is_err());
        let pg = Statement::from_string(DbBackend::Postgres, r#"UPDATE "t" SET "a" = $1"#);
        assert_eq!(
            by_primary_key(DbBackend::Postgres, pg).expect("pg").sql,
            r#"UPDATE "t" SET "a" = $1"#
        );
    }

    #[test]
    fn renders_each_backend() {
        let d = Duration::from_millis(1500);
        assert_eq!(now_sql(DbBackend::Postgres, None), "CURRENT_TIMESTAMP");
        assert_eq!(
            now_sql(DbBackend::Postgres, Some(('+', d))),
            "(CURRENT_TIMESTAMP + INTERVAL '1500000 microseconds')"
        );
        assert_eq!(
            now_sql(DbBackend::MySql, Some(('-', d))),
            "(UTC_TIMESTAMP(6) - INTERVAL 1500000 MICROSECOND)"
        );
        assert_eq!(
            now_sql(DbBackend::Sqlite, Some(('+', d))),
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '+1.500000 seconds')"
        );
    }
}
