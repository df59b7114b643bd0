//! # sea-orm-outbox
//!
//! A Transactional Outbox for SeaORM on Postgres, MySQL/MariaDB and SQLite.
//!
//! Write the business row and its event in ONE transaction ([`OutboxExt::with_event`],
//! [`transactional_publish`]); a [`Worker`] in every instance of the service relays the events
//! to the broker through a [`Publisher`]: the one of a broker's own crate (the README lists
//! them), the in-memory and logging ones here, or your own. Many workers scan the same table
//! safely: each event is claimed by one conditional `UPDATE` decided by `rows_affected`, leased
//! for a while, and reclaimed if its sender dies. Delivery is at-least-once, so consumers must be idempotent (deduplicate on the
//! `eventId` property).
//!
//! The design follows a Java/Spring write-up of the pattern (the seed design restated in the
//! repository's design notes); the table, statements and most defaults (poll 5 s, batch 20,
//! n² × 5 s back-off, lease 10 min, reclaim every 60 s, send timeout 3 s) are that design's.
//!
//! Where the code lives: every statement and everything a backend does (its SQL, its clock,
//! its batch claim, wake-on-commit, the pool's leaked-transaction check, its error codes) is
//! the driver's, `src/driver/` with one directory per backend (`postgres/`, `mysql/`,
//! `sqlite/`). The write path ([`OutboxExt`]), the relay ([`Worker`]), the wake-up, the pools
//! ([`pool`]) and [`ops`] ask the driver; none of them holds SQL text or branches on the
//! backend.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod config;
pub mod consumer;
pub mod error;
pub mod event;
pub mod ext;
pub mod instance;
pub mod metrics;
pub mod ops;
#[cfg(feature = "opentelemetry")]
pub mod otel;
pub mod pool;
pub mod publisher;
pub mod redact;
pub mod relay;
pub mod retry;
// The driver (every statement, every backend's SQL and behaviour) is the crate's insides;
// its own tests (`driver/tests/`) reach it from inside the crate.
mod driver;
mod wake;

// The unit tests share the integration suites' helpers (`tests/common`), which name this
// crate `sea_orm_outbox` as the suites do.
#[cfg(test)]
extern crate self as sea_orm_outbox;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "../tests/common/mod.rs"]
mod common;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use config::{ClaimStrategy, OrderedPolicy, StatementProtocol, WorkerConfig};
pub use consumer::{consume_once, Consumed};
pub use driver::db_error_kind;
pub use error::DbErrorKind;
pub use error::{EventError, OutboxError, PublishError, PublishErrorKind};
pub use event::{
    EventLimits, NewEvent, DEFAULT_MAX_HEADERS_BYTES, DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_NOTIFY_INTERVAL, HEADER_NAME_MAX_LEN, OUTBOX_PROPERTY_NAMES,
};
pub use ext::{begin_write, transactional_publish, transactional_publish_limited, OutboxExt};
pub use instance::instance_id;
pub use ops::{BlockedKeys, DeadLetterOutcome, OutboxStats};
pub use pool::{guarded_pool, RelayPool};
pub use publisher::{InMemoryPublisher, LoggingPublisher, OutboxMessage, Publisher};
pub use redact::{redact_secrets, redact_url};
pub use relay::{maintenance, Worker, WorkerSummary};
pub use retry::{RetryDecision, RetryPolicy};
pub use sea_orm_migration::MigratorTrait;
pub use sea_orm_outbox_entity::consumed_message;
pub use sea_orm_outbox_entity::event_record;
pub use sea_orm_outbox_entity::EventStatus;
/// The outbox's migrations (crate `sea-orm-outbox-migration`): [`migration::migrations`] for
/// your own `Migrator`, or the standalone [`Migrator`].
pub use sea_orm_outbox_migration as migration;
pub use sea_orm_outbox_migration::Migrator;
pub use tokio_util::sync::CancellationToken;
