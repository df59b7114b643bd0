//! The one place that knows how each backend writes "now", "now + d" and "now - d", how it
//! returns a new row's id, and how it skips an insert whose unique key is taken.
//!
//! Every time the outbox compares comes from the database clock, never the application's, so
//! that instances with skewed clocks cannot steal or keep leases wrongly (the design's rule):
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

use sea_orm::sea_query::{Expr, InsertStatement, IntoIden, OnConflict};
use sea_orm::{DbBackend, DbErr, Statement};

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

/// The SQL text of `now` or `now ± d`.
pub fn now_sql(backend: DbBackend, offset: Option<(char, Duration)>) -> String {
    match (backend, offset) {
        (DbBackend::Postgres, None) => "CURRENT_TIMESTAMP".to_owned(),
        (DbBackend::Postgres, Some((sign, d))) => {
            format!(
                "(CURRENT_TIMESTAMP {sign} INTERVAL '{} microseconds')",
                d.as_micros()
            )
        }
        (DbBackend::MySql, None) => "UTC_TIMESTAMP(6)".to_owned(),
        (DbBackend::MySql, Some((sign, d))) => {
            format!(
                "(UTC_TIMESTAMP(6) {sign} INTERVAL {} MICROSECOND)",
                d.as_micros()
            )
        }
        // SQLite, and any backend added later that speaks its dialect.
        (_, None) => "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')".to_owned(),
        (_, Some((sign, d))) => format!(
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '{sign}{}.{:06} seconds')",
            d.as_secs(),
            d.subsec_micros()
        ),
    }
}

/// Whether `INSERT ... RETURNING id` is the way to learn a new row's id on `backend`.
///
/// Postgres and SQLite (3.35+) return it; MySQL and MariaDB report it as `LAST_INSERT_ID()`
/// (sea-orm's `mariadb-use-returning` must stay off: MariaDB has no `UPDATE ... RETURNING`).
pub fn insert_returns_id(backend: DbBackend) -> bool {
    !matches!(backend, DbBackend::MySql)
}

/// Whether `UPDATE ... RETURNING` exists on `backend` (Postgres, SQLite 3.35+; not MySQL or
/// MariaDB), which decides how [`super::claim_batch`] claims.
pub fn update_returns_rows(backend: DbBackend) -> bool {
    !matches!(backend, DbBackend::MySql)
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
/// whole transaction. MySQL gets `INSERT IGNORE` because sea-query's `ON DUPLICATE KEY UPDATE
/// k = k` polyfill counts a duplicate as 1 row under `CLIENT_FOUND_ROWS` (which sqlx sets).
/// `INSERT IGNORE` also turns other errors (over-long values, NULLs) into warnings: callers
/// validate the values first.
pub fn insert_if_absent<I, C>(backend: DbBackend, insert: &InsertStatement, key: I) -> Statement
where
    I: IntoIterator<Item = C>,
    C: IntoIden,
{
    match backend {
        DbBackend::MySql => {
            let mut stmt = backend.build(insert);
            stmt.sql = stmt.sql.replacen("INSERT ", "INSERT IGNORE ", 1);
            stmt
        }
        _ => {
            let mut insert = insert.clone();
            insert.on_conflict(OnConflict::columns(key).do_nothing().to_owned());
            backend.build(&insert)
        }
    }
}

/// `stmt`, an `UPDATE` or `DELETE` of one table whose `WHERE` names its rows by primary key
/// (`id IN (...)`), made to read the table through the primary key alone.
///
/// | backend | SQL |
/// | --- | --- |
/// | MySQL / MariaDB | `UPDATE t FORCE INDEX (PRIMARY) SET ...`, `DELETE t FROM t FORCE INDEX (PRIMARY) WHERE ...` |
/// | Postgres, SQLite | `stmt` unchanged |
///
/// Why: InnoDB locks every row an `UPDATE`/`DELETE` reads, not only those it changes, and in
/// autocommit under REPEATABLE READ it waits for a row another transaction holds. On a small or
/// young table MariaDB 10.11's optimizer reads `id IN (4 ids)` as a full scan of PRIMARY
/// (EXPLAIN: `type=index`, or `ALL` for a `DELETE`), so a mark of the relay's own `SENDING`
/// rows waited out `innodb_lock_wait_timeout` (50 s) on the uncommitted `WAIT` row of an open
/// business transaction (`innodb_lock_waits`: `X RECORD PRIMARY` on that row). Forced onto
/// PRIMARY the plan is `type=range`, one unique look-up per id, and locks only the rows named.
/// READ COMMITTED alone is no cure for a `DELETE` (InnoDB's semi-consistent read, which skips
/// a locked row that does not match, serves `UPDATE` only), and a single-table `DELETE` takes no
/// index hint, hence the multi-table form. Postgres takes no such locks: an `UPDATE` never waits
/// on a row that is invisible to it.
///
/// # Errors
/// [`DbErr::Custom`] when `stmt` is not of the form this expects (a programming error).
pub fn by_primary_key(backend: DbBackend, mut stmt: Statement) -> Result<Statement, DbErr> {
    if backend != DbBackend::MySql {
        return Ok(stmt);
    }
    // The multi-table DELETE form takes no ORDER BY or LIMIT (MySQL's grammar): refuse those
    // here rather than fail at run time on MySQL alone.
    let rewritten = if stmt.sql.contains(" ORDER BY ") || stmt.sql.contains(" LIMIT ") {
        None
    } else if let Some(rest) = stmt.sql.strip_prefix("DELETE FROM ") {
        rest.split_once(' ').map(|(table, tail)| {
            format!("DELETE {table} FROM {table} FORCE INDEX (PRIMARY) {tail}")
        })
    } else if stmt.sql.starts_with("UPDATE ") {
        stmt.sql
            .split_once(" SET ")
            .map(|(head, tail)| format!("{head} FORCE INDEX (PRIMARY) SET {tail}"))
    } else {
        None
    };
    stmt.sql = rewritten.ok_or_else(|| {
        DbErr::Custom(format!(
            "by_primary_key: not a single-table UPDATE or DELETE without ORDER BY/LIMIT: {}",
            stmt.sql
        ))
    })?;
    Ok(stmt)
}

/// Whether this build of the crate has the feature for `backend` (`postgres`, `mysql`,
/// `sqlite`). sea-orm's drivers can be turned on by the application alone, but then the
/// outbox would lack that backend's wake-up and error classification, so the worker refuses.
///
/// # Errors
/// [`crate::OutboxError::InvalidConfig`] naming the feature to turn on, or saying that the
/// backend is not supported.
pub fn check_backend_feature(backend: DbBackend) -> Result<(), crate::OutboxError> {
    let (feature, enabled) = match backend {
        DbBackend::Postgres => ("postgres", cfg!(feature = "postgres")),
        DbBackend::MySql => ("mysql", cfg!(feature = "mysql")),
        DbBackend::Sqlite => ("sqlite", cfg!(feature = "sqlite")),
        _ => {
            return Err(crate::OutboxError::InvalidConfig(format!(
                "{backend:?} is not a backend sea-orm-outbox supports (Postgres, MySQL/MariaDB, SQLite)"
            )))
        }
    };
    if enabled {
        Ok(())
    } else {
        Err(crate::OutboxError::InvalidConfig(format!(
            "the database is {backend:?}, but sea-orm-outbox was built without its `{feature}` \
             feature: add `features = [\"{feature}\"]` to the sea-orm-outbox dependency"
        )))
    }
}

/// The Postgres `LISTEN`/`NOTIFY` channel on which event inserts wake relays.
pub const WAKE_CHANNEL: &str = "sea_orm_outbox";

/// On Postgres, wraps the event insert (`INSERT ... RETURNING id`) so that the same round trip
/// queues `pg_notify('sea_orm_outbox', '')`:
/// `WITH ins AS (<insert>), woke AS (SELECT pg_notify(...)) SELECT ins.id FROM ins, woke`.
/// The notification is delivered at commit and dropped on rollback; identical notifications of
/// one transaction are delivered once. Other backends get `insert` unchanged (they poll).
///
/// `notify` false (the event's [`crate::NewEvent::notify_relays`]) leaves `insert` unchanged
/// on every backend.
pub fn with_wakeup(backend: DbBackend, insert: Statement, notify: bool) -> Statement {
    match backend {
        DbBackend::Postgres if notify => Statement {
            sql: format!(
                "WITH ins AS ({}), woke AS (SELECT pg_notify('{WAKE_CHANNEL}', '')) \
                 SELECT ins.id FROM ins, woke",
                insert.sql
            ),
            ..insert
        },
        _ => insert,
    }
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
