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
//! "Result and Error Codes". Each backend's codes are read by its driver
//! (`src/driver/<backend>/error.rs`).
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
    crate::driver::error_kind(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_kinds() {
        assert!(DbErrorKind::Deadlock.is_transient());
        assert!(DbErrorKind::LockTimeout.is_transient());
        assert!(!DbErrorKind::MissingTable.is_transient());
        assert_eq!(
            db_error_kind(&DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)),
            DbErrorKind::ConnectionLost
        );
    }
}
