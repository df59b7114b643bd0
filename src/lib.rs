//! # sea-orm-outbox
//!
//! A Transactional Outbox for SeaORM on Postgres, MySQL/MariaDB and SQLite.
//!
//! Write the business row and its event in ONE transaction ([`OutboxExt::with_event`],
//! [`transactional_publish`]); a [`Worker`] in every instance of the service relays the events
//! to the broker. Many workers scan the same table safely: each event is claimed by one
//! conditional `UPDATE` decided by `rows_affected`, leased for a while, and reclaimed if its
//! sender dies. Delivery is at-least-once, so consumers must be idempotent (deduplicate on the
//! `eventId` property).
//!
//! The design follows a Java/Spring write-up of the pattern (see the project's DESIGN.md); the
//! table, statements, defaults (poll 5 s, batch 20, 3 retries with n² × 5 s back-off, lease
//! 10 min, reclaim every 60 s, send timeout 3 s) are that design's.
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
pub mod publisher;
pub mod redact;
pub mod relay;
pub mod retry;
pub mod store;
mod wake;

pub use config::{ClaimStrategy, WorkerConfig};
pub use consumer::{consume_once, Consumed};
pub use entity::consumed_message;
pub use entity::event_record;
pub use entity::EventStatus;
pub use error::{EventError, OutboxError, PublishError, PublishErrorKind};
pub use event::{EventLimits, NewEvent, DEFAULT_MAX_PAYLOAD_BYTES};
pub use ext::{transactional_publish, transactional_publish_limited, OutboxExt};
pub use instance::instance_id;
pub use migration::{self, Migrator, MigratorTrait};
pub use ops::{DeadLetterOutcome, OutboxStats};
pub use publisher::{InMemoryPublisher, LoggingPublisher, OutboxMessage, Publisher};
pub use redact::{redact_secrets, redact_url};
pub use relay::{wait_until, Worker, WorkerSummary};
pub use retry::{RetryDecision, RetryPolicy};
pub use tokio_util::sync::CancellationToken;
