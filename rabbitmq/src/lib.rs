//! # sea-orm-outbox-rabbitmq
//!
//! The RabbitMQ publisher of [sea-orm-outbox](https://docs.rs/sea-orm-outbox), built on the
//! [lapin](https://docs.rs/lapin) AMQP 0-9-1 client.
//!
//! Each [`OutboxMessage`](sea_orm_outbox::OutboxMessage) becomes one persistent message
//! (`delivery_mode` 2) on the configured topic exchange, routing key
//! `<routing_prefix><event_type>`: body = payload, `message_id` = the event id, `type` = the
//! event type, headers = the event's headers plus `eventId`, `eventType` and `bizNo`. It is
//! published with `mandatory` set on a channel in confirm mode and counts as sent only once the
//! server confirmed it: a `basic.nack`, a returned (unroutable) message or a missing confirm
//! fails the event retryably; a body above [`RabbitMqConfig::max_message_bytes`] fails it for
//! good. Failures of the client are classified by [`classify`].
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, Worker, WorkerConfig};
//! use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqPublisher};
//!
//! // RABBITMQ_URL, RABBITMQ_USERNAME, RABBITMQ_PASSWORD, OUTBOX_RABBITMQ_EXCHANGE, ...
//! let config = RabbitMqConfig::from_env()?;
//! let publisher = Arc::new(RabbitMqPublisher::start(config).await?);
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
//! One home for each concern: `config` ([`RabbitMqConfig`], its environment variables and
//! checks), `credentials` ([`Credentials`], [`Secret`], [`redact_url`]), `message` (the AMQP
//! message of an event), `link` (the connection and confirm-mode channel, opened again after
//! it broke), `producer` ([`RabbitMqPublisher`]), `errors` ([`classify`]) and `consumer`
//! ([`RabbitMqConsumer`], a small consumer for tests and examples).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod config;
mod consumer;
mod credentials;
mod errors;
mod link;
mod message;
mod producer;

pub use config::{
    RabbitMqConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONTENT_TYPE, DEFAULT_EXCHANGE,
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SEND_TIMEOUT, DEFAULT_URL, ENV_APP_ID, ENV_DECLARE_EXCHANGE,
    ENV_EXCHANGE, ENV_MAX_MESSAGE_BYTES, ENV_ROUTING_PREFIX, ENV_SEND_TIMEOUT_MS, ENV_URL,
    MAX_MESSAGE_BYTES_LIMIT,
};
pub use consumer::{RabbitMqConsumer, ReceivedMessage};
pub use credentials::{redact_url, Credentials, Secret, ENV_PASSWORD, ENV_USERNAME};
pub use errors::classify;
pub use producer::RabbitMqPublisher;
