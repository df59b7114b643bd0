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
    /// The event's due time is further out than [`crate::NewEvent::MAX_DELAY`].
    #[error("event is due in {seconds} s; the longest delay is {max} s")]
    DelayTooLong {
        /// The delay asked for, in seconds rounded up (from the application's clock for an
        /// instant).
        seconds: u64,
        /// [`crate::NewEvent::MAX_DELAY`] in seconds.
        max: u64,
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
    /// A table of the outbox (its [`crate::Outbox`]'s, or `t_consumed_message` for the
    /// consumer helper) does not exist in this database; the database error names it.
    #[error(
        "an outbox table does not exist: run the migration first (`outbox migrate up`, \
         `sea-orm-cli migrate up -d migration` or `Migrator::up(&db, None)`; a table not named \
         t_event_record: `create_outbox_table` in a migration of your own): {0}"
    )]
    TableMissing(#[source] DbErr),
    /// The outbox table lacks a column this version of the library reads or writes, or the
    /// relays' heartbeat table `t_outbox_relay` is missing: a newer migration has not been
    /// applied (the database error names the column or the table).
    #[error(
        "the outbox's tables lack a part of this sea-orm-outbox version: apply the outbox's newer \
         migrations (`m20261201_000003_add_event_headers` adds the column `headers`, \
         `m20261206_000005_create_t_outbox_relay` the relays' heartbeat table \
         `t_outbox_relay`): with your own Migrator, add a module of each name holding `pub use \
         sea_orm_outbox_migration::AddEventHeaders as Migration;` (`CreateOutboxRelay`), list \
         them, and run `sea-orm-cli migrate up` (docs/migrations.md); with the standalone one, \
         `outbox migrate up` or `Migrator::up(&db, None)`: {0}"
    )]
    SchemaOutdated(#[source] DbErr),
    /// An argument that cannot work, such as an empty or over-long consumer group or message
    /// id, or a zero batch size.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A query run inside [`crate::transactional_publish`] (most likely a hook using the
    /// application's pool) timed out waiting for a pool connection; the transaction was rolled
    /// back.
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

/// Whether a failed publish may succeed if tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PublishErrorKind {
    /// Try again after back-off (broker down, timeout, throttled).
    Retryable,
    /// Can never succeed (message too large, bad topic name): the event goes straight to `FAIL`.
    Permanent,
    /// The publisher's own configuration or permissions are wrong (rejected credentials, no
    /// right to the topic). The attempt is not counted: the event goes back to `WAIT` with
    /// `retry_count` unchanged, due again after at most 60 s, and the relay logs ERROR (at most
    /// one line per worker every 10 s). It is delivered once the configuration is fixed.
    Configuration,
}

/// What kind of failure the relay recorded in `last_error`: it writes the kind's prefix before
/// the message (`retryable: send failed: connection refused`), so that the healing of dead letters
/// ([`crate::HealPolicy`]) and the fingerprints of [`crate::ops::dead_letter_groups`] can tell
/// the kinds apart. A `last_error` without one of these prefixes (written by an older version
/// or by hand) has no kind and is never healed.
///
/// ```
/// use sea_orm_outbox::FailureKind;
/// assert_eq!(FailureKind::of("retryable: broker busy"), Some(FailureKind::Retryable));
/// assert_eq!(FailureKind::of("broker busy"), None);
/// assert_eq!(FailureKind::Permanent.prefix(), "permanent: ");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FailureKind {
    /// `retryable: `: the publisher called the failure worth retrying
    /// ([`PublishErrorKind::Retryable`]: an outage, a busy broker, a timeout). The only kind
    /// a [`crate::HealPolicy`] heals.
    Retryable,
    /// `permanent: `: the publisher called the failure permanent ([`PublishErrorKind::Permanent`]:
    /// a message too large, refused as malformed).
    Permanent,
    /// `configuration: `: the publisher's own configuration or permissions failed
    /// ([`PublishErrorKind::Configuration`]); such an event goes back to `WAIT`, never `FAIL`.
    Configuration,
    /// `lease-expired: `: the event's lease expired (its sender died or hung mid-send) and the
    /// reclaim put it back, or made it a dead letter once its retries were used up: a message
    /// that kills its sender.
    LeaseExpired,
    /// `unmarked: `: the event was delivered, but marking it `SUCCESS` failed because of the
    /// row itself (a trigger, a constraint), and it was put back like a failed send.
    Unmarked,
}

impl FailureKind {
    /// Every kind, in the order of the enum.
    const ALL: [FailureKind; 5] = [
        FailureKind::Retryable,
        FailureKind::Permanent,
        FailureKind::Configuration,
        FailureKind::LeaseExpired,
        FailureKind::Unmarked,
    ];

    /// The kind's name: `retryable`, `permanent`, `configuration`, `lease-expired`,
    /// `unmarked`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Retryable => "retryable",
            FailureKind::Permanent => "permanent",
            FailureKind::Configuration => "configuration",
            FailureKind::LeaseExpired => "lease-expired",
            FailureKind::Unmarked => "unmarked",
        }
    }

    /// The prefix the relay writes before the message in `last_error`: the name, `:` and a
    /// space (`retryable: `).
    pub const fn prefix(self) -> &'static str {
        match self {
            FailureKind::Retryable => "retryable: ",
            FailureKind::Permanent => "permanent: ",
            FailureKind::Configuration => "configuration: ",
            FailureKind::LeaseExpired => "lease-expired: ",
            FailureKind::Unmarked => "unmarked: ",
        }
    }

    /// The kind whose prefix `last_error` starts with (exact, case-sensitive); `None` when it
    /// starts with none.
    pub fn of(last_error: &str) -> Option<FailureKind> {
        Self::ALL
            .into_iter()
            .find(|k| last_error.starts_with(k.prefix()))
    }

    /// `message` as the relay stores it in `last_error`: the kind's prefix, then the message.
    pub(crate) fn record(self, message: &str) -> String {
        format!("{}{message}", self.prefix())
    }
}

impl From<PublishErrorKind> for FailureKind {
    fn from(kind: PublishErrorKind) -> Self {
        match kind {
            PublishErrorKind::Retryable => FailureKind::Retryable,
            PublishErrorKind::Permanent => FailureKind::Permanent,
            PublishErrorKind::Configuration => FailureKind::Configuration,
        }
    }
}

/// Why a [`crate::Publisher`] could not deliver a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?} publish error: {message}")]
pub struct PublishError {
    /// Retryable, permanent, or the publisher's configuration.
    pub kind: PublishErrorKind,
    /// What went wrong; stored in `t_event_record.last_error` after the prefix of its kind
    /// ([`FailureKind::prefix`]).
    pub message: String,
}

impl PublishError {
    fn new(kind: PublishErrorKind, message: impl Into<String>) -> Self {
        PublishError {
            kind,
            message: message.into(),
        }
    }

    /// A failure worth retrying after back-off.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::new(PublishErrorKind::Retryable, message)
    }

    /// A failure that can never succeed; the event goes to `FAIL` at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(PublishErrorKind::Permanent, message)
    }

    /// A failure caused by the publisher's own configuration or permissions, not by the event
    /// ([`PublishErrorKind::Configuration`]): the attempt is not counted.
    pub fn configuration(message: impl Into<String>) -> Self {
        Self::new(PublishErrorKind::Configuration, message)
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

/// The kind of a database error ([`OutboxError::db_kind`]), judged by the code the database
/// gave it (never by its text where a code exists).
///
/// | kind | Postgres (SQLSTATE) | MySQL / MariaDB (error number) | SQLite (result code) |
/// | --- | --- | --- | --- |
/// | [`DbErrorKind::Deadlock`] | `40P01` | 1213 | – (one writer at a time) |
/// | [`DbErrorKind::LockTimeout`] | `55P03` (`lock_timeout`) | 1205 | 5 `SQLITE_BUSY`, 6 `SQLITE_LOCKED` (and their extended codes) |
/// | [`DbErrorKind::SerializationFailure`] | `40001` | – (InnoDB reports conflicts as 1213) | – |
/// | [`DbErrorKind::MissingTable`] | `42P01` | 1146 | 1 `SQLITE_ERROR` whose message is "no such table" (SQLite has no code of its own for it) |
/// | [`DbErrorKind::MissingColumn`] | `42703` | 1054 | 1 `SQLITE_ERROR` whose message is "no such column" or "… has no column named …" |
/// | [`DbErrorKind::ConnectionLost`] | class `08` but `08P01`, `57P01`–`57P03`, `53300` | 1040, 1053, 1152, 1158–1161, 1184, 1203, 1226, 1927, 3032 | – |
///
/// I/O errors (refused, reset, closed mid-query, a name that does not resolve) and a pool that
/// found no connection in time are [`DbErrorKind::ConnectionLost`] on every backend.
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
