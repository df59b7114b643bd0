//! The RocketMQ publisher (cargo feature `rocketmq`, on by default), built on the rocketmq-rust
//! 1.0 client (`rocketmq-client-rust`).
//!
//! Each [`OutboxMessage`](super::OutboxMessage) becomes one message on the configured topic:
//! body = payload, keys = `biz_no`, tag = `event_type`, user properties `eventId`, `eventType`,
//! `bizNo`. Only a `SEND_OK` result counts as delivered. Failures are classified by the client
//! error's code (its `Display` is redacted): transport errors, time-outs, other send statuses
//! and broker errors are retryable; a message the broker can never accept (too large, empty,
//! illegal topic) is permanent and the event goes straight to `FAIL` with the reason.
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, RocketMqConfig, RocketMqPublisher, Worker, WorkerConfig};
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
//! One home for each concern: `config` ([`RocketMqConfig`] and its checks), `runtime` (the
//! runtime owner, telemetry guard and client runtime every client needs), `producer`
//! ([`RocketMqPublisher`]), `routing` (which broker a send avoids under
//! [`Failover::Outbox`]), `errors` ([`classify`]: client errors as retryable or permanent) and,
//! with the hidden `test-support` feature only, `consumer` (a small consumer for the crate's
//! own tests and examples; not an API).
mod config;
#[cfg(feature = "test-support")]
mod consumer;
mod credentials;
mod errors;
mod producer;
mod routing;
mod runtime;

pub use config::{
    Failover, RocketMqConfig, DEFAULT_BROKER_AVOIDANCE, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_NAMESRV_ADDR, DEFAULT_PRODUCER_GROUP, DEFAULT_SEND_TIMEOUT,
    DEFAULT_TOPIC, ENV_FAILOVER, ENV_MAX_BATCH_BYTES, ENV_MAX_MESSAGE_BYTES, ENV_NAMESRV_ADDR,
    ENV_PRODUCER_GROUP, ENV_TOPIC, ENV_TOPICS, ENV_VERIFY_CREDENTIALS,
};
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub use consumer::{ReceivedMessage, RocketMqConsumer};
pub use credentials::{Credentials, SecretKey, ENV_ACCESS_KEY, ENV_SECRET_KEY};
pub use errors::classify;
pub use producer::RocketMqPublisher;
