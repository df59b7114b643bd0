//! [`NatsConsumer`], a small consumer for tests, examples and demos that read back what the
//! relay sent, and the [`ReceivedMessage`]s it returns.
use std::time::Duration;

use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use sea_orm_outbox::OutboxError;

use crate::client::connect;
use crate::config::NatsConfig;
use crate::errors::error_text;

/// Most messages one [`NatsConsumer::poll`] returns.
const POLL_MAX: usize = 1_000;

/// One message as [`NatsConsumer`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The subject it was published to (`<subject_prefix>.<event_type>`).
    pub subject: String,
    /// The `eventId` header, parsed (`None` when missing or not a number).
    pub event_id: Option<i64>,
    /// The `eventType` header.
    pub event_type: Option<String>,
    /// The `bizNo` header (the event's key).
    pub biz_no: Option<String>,
    /// The `Nats-Msg-Id` header.
    pub msg_id: Option<String>,
    /// Every header (name, value), the ones above included; a header sent twice appears twice.
    pub headers: Vec<(String, String)>,
    /// The body, as UTF-8 (lossy).
    pub payload: String,
    /// The message's sequence number in its stream.
    pub stream_sequence: u64,
}

impl ReceivedMessage {
    /// The first value of header `name`, if the message has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn of(m: &jetstream::Message) -> Self {
        let mut headers = Vec::new();
        if let Some(map) = &m.headers {
            for (name, values) in map.iter() {
                for value in values {
                    headers.push((name.to_string(), value.as_str().to_owned()));
                }
            }
        }
        let first = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        ReceivedMessage {
            subject: m.subject.to_string(),
            event_id: first("eventId").and_then(|v| v.parse().ok()),
            event_type: first("eventType"),
            biz_no: first("bizNo"),
            msg_id: first("Nats-Msg-Id"),
            payload: String::from_utf8_lossy(&m.payload).into_owned(),
            stream_sequence: m.info().map(|i| i.stream_sequence).unwrap_or_default(),
            headers,
        }
    }
}

/// A small consumer for tests and demos: it creates (or reuses) a JetStream stream capturing
/// `<subject_prefix>.>` and reads it from its first message with an ordered pull consumer (one
/// ephemeral consumer, no acks, messages in stream order).
///
/// Meant for an application's own tests: publish through the relay, then read the messages
/// back and check them (the `eventId` header, the headers, the order of a key). Not a
/// production consumer: it keeps no position and has no retry or dead-letter handling.
///
/// ```no_run
/// # async fn demo() -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::time::Duration;
/// use sea_orm_outbox_nats::{NatsConfig, NatsConsumer};
///
/// let config = NatsConfig::new("nats://127.0.0.1:4222").subject_prefix("order");
/// let mut consumer = NatsConsumer::start(&config, "ORDER_EVENTS").await?;
/// let got = consumer.poll(Duration::from_secs(5)).await;
/// assert!(got.iter().all(|m| m.event_id.is_some()));
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
pub struct NatsConsumer {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: String,
    messages: Ordered,
}

impl std::fmt::Debug for NatsConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConsumer")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl NatsConsumer {
    /// Connects to the server(s) of `config` (with its login), creates the stream named
    /// `stream` capturing `<subject_prefix>.>` unless it exists (file storage, default limits),
    /// and starts reading it from its first message.
    ///
    /// # Errors
    /// The errors of [`crate::NatsPublisher::start`]'s connection; [`OutboxError::Broker`]
    /// when the stream cannot be created (e.g. another stream captures those subjects, or
    /// `stream` is not a valid stream name) or the consumer cannot start.
    pub async fn start(config: &NatsConfig, stream: &str) -> Result<Self, OutboxError> {
        config.validate()?;
        let client = connect(config, "sea-orm-outbox consumer").await?;
        let js = jetstream::new(client.clone());
        let broker = |what: &str, e: &(dyn std::error::Error + 'static)| {
            OutboxError::Broker(format!("NATS consumer: {what}: {}", error_text(e)))
        };
        let handle = js
            .get_or_create_stream(stream::Config {
                name: stream.to_owned(),
                subjects: vec![format!("{}.>", config.subject_prefix)],
                ..Default::default()
            })
            .await
            .map_err(|e| broker(&format!("cannot create stream `{stream}`"), &e))?;
        let consumer = handle
            .create_consumer(OrderedConfig {
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| broker("cannot create the ordered consumer", &e))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| broker("cannot read the ordered consumer", &e))?;
        Ok(NatsConsumer {
            client,
            js,
            stream: stream.to_owned(),
            messages,
        })
    }

    /// The name of the stream it reads.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The messages that arrived since the last call, in stream order, waiting at most `wait`
    /// for the first one; empty when none came. At most 1,000 per call; errors of the
    /// consumer (it recreates itself after a gap) are logged and skipped.
    pub async fn poll(&mut self, wait: Duration) -> Vec<ReceivedMessage> {
        let mut out = Vec::new();
        let end = tokio::time::Instant::now() + wait;
        while out.len() < POLL_MAX {
            // After the first message, take only what is already there.
            let until = if out.is_empty() {
                end
            } else {
                tokio::time::Instant::now() + Duration::from_millis(5)
            };
            match tokio::time::timeout_at(until, self.messages.next()).await {
                Ok(Some(Ok(m))) => out.push(ReceivedMessage::of(&m)),
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %error_text(&e), stream = %self.stream, "NATS consumer error")
                }
                Ok(None) | Err(_) => break,
            }
        }
        out
    }

    /// Deletes the stream it reads, with its messages, and closes the connection.
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when the server does not delete it.
    pub async fn delete_stream(self) -> Result<(), OutboxError> {
        let result = self.js.delete_stream(&self.stream).await;
        let _ = self.client.drain().await;
        result.map(|_| ()).map_err(|e| {
            OutboxError::Broker(format!(
                "NATS: cannot delete stream `{}`: {}",
                self.stream,
                error_text(&e)
            ))
        })
    }

    /// Closes the connection (the stream stays).
    pub async fn shutdown(self) {
        let _ = self.client.drain().await;
    }
}
