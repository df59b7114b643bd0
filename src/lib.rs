//! # sea-orm-outbox
//!
//! A Transactional Outbox for SeaORM on Postgres, MySQL/MariaDB and SQLite.
//!
//! Write the business row and its event in ONE transaction ([`OutboxExt::with_event`],
//! [`transactional_publish`]); a [`Worker`] in every instance of the service relays the events
//! to the broker through a [`Publisher`]: the one of a broker's own crate (the README lists
//! them), the in-memory and logging ones here, or your own. Many workers scan the same table
//! safely: each event is claimed by one conditional `UPDATE` decided by `rows_affected`, leased
//! for a while, and reclaimed if its sender dies. Delivery is at-least-once, so consumers must
//! be idempotent ([`consumer::consume_once`] deduplicates on the `eventId` property).
//!
//! Operating it: [`ops`] (stats, dead letters, purge, relay heartbeats, health), [`metrics`]
//! (the metric names), [`migration`] (the tables), [`event_record`] (the table's entity).
//! ARCHITECTURE.md maps the code.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod config;
pub mod consumer;
mod driver;
mod error;
mod event;
mod ext;
mod instance;
mod local_wake;
pub mod metrics;
pub mod ops;
#[cfg(feature = "opentelemetry")]
pub mod otel;
mod outbox;
mod pool;
mod publisher;
mod relay;
mod retry;
mod wake;

// The unit tests share the integration suites' helpers (`tests/common`), which name this crate.
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

pub use config::{ClaimStrategy, Completion, OrderedPolicy, StatementProtocol, WorkerConfig};
pub use error::{
    DbErrorKind, EventError, FailureKind, OutboxError, PublishError, PublishErrorKind,
};
pub use event::{EventLimits, NewEvent};
pub use ext::{begin_write, transactional_publish, OutboxExt};
pub use outbox::Outbox;
pub use pool::{guarded_pool, RelayPool};
pub use publisher::{
    send_in_key_rounds, InMemoryPublisher, LoggingPublisher, OutboxMessage, Publisher, Secret,
};
pub use relay::{Worker, WorkerSummary};
pub use retry::{HealPolicy, RetryPolicy};
pub use sea_orm_outbox_entity::{event_record, EventStatus};
/// The outbox's migrations (crate `sea-orm-outbox-migration`): [`migration::migrations`] for
/// your own `Migrator`, or the standalone [`Migrator`].
pub use sea_orm_outbox_migration as migration;
pub use sea_orm_outbox_migration::Migrator;
pub use tokio_util::sync::CancellationToken;
