//! Errors of sea-orm-outbox.
use sea_orm::DbErr;

/// Why an event was refused before anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// A required text field is empty (or only whitespace).
    #[error("event field `{field}` must not be empty")]
    Empty {
        /// `biz_no` or `event_type`.
        field: &'static str,
    },
    /// A text field is longer than its column.
    #[error("event field `{field}` is {len} characters long; the column holds at most {max}")]
    TooLong {
        /// `biz_no` or `event_type`.
        field: &'static str,
        /// Its length in characters.
        len: usize,
        /// The column's limit in characters.
        max: usize,
    },
    /// A field holds a NUL character, which Postgres text columns cannot store.
    #[error("event field `{field}` contains a NUL character")]
    NulByte {
        /// `biz_no`, `event_type` or `payload`.
        field: &'static str,
    },
    /// The payload is larger than the configured maximum (bytes).
    #[error("event payload is {size} bytes; the limit is {max} bytes")]
    PayloadTooLarge {
        /// Payload size in bytes.
        size: usize,
        /// The limit in bytes ([`crate::EventLimits::max_payload_bytes`]).
        max: usize,
    },
    /// The payload bytes are not valid UTF-8 text.
    #[error("event payload is not valid UTF-8: {0}")]
    InvalidUtf8(String),
    /// The payload value could not be serialized to JSON.
    #[error("event payload could not be serialized to JSON: {0}")]
    Serialize(String),
    /// A header's name or value is not one the broker carries faithfully, or the name is one
    /// the broker or the outbox reserves (see [`crate::NewEvent::header`]).
    #[error("event header `{name}`: {reason}")]
    InvalidHeader {
        /// The header's name (cut to 64 characters when it is longer).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The headers together are larger than the limit (bytes of their JSON form).
    #[error("event headers are {size} bytes; the limit is {max} bytes")]
    HeadersTooLarge {
        /// Their size in bytes, as stored (a JSON object).
        size: usize,
        /// The limit in bytes ([`crate::EventLimits::max_headers_bytes`]).
        max: usize,
    },
}

/// Every error the library returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The event was refused before anything was written; the surrounding transaction was not
    /// committed by this library.
    #[error("invalid event: {0}")]
    InvalidEvent(#[from] EventError),
    /// A worker or publisher configuration that cannot work.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A table of the outbox (`t_event_record`, or `t_consumed_message` for the consumer helper)
    /// does not exist in this database; the database error names it.
    #[error(
        "an outbox table does not exist: run the migration first (`outbox migrate up`, \
         `sea-orm-cli migrate up -d migration` or `Migrator::up(&db, None)`): {0}"
    )]
    TableMissing(#[source] DbErr),
    /// `t_event_record` lacks a column this version of the library reads or writes: a
    /// migration released after the table was created has not been applied (the database
    /// error names the column).
    #[error(
        "t_event_record lacks a column of this sea-orm-outbox version: apply the outbox's newer \
         migration `m20261201_000003_add_event_headers` (adds `headers`): with your own \
         Migrator, add a module `m20261201_000003_add_event_headers` holding `pub use \
         sea_orm_outbox_migration::AddEventHeaders as Migration;`, list it, and run `sea-orm-cli \
         migrate up` (docs/migrations.md); with the standalone one, `outbox migrate up` or \
         `Migrator::up(&db, None)`: {0}"
    )]
    SchemaOutdated(#[source] DbErr),
    /// An argument that cannot work, such as an empty or over-long consumer group or message
    /// id, or a zero batch size.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A query run inside [`crate::transactional_publish`] (most likely an
    /// `ActiveModelBehavior` hook) timed out waiting for a pool connection, usually because it
    /// used the application's pool instead of the connection it was handed while the
    /// transaction held one of that pool. The transaction was rolled back.
    #[error(
        "a query run inside transactional_publish (most likely an ActiveModelBehavior hook) \
         timed out waiting for a pool connection; if it used the application's pool instead of \
         the `db` it was handed, it competes with this transaction, which already holds a \
         connection of that pool: with one connection (SQLite with SeaORM's default options) it \
         can never succeed, with more it fails when other tasks hold the rest. Run it on the \
         hook's `db`, or give the pool more connections. The transaction was rolled back: {0}"
    )]
    PoolUsedInsideTransaction(#[source] DbErr),
    /// Any other database error.
    #[error("database error: {0}")]
    Db(#[source] DbErr),
    /// The message broker could not be reached or its client could not be set up (for example
    /// no name server or bootstrap server answers at the configured address).
    #[error("broker error: {0}")]
    Broker(String),
}

impl OutboxError {
    /// The kind of the database error inside ([`crate::db_error_kind`], judged by its code):
    /// `Some` for [`OutboxError::TableMissing`] and [`OutboxError::Db`], `None` for errors that
    /// are not the database's. The relay and the `outbox` tool decide on it (run again, wait for
    /// the server, tell a person to migrate).
    pub fn db_kind(&self) -> Option<crate::DbErrorKind> {
        match self {
            OutboxError::TableMissing(e)
            | OutboxError::SchemaOutdated(e)
            | OutboxError::PoolUsedInsideTransaction(e)
            | OutboxError::Db(e) => Some(crate::db_error_kind(e)),
            _ => None,
        }
    }
}

impl From<DbErr> for OutboxError {
    fn from(err: DbErr) -> Self {
        if is_missing_table(&err) {
            OutboxError::TableMissing(err)
        } else if is_missing_outbox_column(&err) {
            OutboxError::SchemaOutdated(err)
        } else {
            OutboxError::Db(err)
        }
    }
}

/// Whether `err` says an outbox table is missing: a missing table by the database's code
/// (Postgres 42P01, MySQL 1146, SQLite "no such table") that names `t_event_record` or
/// `t_consumed_message` (a missing table of the application's is a plain database error).
fn is_missing_table(err: &DbErr) -> bool {
    use crate::db_error::{db_error_kind, DbErrorKind};
    if db_error_kind(err) != DbErrorKind::MissingTable {
        return false;
    }
    let text = err.to_string();
    text.contains("t_event_record") || text.contains("t_consumed_message")
}

/// Whether `err` says a column the library added in a later migration is missing (Postgres
/// 42703, MySQL 1054, SQLite "no such column" / "has no column named") and names it.
fn is_missing_outbox_column(err: &DbErr) -> bool {
    use crate::db_error::{db_error_kind, DbErrorKind};
    if db_error_kind(err) != DbErrorKind::MissingColumn {
        return false;
    }
    // The column as each backend names it (an application's own `request_headers` is not it).
    let text = err.to_string();
    [
        "t_event_record.headers",
        "\"headers\"",
        "'headers'",
        "column named headers",
        "no such column: headers",
    ]
    .iter()
    .any(|form| text.contains(form))
}

/// Whether a failed publish may succeed if tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PublishErrorKind {
    /// Try again after back-off (broker down, timeout, throttled).
    Retryable,
    /// Can never succeed (message too large, bad topic name): the event goes straight to `FAIL`.
    Permanent,
    /// The publisher's own configuration or permissions are wrong (the broker rejected the
    /// credentials, or the user may not publish to the topic). The event is not at fault, so the attempt is not
    /// counted: the relay puts it back to `WAIT` with `retry_count` unchanged, `last_error`
    /// set, due again after a delay (the retry policy's `max_backoff`, at most 60 s), and logs
    /// ERROR (at most one line per worker every 10 s, with the count). It never becomes a dead
    /// letter because of this; it is delivered once the configuration is fixed.
    Configuration,
}

/// Why a [`crate::Publisher`] could not deliver a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?} publish error: {message}")]
pub struct PublishError {
    /// Retryable, permanent, or the publisher's configuration.
    pub kind: PublishErrorKind,
    /// What went wrong; stored in `t_event_record.last_error`.
    pub message: String,
}

impl PublishError {
    /// A failure worth retrying after back-off.
    pub fn retryable(message: impl Into<String>) -> Self {
        PublishError {
            kind: PublishErrorKind::Retryable,
            message: message.into(),
        }
    }

    /// A failure that can never succeed; the event goes to `FAIL` at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        PublishError {
            kind: PublishErrorKind::Permanent,
            message: message.into(),
        }
    }

    /// A failure caused by the publisher's own configuration or permissions, not by the event
    /// ([`PublishErrorKind::Configuration`]): the attempt is not counted.
    pub fn configuration(message: impl Into<String>) -> Self {
        PublishError {
            kind: PublishErrorKind::Configuration,
            message: message.into(),
        }
    }

    /// Whether trying again may succeed, and the attempt counts toward the retry limit.
    pub fn is_retryable(&self) -> bool {
        self.kind == PublishErrorKind::Retryable
    }

    /// Whether the publisher's configuration is at fault ([`PublishErrorKind::Configuration`]).
    pub fn is_configuration(&self) -> bool {
        self.kind == PublishErrorKind::Configuration
    }
}

/// Whether `err` is a transient conflict that the same statement may simply run again after:
/// a deadlock, a lock timeout or a serialization failure, judged by the database's code
/// ([`crate::db_error::db_error_kind`]: Postgres `40P01`, `55P03`, `40001`; MySQL 1213, 1205;
/// SQLite busy/locked, codes 5 and 6 with their extended forms).
pub fn is_transient(err: &DbErr) -> bool {
    crate::db_error::db_error_kind(err).is_transient()
}

/// Whether `err` says the database could not be reached, so that the same operation may
/// succeed once the server is back: an I/O error (connection refused or reset, host unreachable,
/// a name that does not resolve; not "permission denied" or an invalid input), a pool that
/// found no connection in time, or a server that refuses connections for the moment:
/// - Postgres SQLSTATE `08000`, `08001`, `08003`, `08006` (connection exception, cannot
///   connect, no connection, connection failure), `57P01`–`57P03` (shutting down, crash
///   recovery, starting up), `53300` (too many connections);
/// - MySQL/MariaDB error numbers 1040 (too many connections), 1053 (shutting down), 1152 and
///   1184 (aborted connection), 1158–1161 (network read/write errors), 1203 and 1226 (per-user
///   connection limits), 3032 (server offline mode). MySQL is judged by number, not SQLSTATE:
///   its class `08` also holds failures that never heal (1043 bad handshake, 1251 unsupported
///   authentication protocol).
///
/// Errors that waiting cannot fix are not connection errors: a malformed or unsupported URL,
/// TLS or protocol failures (Postgres `08P01`), a refused login, a missing database or table.
///
/// ```
/// use sea_orm::{DbErr, RuntimeErr};
/// use sea_orm_outbox::error::is_connection_error;
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let err = DbErr::Conn(RuntimeErr::SqlxError(sea_orm::sqlx::Error::Io(refused).into()));
/// assert!(is_connection_error(&err));
/// let no_driver = DbErr::Conn(RuntimeErr::Internal("no supporting driver".into()));
/// assert!(!is_connection_error(&no_driver));
/// ```
pub fn is_connection_error(err: &DbErr) -> bool {
    crate::db_error::db_error_kind(err) == crate::db_error::DbErrorKind::ConnectionLost
}

#[cfg(all(test, any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
mod tests {
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
