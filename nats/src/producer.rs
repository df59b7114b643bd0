//! [`NatsPublisher`]: JetStream publishes with server acks, a batch's publishes in flight
//! together, and in ordered mode a key's next event only after the previous one's ack.
use std::future::IntoFuture;

use async_nats::jetstream::{self, context::PublishAckFuture};
use async_trait::async_trait;
use sea_orm_outbox::{OutboxError, OutboxMessage, PublishError, Publisher};
use tokio::time::{timeout_at, Instant};

use crate::client::{connect, find_stream};
use crate::config::NatsConfig;
use crate::errors::classify;
use crate::message::{publish_of, subject};

/// Publishes outbox events to NATS JetStream, each one acknowledged by the server.
///
/// An event of type `T` goes to subject `<subject_prefix>.T` with body = payload and headers
/// = the event's headers, `eventId`, `eventType`, `bizNo`, and `Nats-Msg-Id` = the event id
/// (after [`NatsConfig::msg_id_prefix`]), so that JetStream drops a re-send within its
/// duplicate window. Only the server's ack counts as delivered.
///
/// A batch's publishes are all sent, then their acks awaited: one result per event. In ordered
/// mode ([`OutboxMessage::ordered`]) a key's next event of the batch is sent only after the
/// ack of its previous one; after a failure the key's later events are not sent (retryable).
///
/// Publishes take `&self`: wrap the publisher in an `Arc` and hand it to every worker. Call
/// [`NatsPublisher::shutdown`] at the end, after the workers have stopped.
pub struct NatsPublisher {
    config: NatsConfig,
    client: async_nats::Client,
    js: jetstream::Context,
    stream: String,
}

impl std::fmt::Debug for NatsPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsPublisher")
            .field("config", &self.config)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl NatsPublisher {
    /// Validates `config`, connects (logging in with [`NatsConfig::credentials`]) and checks
    /// that a JetStream stream captures `<subject_prefix>.>`. The client then reconnects by
    /// itself whenever the connection breaks; publishes meanwhile fail retryably within the
    /// send timeout.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails [`NatsConfig::validate`],
    /// a login the server refuses (the message names the variable of the secret, e.g.
    /// `NATS_PASSWORD`, never its value), or no stream for the subjects (the message says how
    /// to create one); [`OutboxError::Broker`] when no server accepts a connection within
    /// [`NatsConfig::connect_timeout`] or JetStream does not answer.
    pub async fn start(config: NatsConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        let client = connect(&config, "sea-orm-outbox publisher").await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(config.send_timeout)
            .backpressure_on_inflight(true)
            .build(client.clone());
        let stream = match find_stream(&js, &config).await {
            Ok(stream) => stream,
            Err(e) => {
                let _ = client.drain().await;
                return Err(e);
            }
        };
        tracing::info!(url = %config.redacted_url(), subjects = %format!("{}.>", config.subject_prefix),
            %stream, max_payload = client.server_info().max_payload, "NATS JetStream publisher started");
        Ok(NatsPublisher {
            config,
            client,
            js,
            stream,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &NatsConfig {
        &self.config
    }

    /// The name of the stream found at start to capture the events' subjects.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The largest message (payload and headers, bytes) the server accepts: its
    /// `max_payload`; a larger event fails for good.
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Sends what is still buffered and closes the connection.
    pub async fn shutdown(self) {
        if let Err(e) = self.client.drain().await {
            tracing::warn!(error = %e, "NATS connection did not close cleanly");
        }
        tracing::info!("NATS JetStream publisher stopped");
    }

    /// Publishes `messages` (all at once, then awaits their acks) by `deadline`; one result
    /// per message, in order.
    async fn send_all(
        &self,
        messages: &[&OutboxMessage],
        deadline: Instant,
    ) -> Vec<Result<(), PublishError>> {
        let mut pending: Vec<Result<PublishAckFuture, PublishError>> =
            Vec::with_capacity(messages.len());
        for m in messages {
            pending.push(self.send_one(m, deadline).await);
        }
        let mut results = Vec::with_capacity(messages.len());
        for p in pending {
            results.push(match p {
                Ok(ack) => match timeout_at(deadline, ack.into_future()).await {
                    Ok(Ok(_ack)) => Ok(()),
                    Ok(Err(e)) => Err(classify(&e)),
                    Err(_) => Err(timed_out(&self.config)),
                },
                Err(e) => Err(e),
            });
        }
        results
    }

    /// Sends `m` (without waiting for its ack) by `deadline`.
    async fn send_one(
        &self,
        m: &OutboxMessage,
        deadline: Instant,
    ) -> Result<PublishAckFuture, PublishError> {
        let subject = subject(&self.config.subject_prefix, m)?;
        let publish = publish_of(m, &self.config.msg_id_prefix)?;
        match timeout_at(deadline, self.js.send_publish(subject, publish)).await {
            Ok(Ok(ack)) => Ok(ack),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(timed_out(&self.config)),
        }
    }
}

/// The error of a publish whose ack did not come within the send timeout.
fn timed_out(config: &NatsConfig) -> PublishError {
    PublishError::retryable(format!(
        "NATS JetStream publish timed out: no ack within {:?} (send timeout)",
        config.send_timeout
    ))
}

#[async_trait]
impl Publisher for NatsPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let deadline = Instant::now() + self.config.send_timeout;
        self.send_all(&[message], deadline)
            .await
            .pop()
            .unwrap_or_else(|| Err(PublishError::retryable("not sent")))
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let deadline = Instant::now() + self.config.send_timeout;
        sea_orm_outbox::send_in_key_rounds(messages, deadline, |round| async move {
            self.send_all(&round, deadline).await
        })
        .await
    }

    fn batches(&self) -> bool {
        true
    }
}
