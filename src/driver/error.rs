//! What kind of database failure an error is ([`crate::db_error::DbErrorKind`]): sqlx's error
//! read here, the database's own code by the backend's `error.rs` (Postgres SQLSTATE,
//! MySQL/MariaDB error number, SQLite result code), never by its text where a code exists.
use sea_orm::DbErr;

use crate::db_error::DbErrorKind;

/// The kind of `err` (see [`crate::db_error`]'s table).
///
/// Without any of the crate's backend features there is no driver error to read: only a pool
/// timeout is recognised ([`DbErrorKind::ConnectionLost`]); the rest is
/// [`DbErrorKind::Other`].
pub(crate) fn error_kind(err: &DbErr) -> DbErrorKind {
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

/// I/O errors (refused, reset, closed mid-query, a name that does not resolve; not
/// "permission denied" or invalid input) and a pool that found no connection in time are
/// [`DbErrorKind::ConnectionLost`] on every backend; a database's error is judged by its code.
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

/// The kind of a database's error: MySQL/MariaDB and SQLite errors are told by their type,
/// anything else is read as a Postgres SQLSTATE.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn database_kind(db_err: &dyn sea_orm::sqlx::error::DatabaseError) -> DbErrorKind {
    if let Some(kind) = super::mysql::error::of(db_err) {
        return kind;
    }
    if let Some(kind) = super::sqlite::error::of(db_err) {
        return kind;
    }
    super::postgres::error::kind(db_err.code().as_deref().unwrap_or_default())
}
