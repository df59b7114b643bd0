//! [`RabbitMqConsumer`]: a small consumer for tests and examples that reads back what the
//! relay published to an exchange.
use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use sea_orm_outbox::OutboxError;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::RabbitMqConfig;

/// One message as [`RabbitMqConsumer`] received it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The outbox event id: the `eventId` header, else the `message_id` property (`None` when
    /// neither is a number).
    pub event_id: Option<i64>,
    /// The `eventType` header, else the `type` property.
    pub event_type: String,
    /// The `bizNo` header (the event's business key).
    pub biz_no: String,
    /// The routing key the message was published with.
    pub routing_key: String,
    /// Every header whose value is a string (the event's headers, `eventId`, `eventType`,
    /// `bizNo`), in name order.
    pub headers: Vec<(String, String)>,
    /// The body, as UTF-8 (invalid bytes replaced).
    pub payload: String,
    /// Whether the server delivered it before (to a consumer that did not acknowledge it).
    pub redelivered: bool,
}

impl ReceivedMessage {
    /// The message of `delivery`.
    fn of(delivery: &Delivery) -> Self {
        let mut headers = Vec::new();
        if let Some(table) = delivery.properties.headers() {
            for (name, value) in table.inner() {
                let text = match value {
                    AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                    AMQPValue::ShortString(s) => s.as_str().to_owned(),
                    _ => continue,
                };
                headers.push((name.as_str().to_owned(), text));
            }
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let property = |p: &Option<lapin::types::ShortString>| p.as_ref().map(|s| s.to_string());
        ReceivedMessage {
            event_id: header("eventId")
                .or_else(|| property(delivery.properties.message_id()))
                .and_then(|id| id.parse().ok()),
            event_type: header("eventType")
                .or_else(|| property(delivery.properties.kind()))
                .unwrap_or_default(),
            biz_no: header("bizNo").unwrap_or_default(),
            routing_key: delivery.routing_key.to_string(),
            payload: String::from_utf8_lossy(&delivery.data).into_owned(),
            redelivered: delivery.redelivered,
            headers,
        }
    }
}

/// Reads what was published to [`RabbitMqConfig::exchange`]: a server-named exclusive queue
/// (deleted with the consumer's connection) bound to the exchange with a binding key, consumed
/// with acknowledgements.
///
/// ```no_run
/// # async fn demo() -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::time::Duration;
/// use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqConsumer};
/// let config = RabbitMqConfig::from_env()?;
/// let mut consumer = RabbitMqConsumer::start(&config, "#").await?;
/// for message in consumer.poll(Duration::from_secs(1)).await {
///     println!("{:?} {} {}", message.event_id, message.event_type, message.payload);
/// }
/// consumer.close(false).await;
/// # Ok(()) }
/// ```
pub struct RabbitMqConsumer {
    connection: Connection,
    channel: Channel,
    exchange: String,
    messages: mpsc::UnboundedReceiver<ReceivedMessage>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for RabbitMqConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqConsumer")
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

impl RabbitMqConsumer {
    /// Connects with `config`'s URL and credentials, declares its exchange as a durable topic
    /// exchange (only checks it with [`RabbitMqConfig::declare_exchange`] off), binds a new
    /// exclusive queue to it with `binding_key` (`#`: every message) and starts consuming.
    /// Messages published after it returns are received.
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when the server cannot be reached within
    /// [`RabbitMqConfig::connect_timeout`] or refuses a step;
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RabbitMqConfig::validate`].
    pub async fn start(config: &RabbitMqConfig, binding_key: &str) -> Result<Self, OutboxError> {
        config.validate()?;
        let url = config.redacted_url();
        let failed = |step: &str, e: lapin::Error| {
            OutboxError::Broker(format!("RabbitMQ consumer at {url}: {step} failed: {e}"))
        };
        let connect = Connection::connect_uri(config.amqp_uri()?, ConnectionProperties::default());
        let connection = tokio::time::timeout(config.connect_timeout, connect)
            .await
            .map_err(|_| {
                OutboxError::Broker(format!(
                    "RabbitMQ consumer at {url}: no connection within {:?} (connect timeout)",
                    config.connect_timeout
                ))
            })?
            .map_err(|e| failed("connect", e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| failed("open channel", e))?;
        let exchange = config.exchange.clone();
        let options = ExchangeDeclareOptions {
            passive: !config.declare_exchange,
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Topic,
                options,
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("declare exchange", e))?;
        let queue = channel
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("declare queue", e))?;
        let queue = queue.name().clone();
        channel
            .queue_bind(
                queue.clone(),
                exchange.as_str().into(),
                binding_key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("bind queue", e))?;
        channel
            .basic_qos(1000, BasicQosOptions::default())
            .await
            .map_err(|e| failed("set prefetch", e))?;
        let mut deliveries = channel
            .basic_consume(
                queue,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("consume", e))?;
        let (tx, messages) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(Ok(delivery)) = deliveries.next().await {
                let message = ReceivedMessage::of(&delivery);
                if delivery.ack(BasicAckOptions::default()).await.is_err()
                    || tx.send(message).is_err()
                {
                    break;
                }
            }
        });
        Ok(RabbitMqConsumer {
            connection,
            channel,
            exchange,
            messages,
            task,
        })
    }

    /// The messages that arrived since the last call, waiting at most `wait` for the first
    /// one; empty when none came.
    pub async fn poll(&mut self, wait: Duration) -> Vec<ReceivedMessage> {
        let mut out = Vec::new();
        if let Ok(Some(first)) = tokio::time::timeout(wait, self.messages.recv()).await {
            out.push(first);
            while let Ok(next) = self.messages.try_recv() {
                out.push(next);
            }
        }
        out
    }

    /// Stops consuming and closes the connection (its exclusive queue goes with it); with
    /// `delete_exchange`, deletes the exchange first (for a test's own exchange).
    pub async fn close(self, delete_exchange: bool) {
        self.task.abort();
        let wait = Duration::from_secs(5);
        if delete_exchange {
            let delete = self.channel.exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            );
            let _ = tokio::time::timeout(wait, delete).await;
        }
        let _ = tokio::time::timeout(wait, self.connection.close(200, "done".into())).await;
    }
}
