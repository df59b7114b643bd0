//! # sea-orm-outbox-rocketmq
//!
//! The RocketMQ publisher of [sea-orm-outbox](https://docs.rs/sea-orm-outbox), built on the
//! rocketmq-rust 1.0 client (`rocketmq-client-rust`).
//!
//! Each [`OutboxMessage`](sea_orm_outbox::OutboxMessage) becomes one message on the configured
//! topic: body = payload, keys = `biz_no`, tag = `event_type`, user properties `eventId`,
//! `eventType`, `bizNo` and the event's headers. Only a `SEND_OK` result counts as delivered.
//! Failures are classified by the client error's code (its `Display` is redacted): transport
//! errors, time-outs, other send statuses and broker errors are retryable; a message the broker
//! can never accept (too large, empty, illegal topic, a reserved property name) is permanent and
//! the event goes straight to `FAIL` with the reason.
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, Worker, WorkerConfig};
//! use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};
//!
//! // ROCKETMQ_NAMESRV_ADDR, ROCKETMQ_PRODUCER_GROUP, OUTBOX_TOPIC, ROCKETMQ_ACCESS_KEY, ROCKETMQ_SECRET_KEY
//! let config = RocketMqConfig::from_env()?;
//! let publisher = Arc::new(RocketMqPublisher::start(config).await?);
//! let worker = Worker::new(db, publisher.clone(), WorkerConfig::default().service_name("order"))?;
//! let cancel = CancellationToken::new();
//! let summary = worker.run(cancel).await; // until cancelled
//! drop(worker);
//! if let Ok(publisher) = Arc::try_unwrap(publisher) {
//!     publisher.shutdown().await;
//! }
//! # let _ = summary; Ok(()) }
//! ```
//!
//! Events written for RocketMQ are checked against its rules at write time with
//! [`EVENT_LIMITS`] (or [`RocketMqConfig::event_limits`], which follows the configured message
//! size): give them to the core's `Outbox` (`Outbox::new().limits(EVENT_LIMITS)`) that writes
//! the events.
//!
//! One home for each concern: `config` ([`RocketMqConfig`] and its checks), `limits` (the
//! message size and the reserved property names: [`EVENT_LIMITS`]), `runtime` (the runtime
//! owner, telemetry guard and client runtime every client needs), `producer`
//! ([`RocketMqPublisher`]), `routing` (which broker a send avoids under [`Failover::Outbox`]),
//! `errors` ([`classify`]: client errors as retryable or permanent) and `consumer`
//! ([`RocketMqConsumer`], a small consumer for tests and examples that read back what the
//! relay sent).
#![deny(missing_docs)]
// The rocketmq-rust client's futures are deep; its own examples raise the limit the same way.
#![recursion_limit = "512"]
#![warn(clippy::unwrap_used)]

mod config;
mod consumer;
mod credentials;
mod errors;
mod limits;
mod producer;
mod routing;
mod runtime;

pub use config::{
    Failover, RocketMqConfig, DEFAULT_BROKER_AVOIDANCE, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_NAMESRV_ADDR, DEFAULT_PRODUCER_GROUP, DEFAULT_SEND_TIMEOUT,
    DEFAULT_TOPIC, ENV_FAILOVER, ENV_MAX_BATCH_BYTES, ENV_MAX_MESSAGE_BYTES, ENV_NAMESRV_ADDR,
    ENV_PRODUCER_GROUP, ENV_TOPIC, ENV_TOPICS, ENV_VERIFY_CREDENTIALS,
};
pub use consumer::{ReceivedMessage, RocketMqConsumer};
pub use credentials::{Credentials, Secret, ENV_ACCESS_KEY, ENV_SECRET_KEY};
pub use errors::classify;
pub use limits::{
    EVENT_LIMITS, MAX_PROPERTIES_BYTES, RESERVED_PROPERTY_NAMES, RESERVED_PROPERTY_PREFIXES,
};
pub use producer::RocketMqPublisher;
