//! What kind of database failure an error is, judged by the code the database gave it
//! (Postgres SQLSTATE, MySQL/MariaDB error number, SQLite result code), never by its text
//! where a code exists. The relay and the `outbox` tool decide on [`DbErrorKind`]: run the
//! statement again, wait for the server, or tell a person to run the migration.
//!
//! | kind | Postgres (SQLSTATE) | MySQL / MariaDB (error number) | SQLite (result code) |
//! | --- | --- | --- | --- |
//! | [`DbErrorKind::Deadlock`] | `40P01` | 1213 | – (one writer at a time) |
//! | [`DbErrorKind::LockTimeout`] | `55P03` (`lock_timeout`) | 1205 | 5 `SQLITE_BUSY`, 6 `SQLITE_LOCKED` (and their extended codes) |
//! | [`DbErrorKind::SerializationFailure`] | `40001` | – (InnoDB reports conflicts as 1213) | – |
//! | [`DbErrorKind::MissingTable`] | `42P01` | 1146 | 1 `SQLITE_ERROR` whose message is "no such table" (SQLite has no code of its own for it) |
//! | [`DbErrorKind::MissingColumn`] | `42703` | 1054 | 1 `SQLITE_ERROR` whose message is "no such column" or "… has no column named …" |
//! | [`DbErrorKind::ConnectionLost`] | class `08` but `08P01`, `57P01`–`57P03`, `53300` | 1040, 1053, 1152, 1158–1161, 1184, 1203, 1226, 1927, 3032 | – |
//!
//! I/O errors (refused, reset, closed mid-query, a name that does not resolve; not "permission
//! denied" or invalid input) and a pool that found no connection in time are
//! [`DbErrorKind::ConnectionLost`] on every backend. Sources: the PostgreSQL manual's
//! "PostgreSQL Error Codes" appendix, MariaDB's and MySQL's server error reference, SQLite's
//! "Result and Error Codes".
use sea_orm::DbErr;

/// The kind of a database error, for deciding what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// The database broke a deadlock by aborting this statement (or its transaction).
    Deadlock,
    /// A lock could not be had in time (MySQL `innodb_lock_wait_timeout`, Postgres
    /// `lock_timeout`, SQLite busy).
    LockTimeout,
    /// A serializable transaction conflicted with another (Postgres).
    SerializationFailure,
    /// A table the statement names does not exist.
    MissingTable,
    /// A column the statement names does not exist (a migration was not applied).
    MissingColumn,
    /// The server could not be reached or the connection broke; the same operation may
    /// succeed once it is back.
    ConnectionLost,
    /// Anything else (constraint violations, syntax, permissions, ...).
    Other,
}

impl DbErrorKind {
    /// Whether the same statement may simply run again: a deadlock, a lock timeout or a
    /// serialization failure (the failed run changed nothing).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            DbErrorKind::Deadlock | DbErrorKind::LockTimeout | DbErrorKind::SerializationFailure
        )
    }
}

/// The kind of `err` (see the module's table).
///
/// Without any of the crate's backend features there is no driver error to read: only a pool
/// timeout is recognised ([`DbErrorKind::ConnectionLost`]); the rest is
/// [`DbErrorKind::Other`].
pub fn db_error_kind(err: &DbErr) -> DbErrorKind {
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    {
        sqlx_kind(err)
    }
    #[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
    {
        match err {
            DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout) => {
                DbErrorKind::ConnectionLost
            }
            _ => DbErrorKind::Other,
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn sqlx_kind(err: &DbErr) -> DbErrorKind {
    use sea_orm::sqlx::Error as SqlxErr;
    use sea_orm::{ConnAcquireErr, RuntimeErr};
    let e = match err {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => return DbErrorKind::ConnectionLost,
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return DbErrorKind::Other,
    };
    match e.as_ref() {
        SqlxErr::Io(io) => match io.kind() {
            std::io::ErrorKind::PermissionDenied
            | std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::Unsupported => DbErrorKind::Other,
            _ => DbErrorKind::ConnectionLost,
        },
        SqlxErr::PoolTimedOut => DbErrorKind::ConnectionLost,
        SqlxErr::Database(db_err) => database_kind(db_err.as_ref()),
        _ => DbErrorKind::Other,
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn database_kind(db_err: &dyn sea_orm::sqlx::error::DatabaseError) -> DbErrorKind {
    #[cfg(feature = "mysql")]
    if let Some(m) = db_err.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>() {
        return mysql_kind(m.number());
    }
    #[cfg(feature = "sqlite")]
    if db_err
        .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
        .is_some()
    {
        // sqlx gives SQLite's extended result code as the error's code.
        let code = db_err
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .unwrap_or(0);
        return sqlite_kind(code, db_err.message());
    }
    postgres_kind(db_err.code().as_deref().unwrap_or_default())
}

/// The kind of Postgres SQLSTATE `code`.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn postgres_kind(code: &str) -> DbErrorKind {
    match code {
        "40P01" => DbErrorKind::Deadlock,
        "55P03" => DbErrorKind::LockTimeout,
        "40001" => DbErrorKind::SerializationFailure,
        "42P01" => DbErrorKind::MissingTable,
        "42703" => DbErrorKind::MissingColumn,
        // 08P01 (protocol violation) is class 08 but waiting does not heal it.
        "08P01" => DbErrorKind::Other,
        "57P01" | "57P02" | "57P03" | "53300" => DbErrorKind::ConnectionLost,
        c if c.starts_with("08") => DbErrorKind::ConnectionLost,
        _ => DbErrorKind::Other,
    }
}

/// The kind of MySQL/MariaDB error `number`. Judged by number, not SQLSTATE: MySQL's class
/// `08` also holds failures that never heal (1043 bad handshake, 1251 unsupported
/// authentication protocol), and a deadlock (1213) carries SQLSTATE `40001`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn mysql_kind(number: u16) -> DbErrorKind {
    match number {
        1213 => DbErrorKind::Deadlock,
        1205 => DbErrorKind::LockTimeout,
        1146 => DbErrorKind::MissingTable,
        1054 => DbErrorKind::MissingColumn,
        1040 | 1053 | 1152 | 1158..=1161 | 1184 | 1203 | 1226 | 1927 | 3032 => {
            DbErrorKind::ConnectionLost
        }
        _ => DbErrorKind::Other,
    }
}

/// The kind of SQLite (extended) result `code` with `message`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_kind(code: i32, message: &str) -> DbErrorKind {
    match code & 0xff {
        5 | 6 => DbErrorKind::LockTimeout,
        1 if message.starts_with("no such table") => DbErrorKind::MissingTable,
        1 if message.starts_with("no such column") || message.contains("has no column named") => {
            DbErrorKind::MissingColumn
        }
        _ => DbErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(postgres_kind("40P01"), DbErrorKind::Deadlock);
        assert_eq!(postgres_kind("40001"), DbErrorKind::SerializationFailure);
        assert_eq!(postgres_kind("55P03"), DbErrorKind::LockTimeout);
        assert_eq!(postgres_kind("42P01"), DbErrorKind::MissingTable);
        assert_eq!(postgres_kind("42703"), DbErrorKind::MissingColumn);
        assert_eq!(mysql_kind(1054), DbErrorKind::MissingColumn);
        assert_eq!(
            sqlite_kind(1, "table t_event_record has no column named headers"),
            DbErrorKind::MissingColumn
        );
        assert_eq!(
            sqlite_kind(1, "no such column: headers"),
            DbErrorKind::MissingColumn
        );
        assert_eq!(postgres_kind("08006"), DbErrorKind::ConnectionLost);
        assert_eq!(postgres_kind("57P01"), DbErrorKind::ConnectionLost);
        assert_eq!(postgres_kind("08P01"), DbErrorKind::Other);
        assert_eq!(postgres_kind("23505"), DbErrorKind::Other);
        assert_eq!(mysql_kind(1213), DbErrorKind::Deadlock);
        assert_eq!(mysql_kind(1205), DbErrorKind::LockTimeout);
        assert_eq!(mysql_kind(1146), DbErrorKind::MissingTable);
        assert_eq!(mysql_kind(1927), DbErrorKind::ConnectionLost);
        assert_eq!(mysql_kind(1043), DbErrorKind::Other);
        assert_eq!(mysql_kind(1062), DbErrorKind::Other);
        assert_eq!(
            sqlite_kind(5, "database is locked"),
            DbErrorKind::LockTimeout
        );
        assert_eq!(
            sqlite_kind(517, "database is locked"),
            DbErrorKind::LockTimeout
        );
        assert_eq!(
            sqlite_kind(6, "database table is locked"),
            DbErrorKind::LockTimeout
        );
        assert_eq!(
            sqlite_kind(1, "no such table: t_event_record"),
            DbErrorKind::MissingTable
        );
        assert_eq!(
            sqlite_kind(1, "near \"x\": syntax error"),
            DbErrorKind::Other
        );
        assert_eq!(
            sqlite_kind(2067, "UNIQUE constraint failed"),
            DbErrorKind::Other
        );
        assert!(DbErrorKind::Deadlock.is_transient());
        assert!(!DbErrorKind::MissingTable.is_transient());
    }
}
