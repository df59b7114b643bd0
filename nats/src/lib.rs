//! # sea-orm-outbox-nats
//!
//! The NATS JetStream publisher of [sea-orm-outbox](https://docs.rs/sea-orm-outbox), built on
//! the async-nats client.
//!
//! Each [`OutboxMessage`](sea_orm_outbox::OutboxMessage) becomes one JetStream publish to
//! subject `<subject_prefix>.<event_type>`: body = payload, headers = the event's headers plus
//! `eventId`, `eventType`, `bizNo`, and `Nats-Msg-Id` = the event id, so that JetStream drops a
//! re-send within its duplicate window. Only the server's ack counts as delivered (a core NATS
//! publish would not be at-least-once). A message larger than the server's `max_payload`, or an
//! event type that cannot be part of a subject (`*`, `>`, spaces), fails for good and the event goes straight to
//! `FAIL` with the reason; time-outs and a broken connection are retryable; a subject without a stream is a
//! configuration error (the event stays `WAIT`).
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, Worker, WorkerConfig};
//! use sea_orm_outbox_nats::{NatsConfig, NatsPublisher};
//!
//! // NATS_URL, OUTBOX_NATS_SUBJECT_PREFIX, NATS_USER + NATS_PASSWORD (or NATS_TOKEN, ...)
//! let config = NatsConfig::from_env()?;
//! let publisher = Arc::new(NatsPublisher::start(config).await?);
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
//! A JetStream stream must capture the subjects (`<subject_prefix>.>`): the publisher checks
//! at start that one does and refuses to start otherwise. Events written for NATS are checked
//! against its rules at write time with [`EVENT_LIMITS`]: give them to the core's `Outbox`
//! (`Outbox::new().limits(EVENT_LIMITS)`) that writes the events.
//!
//! One home for each concern: `config` ([`NatsConfig`] and its checks), `credentials`
//! ([`Credentials`], [`Secret`]), `message` (subject, headers and [`EVENT_LIMITS`]), `client`
//! (connection and stream lookup), `producer` ([`NatsPublisher`]), `errors` ([`classify`]:
//! client errors as retryable or permanent) and `consumer` ([`NatsConsumer`], a small consumer
//! for tests and examples).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod client;
mod config;
mod consumer;
mod credentials;
mod errors;
mod message;
mod producer;

pub use config::{
    NatsConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_SEND_TIMEOUT, DEFAULT_SUBJECT_PREFIX, DEFAULT_URL,
    ENV_MSG_ID_PREFIX, ENV_SEND_TIMEOUT_MS, ENV_SUBJECT_PREFIX, ENV_URL,
};
pub use consumer::{NatsConsumer, ReceivedMessage};
pub use credentials::{
    Credentials, Secret, ENV_CREDS_FILE, ENV_NKEY_SEED, ENV_PASSWORD, ENV_TOKEN, ENV_USER,
};
pub use errors::classify;
pub use message::{DEFAULT_MAX_PAYLOAD_BYTES, EVENT_LIMITS, RESERVED_HEADER_PREFIXES};
pub use producer::NatsPublisher;
