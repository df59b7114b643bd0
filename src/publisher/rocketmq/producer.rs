//! [`RocketMqPublisher`]: one shared producer on its own client runtime, and the message each
//! outbox event becomes.
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use rocketmq_client_rust::{ClientResult, DefaultMQProducer, SendResult, SendStatus};
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;

use super::config::{Failover, RocketMqConfig};
use super::errors::{classify, client_error_text, error_text};
use super::routing::{BrokerAvoidance, Failed};
use super::runtime::{probe_namesrv, ClientHost, SendFuture};
use crate::error::{OutboxError, PublishError, PublishErrorKind};
use crate::publisher::{OutboxMessage, Publisher};

/// Publishes outbox events to RocketMQ with one shared producer.
///
/// Sends take `&self` and the producer is safe to share: wrap the publisher in an `Arc` and hand
/// it to every worker. Call [`RocketMqPublisher::shutdown`] at the end (after the workers have
/// stopped) to stop the producer and the client runtime it owns; dropping it instead stops the
/// runtime in the background without flushing.
pub struct RocketMqPublisher {
    config: RocketMqConfig,
    producer: Box<dyn ProducerHandle>,
    /// The brokers that failed lately ([`Failover::Outbox`] only).
    avoidance: Option<BrokerAvoidance>,
}

/// Picks a queue out of the route's queues (`None`: none fits).
type QueueSelector<'a> = &'a (dyn Fn(&[MessageQueue]) -> Option<MessageQueue> + Send + Sync);

/// The producer and the runtime it runs on, behind a trait object (see [`SendFuture`]).
trait ProducerHandle: Send + Sync {
    /// Sends `message`, giving up after `timeout_ms` milliseconds.
    fn send(
        &self,
        message: Message,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<Option<SendResult>>>;
    /// Sends `message` to the queue `select` picks from the client's route of its topic (no
    /// retry by the client), giving up after `timeout_ms` milliseconds.
    fn send_selecting<'a>(
        &'a self,
        message: Message,
        timeout_ms: u64,
        select: QueueSelector<'a>,
    ) -> SendFuture<'a, ClientResult<Option<SendResult>>>;
    /// Stops the producer, then its host.
    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()>;
}

/// A started producer and the host it runs on.
struct OwnedProducer {
    producer: DefaultMQProducer,
    host: ClientHost,
}

impl ProducerHandle for OwnedProducer {
    fn send(
        &self,
        message: Message,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<Option<SendResult>>> {
        Box::pin(self.producer.send_with_timeout(message, timeout_ms))
    }

    fn send_selecting<'a>(
        &'a self,
        message: Message,
        timeout_ms: u64,
        select: QueueSelector<'a>,
    ) -> SendFuture<'a, ClientResult<Option<SendResult>>> {
        Box::pin(self.producer.send_with_selector_timeout(
            message,
            move |queues: &[MessageQueue], _: &Message, _: &()| select(queues),
            (),
            timeout_ms,
        ))
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async move {
            let OwnedProducer { mut producer, host } = *self;
            Box::pin(producer.shutdown()).await;
            Box::pin(host.shutdown()).await;
        })
    }
}

impl std::fmt::Debug for RocketMqPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RocketMqPublisher {
    /// Validates `config`, checks that a name server answers, and starts a producer with its
    /// own client runtime.
    ///
    /// The broker itself is not contacted here: the topic's route is fetched on the first send
    /// (a new topic is created by the broker then, if it auto-creates topics). The client's
    /// latency fault tolerance and fault detector are on unless `config.failover` is
    /// [`Failover::Off`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RocketMqConfig::validate`]; [`OutboxError::Broker`] when no name server accepts a
    /// connection within 3 s or the client cannot start.
    pub async fn start(config: RocketMqConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        probe_namesrv(&config).await?;
        let host = ClientHost::new("producer")?;
        let mut producer = DefaultMQProducer::builder(host.runtime.clone())
            .producer_group(config.producer_group.clone())
            .name_server_addr(config.namesrv_addr.clone())
            .send_msg_timeout(config.send_timeout_ms())
            .build();
        let fault_tolerance = config.failover != Failover::Off;
        producer.set_send_latency_fault_enable(fault_tolerance);
        producer.set_start_detector_enable(fault_tolerance);
        // Boxed here (and below) so that callers' futures stay shallow: the client's futures are
        // deep enough to need `recursion_limit` in every crate that embeds them inline.
        if let Err(e) = Box::pin(producer.start()).await {
            Box::pin(host.shutdown()).await;
            return Err(OutboxError::Broker(format!(
                "RocketMQ producer did not start: {}",
                client_error_text(&e)
            )));
        }
        tracing::info!(namesrv = %config.namesrv_addr, group = %config.producer_group, topic = %config.topic,
            failover = %config.failover, "RocketMQ publisher started");
        let avoidance = (config.failover == Failover::Outbox)
            .then(|| BrokerAvoidance::new(config.broker_avoidance));
        Ok(RocketMqPublisher {
            config,
            producer: Box::new(OwnedProducer { producer, host }),
            avoidance,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RocketMqConfig {
        &self.config
    }

    /// The message `event` becomes: topic, tag = event type, keys = business key,
    /// user properties `eventId`, `eventType`, `bizNo`, body = payload.
    ///
    /// # Errors
    /// A permanent [`PublishError`] when the message cannot be built (a property name the
    /// client reserves; cannot happen with the three fixed names).
    pub fn to_message(&self, event: &OutboxMessage) -> Result<Message, PublishError> {
        build_message(&self.config.topic, event)
    }

    /// Stops the producer, then the client runtime, then the runtime owner, in that order.
    pub async fn shutdown(self) {
        self.producer.shutdown().await;
        tracing::info!("RocketMQ publisher stopped");
    }
}

#[async_trait]
impl Publisher for RocketMqPublisher {
    /// Sends the event's message once. Under [`Failover::Outbox`] the queue is chosen here
    /// ([`Failover`]); the outcome of the send updates which brokers are avoided. Never sent a
    /// second time within one call: a failure is returned (retryable unless the message itself
    /// was refused) and the outbox's retry sends it again, to another broker if this one failed.
    async fn publish(&self, event: &OutboxMessage) -> Result<(), PublishError> {
        let message = self.to_message(event)?;
        let timeout = u64::from(self.config.send_timeout_ms());
        let Some(avoidance) = &self.avoidance else {
            return send_outcome(event, self.producer.send(message, timeout).await);
        };
        let chosen: Mutex<Option<String>> = Mutex::new(None);
        let select = |queues: &[MessageQueue]| {
            let brokers: Vec<&str> = queues.iter().map(|q| q.broker_name().as_str()).collect();
            let i = avoidance.choose(&brokers, Instant::now())?;
            *chosen.lock().unwrap_or_else(|p| p.into_inner()) = Some(brokers[i].to_owned());
            queues.get(i).cloned()
        };
        let sent = self
            .producer
            .send_selecting(message, timeout, &select)
            .await;
        let outcome = send_outcome(event, sent);
        let broker = chosen.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(broker) = broker {
            match &outcome {
                Ok(()) => {
                    if avoidance.succeeded(&broker) {
                        tracing::info!(%broker, "RocketMQ broker answers again; sending to it");
                    }
                }
                Err(e) if e.kind == PublishErrorKind::Retryable => {
                    if avoidance.failed(&broker, Instant::now()) == Failed::NewlyAvoided {
                        tracing::warn!(%broker, avoid_ms = avoidance.window().as_millis() as u64,
                            error = %e.message, "RocketMQ send to a broker failed; other brokers take the sends");
                    }
                }
                Err(_) => {}
            }
        }
        outcome
    }
}

/// What a send's result means for the event.
fn send_outcome(
    event: &OutboxMessage,
    sent: ClientResult<Option<SendResult>>,
) -> Result<(), PublishError> {
    match sent {
        Ok(Some(result)) if result.send_status == SendStatus::SendOk => {
            tracing::debug!(
                event_id = event.event_id,
                msg_id = result.msg_id.as_ref().map_or("-", |m| m.as_str()),
                offset_msg_id = result.offset_msg_id.as_deref().unwrap_or("-"),
                queue_id = result.message_queue.as_ref().map_or(-1, |q| q.queue_id()),
                queue_offset = result.queue_offset,
                broker = result
                    .message_queue
                    .as_ref()
                    .map_or("-", |q| q.broker_name().as_str()),
                "RocketMQ send ok"
            );
            Ok(())
        }
        Ok(Some(result)) => Err(PublishError::retryable(format!(
            "RocketMQ send status {:?} (not SEND_OK; msgId {})",
            result.send_status,
            result.msg_id.as_ref().map_or("-", |m| m.as_str())
        ))),
        Ok(None) => Err(PublishError::retryable("RocketMQ send returned no result")),
        Err(e) => Err(classify(&e)),
    }
}

/// The message for `event` on `topic` (see [`RocketMqPublisher::to_message`]).
fn build_message(topic: &str, event: &OutboxMessage) -> Result<Message, PublishError> {
    let mut builder = Message::builder()
        .topic(topic)
        .tags(event.event_type.as_str())
        .key(event.biz_no.as_str())
        .body_slice(event.payload.as_bytes());
    for (name, value) in event.properties() {
        builder = builder.raw_property(name, value).map_err(|e| {
            PublishError::permanent(format!("message property {name}: {}", error_text(&e)))
        })?;
    }
    builder.build().map_err(|e| {
        PublishError::permanent(format!("message could not be built: {}", error_text(&e)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocketmq_model::common::message::MessageTrait;

    #[test]
    fn message_carries_the_event() {
        let event = OutboxMessage {
            event_id: 42,
            biz_no: "ORD-42".into(),
            event_type: "ORDER_CREATED".into(),
            payload: r#"{"a":1}"#.into(),
            retry_count: 0,
        };
        let m = build_message("T", &event).expect("message");
        assert_eq!(m.topic().as_str(), "T");
        assert_eq!(
            m.get_body().map(|b| b.as_ref()),
            Some(br#"{"a":1}"#.as_ref())
        );
        assert_eq!(
            m.get_keys().map(|k| k.as_str().to_owned()).as_deref(),
            Some("ORD-42")
        );
        assert_eq!(
            m.tags().map(|t| t.to_string()).as_deref(),
            Some("ORDER_CREATED")
        );
        let props = m.get_properties();
        let get = |k: &str| {
            props
                .iter()
                .find(|(n, _)| n.as_str() == k)
                .map(|(_, v)| v.as_str().to_owned())
        };
        assert_eq!(get("eventId").as_deref(), Some("42"));
        assert_eq!(get("eventType").as_deref(), Some("ORDER_CREATED"));
        assert_eq!(get("bizNo").as_deref(), Some("ORD-42"));
    }
}
