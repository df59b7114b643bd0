//! What kind of database failure an error is ([`DbErrorKind`]): sqlx's error
//! read here, the database's own code by the backend's `error.rs` (Postgres SQLSTATE,
//! MySQL/MariaDB error number, SQLite result code), never by its text where a code exists.
use super::table::known_names;
use sea_orm::DbErr;

use crate::error::{DbErrorKind, OutboxError};

/// The kind of `err` (see [`DbErrorKind`]'s table); without a backend feature only a pool
/// timeout is recognised ([`DbErrorKind::ConnectionLost`]).
pub fn db_error_kind(err: &DbErr) -> DbErrorKind {
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    use sea_orm::RuntimeErr::SqlxError;
    match err {
        DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout) => DbErrorKind::ConnectionLost,
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        DbErr::Conn(SqlxError(e)) | DbErr::Exec(SqlxError(e)) | DbErr::Query(SqlxError(e)) => {
            sqlx_kind(e)
        }
        _ => DbErrorKind::Other,
    }
}

/// I/O errors (refused, reset, closed mid-query, a name that does not resolve; not
/// "permission denied" or invalid input) and a pool that found no connection in time are
/// [`DbErrorKind::ConnectionLost`] on every backend; a database's error is judged by its code.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn sqlx_kind(e: &sea_orm::sqlx::Error) -> DbErrorKind {
    use sea_orm::sqlx::Error as SqlxErr;
    match e {
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
    #[cfg(feature = "mysql")]
    if let Some(e) = db_err.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>() {
        return super::mysql::error::kind(e.number());
    }
    #[cfg(feature = "sqlite")]
    if db_err
        .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
        .is_some()
    {
        // sqlx gives SQLite's extended result code as the error's code.
        let code = db_err.code().and_then(|c| c.parse().ok()).unwrap_or(0);
        return super::sqlite::error::kind(code, db_err.message());
    }
    super::postgres::error::kind(db_err.code().as_deref().unwrap_or_default())
}

impl OutboxError {
    /// The kind of the database error inside ([`crate::DbErrorKind`], judged by its code):
    /// `Some` for the variants that hold a [`DbErr`], `None` for errors that are not the
    /// database's.
    pub fn db_kind(&self) -> Option<DbErrorKind> {
        match self {
            OutboxError::TableMissing(e)
            | OutboxError::SchemaOutdated(e)
            | OutboxError::PoolUsedInsideTransaction(e)
            | OutboxError::Db(e) => Some(db_error_kind(e)),
            _ => None,
        }
    }
}

impl From<DbErr> for OutboxError {
    fn from(err: DbErr) -> Self {
        if is_missing_relay_table(&err) {
            OutboxError::SchemaOutdated(err)
        } else if is_missing_table(&err) {
            OutboxError::TableMissing(err)
        } else if is_missing_outbox_column(&err) {
            OutboxError::SchemaOutdated(err)
        } else {
            OutboxError::Db(err)
        }
    }
}

/// Whether `err` says an outbox table is missing: [`DbErrorKind::MissingTable`] naming a
/// [`super::Table`] of this process or `t_consumed_message` (not an application's table).
fn is_missing_table(err: &DbErr) -> bool {
    if db_error_kind(err) != DbErrorKind::MissingTable {
        return false;
    }
    let text = err.to_string();
    names_word(&text, "t_consumed_message")
        || known_names().iter().any(|name| names_word(&text, name))
}

/// Whether `err` says a table of the relays' migration (`t_outbox_relay`, `t_outbox_counter`)
/// is missing.
fn is_missing_relay_table(err: &DbErr) -> bool {
    use sea_orm_outbox_migration::{COUNTER_TABLE, RELAY_TABLE};
    let text = err.to_string();
    db_error_kind(err) == DbErrorKind::MissingTable
        && (names_word(&text, RELAY_TABLE) || names_word(&text, COUNTER_TABLE))
}

/// Whether `text` holds `name` as a whole word (not inside a longer name: the table `events`
/// is not named by `order_events` nor by `events_archive`).
fn names_word(text: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(name).any(|(at, _)| {
        !word(text[..at].chars().next_back()) && !word(text[at + name.len()..].chars().next())
    })
}

/// Whether `err` is [`DbErrorKind::MissingColumn`] naming a column the library added in a
/// later migration.
fn is_missing_outbox_column(err: &DbErr) -> bool {
    if db_error_kind(err) != DbErrorKind::MissingColumn {
        return false;
    }
    // The column as each backend names it (an application's own `request_headers` is not it).
    let text = err.to_string();
    let qualified = known_names()
        .iter()
        .any(|name| text.contains(&format!("{name}.headers")));
    qualified
        || [
            "\"headers\"",
            "'headers'",
            "column named headers",
            "no such column: headers",
        ]
        .iter()
        .any(|form| text.contains(form))
}

/// Whether `err` is a transient conflict that the same statement may simply run again after:
/// a deadlock, a lock timeout or a serialization failure ([`db_error_kind`]).
pub(crate) fn is_transient(err: &DbErr) -> bool {
    db_error_kind(err).is_transient()
}

/// Whether `err` says the database could not be reached ([`DbErrorKind::ConnectionLost`]).
#[cfg(test)]
fn is_connection_error(err: &DbErr) -> bool {
    db_error_kind(err) == DbErrorKind::ConnectionLost
}

#[cfg(test)]
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod connection_tests {
    use std::io::{Error as IoError, ErrorKind};

    use sea_orm::sqlx::Error as SqlxErr;
    use sea_orm::{ConnAcquireErr, DbErr, RuntimeErr};

    use super::is_connection_error;

    fn conn(e: SqlxErr) -> DbErr {
        DbErr::Conn(RuntimeErr::SqlxError(e.into()))
    }

    #[test]
    fn connection_errors_are_told_from_the_rest() {
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(is_connection_error(&conn(SqlxErr::Io(IoError::from(kind)))));
        }
        let dns = IoError::other("failed to lookup address information: Name or service not known");
        assert!(is_connection_error(&conn(SqlxErr::Io(dns))));
        assert!(is_connection_error(&conn(SqlxErr::PoolTimedOut)));
        assert!(is_connection_error(&DbErr::ConnectionAcquire(
            ConnAcquireErr::Timeout
        )));
        let lost = DbErr::Query(RuntimeErr::SqlxError(
            SqlxErr::Io(IoError::from(ErrorKind::BrokenPipe)).into(),
        ));
        assert!(is_connection_error(&lost), "lost in the middle of a query");

        assert!(!is_connection_error(&conn(SqlxErr::Configuration(
            "invalid port number".into()
        ))));
        assert!(!is_connection_error(&conn(SqlxErr::Protocol(
            "unexpected response".into()
        ))));
        assert!(!is_connection_error(&DbErr::Conn(RuntimeErr::Internal(
            "The connection string 'foo://x' has no supporting driver.".into()
        ))));
        assert!(!is_connection_error(&DbErr::ConnectionAcquire(
            ConnAcquireErr::ConnectionClosed
        )));
        assert!(!is_connection_error(&DbErr::Custom("x".into())));
        let denied = IoError::from(ErrorKind::PermissionDenied);
        assert!(
            !is_connection_error(&conn(SqlxErr::Io(denied))),
            "a socket we may not open stays closed"
        );
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn a_table_is_named_as_a_whole_word() {
        assert!(names_word(
            r#"relation "outbox_events" does not exist"#,
            "outbox_events"
        ));
        assert!(names_word("no such table: app.events", "events"));
        assert!(names_word("Table 'test.events' doesn't exist", "events"));
        assert!(!names_word(
            r#"relation "order_events" does not exist"#,
            "events"
        ));
        assert!(!names_word("no such table: events_archive", "events"));
    }

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
