//! # sea-orm-outbox-redis
//!
//! The Redis Streams publisher of [sea-orm-outbox](https://docs.rs/sea-orm-outbox), built on
//! the [`redis`] crate (tokio, `ConnectionManager`).
//!
//! Each [`OutboxMessage`](sea_orm_outbox::OutboxMessage) becomes one entry appended with
//! `XADD <stream_prefix>:<event_type> [MAXLEN ~ N] * ...` (an id Redis assigns), with the
//! fields `eventId`, `eventType`, `bizNo`, `payload` and one field `h:<name>` per event header
//! (the trace context among them). A relay's batch goes as one pipeline of `XADD`s with a
//! result per command. Delivery is at-least-once: a consumer deduplicates on `eventId`.
//! Failures are classified by the client error's kind and the server's error code
//! ([`classify`]): connection errors, time-outs and busy servers are retryable, rejected
//! credentials or permissions are the publisher's configuration, and an entry larger than
//! [`RedisConfig::max_message_bytes`] is permanent (the event goes straight to `FAIL`).
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, Worker, WorkerConfig};
//! use sea_orm_outbox_redis::{RedisConfig, RedisPublisher};
//!
//! // REDIS_URL, REDIS_USERNAME, REDIS_PASSWORD, OUTBOX_REDIS_STREAM_PREFIX, OUTBOX_REDIS_MAXLEN
//! let config = RedisConfig::from_env()?;
//! let publisher = Arc::new(RedisPublisher::start(config).await?);
//! let worker = Worker::new(db, publisher.clone(), WorkerConfig::default())?;
//! let cancel = CancellationToken::new();
//! let summary = worker.run(cancel).await; // until cancelled
//! drop(worker);
//! if let Ok(publisher) = Arc::try_unwrap(publisher) {
//!     publisher.shutdown().await;
//! }
//! # let _ = summary; Ok(()) }
//! ```
//!
//! One home for each concern: `config` ([`RedisConfig`] and its checks), `credentials`
//! ([`Secret`], never printed, and [`redact_url`]), `entry` (the fields of a stream entry and
//! its `XADD`), `producer` ([`RedisPublisher`]), `errors` ([`classify`]: client errors as
//! retryable, permanent or configuration) and `consumer` ([`RedisStreamConsumer`], a small
//! consumer for tests and examples that read back what the relay sent).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod config;
mod consumer;
mod credentials;
mod entry;
mod errors;
mod producer;

pub use config::{
    RedisConfig, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SEND_TIMEOUT, DEFAULT_STREAM_PREFIX,
    DEFAULT_URL, ENV_MAX_LEN, ENV_MAX_MESSAGE_BYTES, ENV_SEND_TIMEOUT_MS, ENV_STREAM_PREFIX,
    ENV_URL, MAX_MESSAGE_BYTES_LIMIT, MAX_SEND_TIMEOUT,
};
pub use consumer::{ReceivedEntry, RedisStreamConsumer};
pub use credentials::{redact_url, Secret, ENV_PASSWORD, ENV_USERNAME};
pub use entry::{
    FIELD_BIZ_NO, FIELD_EVENT_ID, FIELD_EVENT_TYPE, FIELD_PAYLOAD, HEADER_FIELD_PREFIX,
};
pub use errors::classify;
pub use producer::RedisPublisher;
