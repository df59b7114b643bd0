//! # sea-orm-outbox-kafka
//!
//! The Apache Kafka publisher of [sea-orm-outbox](https://docs.rs/sea-orm-outbox), built on
//! [rdkafka](https://docs.rs/rdkafka) (librdkafka).
//!
//! Each [`OutboxMessage`](sea_orm_outbox::OutboxMessage) becomes one record on topic
//! `<topic_prefix>.<event_type>`: key = `biz_no` (one key stays on one partition, so ordered
//! mode keeps its order), value = payload, headers = the event's headers plus `eventId`,
//! `eventType`, `bizNo`. The producer is idempotent (`enable.idempotence=true`, hence
//! `acks=all`): its own retries neither duplicate nor reorder records, and only the brokers'
//! ack counts as delivered. A record larger than `message.max.bytes`, or an event type that
//! cannot be part of a topic name, fails for good and the event goes straight to `FAIL` with
//! the reason; time-outs and unreachable brokers are retryable; a topic that does not exist is
//! a configuration error (the event stays `WAIT`).
//!
//! rdkafka is the Rust client with an idempotent producer; the pure-Rust clients (rskafka)
//! have none, so a retry of theirs after a lost ack could write a record twice or out of
//! order. It links librdkafka, which its `rdkafka-sys` crate builds from source (a C
//! toolchain, `make` and `perl`; OpenSSL's headers for TLS and SCRAM).
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, Worker, WorkerConfig};
//! use sea_orm_outbox_kafka::{KafkaConfig, KafkaPublisher};
//!
//! // KAFKA_BROKERS, OUTBOX_KAFKA_TOPIC_PREFIX, KAFKA_USERNAME + KAFKA_PASSWORD, ...
//! let config = KafkaConfig::from_env()?;
//! let publisher = Arc::new(KafkaPublisher::start(config).await?);
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
//! The topics must exist, or the cluster must create them on first use
//! (`auto.create.topics.enable`). Events written for Kafka are checked against its rules at
//! write time with [`EVENT_LIMITS`]: give them to the core's `Outbox`
//! (`Outbox::new().limits(EVENT_LIMITS)`) that writes the events.
//!
//! One home for each concern: `config` ([`KafkaConfig`] and its checks), `credentials`
//! ([`Credentials`], [`Secret`]), `message` (topic, headers and [`EVENT_LIMITS`]), `client`
//! (the client context and the metadata request at start), `producer` ([`KafkaPublisher`]),
//! `errors` ([`classify`]: client errors as retryable, permanent or configuration) and
//! `consumer` ([`KafkaConsumer`], a small consumer for tests and examples).
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
    KafkaConfig, DEFAULT_BROKERS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_SEND_TIMEOUT,
    DEFAULT_TOPIC_PREFIX, ENV_BROKERS, ENV_MAX_MESSAGE_BYTES, ENV_SEND_TIMEOUT_MS, ENV_TLS,
    ENV_TLS_CA_FILE, ENV_TOPIC_PREFIX,
};
pub use consumer::{KafkaConsumer, ReceivedMessage};
pub use credentials::{
    Credentials, SaslMechanism, Secret, ENV_PASSWORD, ENV_SASL_MECHANISM, ENV_USERNAME,
};
pub use errors::classify;
pub use message::{DEFAULT_MAX_MESSAGE_BYTES, EVENT_LIMITS, MAX_TOPIC_LEN};
pub use producer::KafkaPublisher;
