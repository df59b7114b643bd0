//! Why a command failed: the message printed (redacted, by `main`) and the exit status.
use std::time::Duration;

use sea_orm_outbox::DbErrorKind;
use sea_orm_outbox::OutboxError;

/// Why a command failed; printed redacted by `main`.
pub(crate) enum Failure {
    /// No database URL given.
    NoUrl,
    /// The connection could not be opened.
    Connect(sea_orm::DbErr),
    /// `relay` could not reach the database within `--connect-timeout`.
    ConnectGaveUp {
        /// The database URL, redacted.
        database: String,
        /// The `--connect-timeout`.
        waited: Duration,
        /// Connection attempts made.
        attempts: u32,
        /// The error of the last attempt that finished before the deadline (`None` if none did).
        last: Option<String>,
    },
    /// An outbox operation failed.
    Outbox(OutboxError),
    /// A migration failed.
    Migration(sea_orm::DbErr),
    /// `dead retry/discard <id>` found no FAIL row with that id.
    NotDeadLetter(i64),
    /// Writing JSON failed.
    Json(serde_json::Error),
    /// The command line asks for something the command cannot do (exit status 2, as clap's
    /// own usage errors).
    Usage(String),
    /// `console` could not listen on its address.
    Listen(std::net::SocketAddr, std::io::Error),
}

impl From<OutboxError> for Failure {
    fn from(e: OutboxError) -> Self {
        Failure::Outbox(e)
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Json(e)
    }
}

impl Failure {
    /// The process's exit status: 3 when the outbox table is missing or lacks a newer
    /// migration's column, 2 for a usage error, else 1.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Failure::Outbox(OutboxError::TableMissing(_) | OutboxError::SchemaOutdated(_)) => 3,
            Failure::Usage(_) => 2,
            _ => 1,
        }
    }

    /// The message printed after `error: ` (not yet redacted).
    pub(crate) fn message(&self) -> String {
        match self {
            Failure::NoUrl => "no database URL: pass --database-url or set DATABASE_URL".into(),
            Failure::Connect(e) => format!("cannot connect to the database: {e}"),
            Failure::ConnectGaveUp {
                database,
                waited,
                attempts,
                last,
            } => format!(
                "cannot connect to the database {database} within {} (--connect-timeout; \
                 {attempts} attempt(s)): {}",
                humantime::format_duration(*waited),
                last.as_deref().unwrap_or("no answer in time")
            ),
            Failure::Outbox(OutboxError::TableMissing(e)) => format!(
                "the outbox table does not exist in this database: the migration must be run \
                 first (`outbox migrate up` for t_event_record; a table of another --table, \
                 `create_outbox_table` in a migration of your own). ({e})"
            ),
            Failure::Outbox(OutboxError::SchemaOutdated(e)) => format!(
                "the outbox's tables lack a part of this version: run the newer migrations first \
                 (with your own Migrator: list `m20261201_000003_add_event_headers` and \
                 `m20261206_000005_create_t_outbox_relay` in it, modules re-exporting \
                 `sea_orm_outbox_migration::AddEventHeaders` and `CreateOutboxRelay` as \
                 `Migration`, and run `sea-orm-cli migrate up`; with the standalone one: `outbox \
                 migrate up`). ({e})"
            ),
            Failure::Outbox(e) => e.to_string(),
            Failure::Migration(e) => format!("migration failed: {e}"),
            Failure::NotDeadLetter(id) => {
                format!(
                    "event {id} is not a dead letter (no FAIL row with that id); nothing changed"
                )
            }
            Failure::Json(e) => format!("cannot write JSON: {e}"),
            Failure::Usage(m) => m.clone(),
            Failure::Listen(addr, e) => format!("cannot listen on {addr}: {e}"),
        }
    }

    /// Whether the database could not be reached (worth trying again), as opposed to a
    /// failure that waiting cannot fix (bad URL, refused login, missing table).
    pub(crate) fn is_connection_failure(&self) -> bool {
        match self {
            Failure::Connect(e) | Failure::Outbox(OutboxError::Db(e)) => {
                OutboxError::Db(e.clone()).db_kind() == Some(DbErrorKind::ConnectionLost)
            }
            _ => false,
        }
    }

    /// The underlying error, without this tool's prefix.
    pub(crate) fn cause(&self) -> String {
        match self {
            Failure::Connect(e) => e.to_string(),
            other => other.message(),
        }
    }
}
