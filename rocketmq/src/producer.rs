//! [`RocketMqPublisher`]: one shared producer on its own client runtime, and the message each
//! outbox event becomes.
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use rocketmq_client_rust::{ClientResult, DefaultMQProducer, SendResult, SendStatus};
use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::common::topic::TopicValidator;
use rocketmq_protocol::common::message::message_decoder::{encode_message, encode_messages};

use super::config::{Failover, RocketMqConfig};
use super::errors::{
    classify_for, client_error_text, error_text, is_no_permission, no_permission_text, Signer,
    RESPONSE_NO_PERMISSION,
};
use super::limits;
use super::routing::{queue_of_key, BrokerAvoidance, Failed};
use super::runtime::{probe_namesrv, ClientHost, SendFuture};
use sea_orm_outbox::{OutboxError, PublishError, PublishErrorKind};
use sea_orm_outbox::{OutboxMessage, Publisher};

mod publish;
mod send;

use publish::*;
// The tests reach the ordered batch's chunking.
#[cfg(test)]
use send::*;

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
    /// Sends `messages` (one topic) as one batch, giving up after `timeout_ms` milliseconds.
    fn send_batch(
        &self,
        messages: Vec<Message>,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<SendResult>>;
    /// Sends `message` (one message or a batch) to the queue `select` picks from the client's
    /// route of its topic (no retry by the client), giving up after `timeout_ms` milliseconds.
    fn send_selecting<'a>(
        &'a self,
        message: Outgoing,
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

    fn send_batch(
        &self,
        messages: Vec<Message>,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<SendResult>> {
        Box::pin(self.producer.send_batch_with_timeout(messages, timeout_ms))
    }

    fn send_selecting<'a>(
        &'a self,
        message: Outgoing,
        timeout_ms: u64,
        select: QueueSelector<'a>,
    ) -> SendFuture<'a, ClientResult<Option<SendResult>>> {
        match message {
            Outgoing::One(message) => Box::pin(self.producer.send_with_selector_timeout(
                message,
                move |queues: &[MessageQueue], _: &Message, _: &()| select(queues),
                (),
                timeout_ms,
            )),
            Outgoing::Batch(batch) => Box::pin(self.producer.send_with_selector_timeout(
                batch,
                move |queues: &[MessageQueue], _: &MessageBatch, _: &()| select(queues),
                (),
                timeout_ms,
            )),
        }
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
    /// Validates `config`, checks that a name server answers, starts a producer with its own
    /// client runtime and, unless `config.verify_credentials` is off, checks that a broker
    /// accepts the credentials (or their absence).
    ///
    /// With credentials ([`RocketMqConfig::credentials`]) every broker request is signed. The
    /// check at start is one signed, read-only request to a broker: the maximum offset
    /// (`GET_MAX_OFFSET`) of a queue of the topic, or of the broker's `TBW102` template topic
    /// when the topic has no route yet (it is created on the first send). A broker with
    /// authentication answers it `NO_PERMISSION` (code 16) for wrong, unknown or missing
    /// credentials, and then `start` refuses to start. When no broker can be asked (no route
    /// for either topic, the broker does not answer), the check is skipped with an INFO line:
    /// a rejection found by a send later keeps the events `WAIT` without counting the attempt
    /// ([`sea_orm_outbox::PublishErrorKind::Configuration`]).
    ///
    /// A `NO_PERMISSION` answer is never retried on another broker (the client's default
    /// retries it).
    ///
    /// The client's latency fault tolerance and fault detector are on unless `config.failover`
    /// is [`Failover::Off`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RocketMqConfig::validate`], or credentials the broker rejects ("RocketMQ rejected the
    /// credentials (access key `..`) ..."; without credentials "RocketMQ requires credentials
    /// ..."); [`OutboxError::Broker`] when no name server accepts a connection within 3 s or
    /// the client cannot start.
    pub async fn start(config: RocketMqConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        probe_namesrv(&config).await?;
        let host = ClientHost::new("producer")?;
        let mut builder = DefaultMQProducer::builder(host.runtime.clone())
            .producer_group(config.producer_group.clone())
            .name_server_addr(config.namesrv_addr.clone())
            .send_msg_timeout(config.send_timeout_ms())
            .max_message_size(config.max_message_bytes);
        if let Some(c) = &config.credentials {
            builder = builder.rpc_hook(c.rpc_hook());
        }
        let mut producer = builder.build();
        // NO_PERMISSION is the publisher's configuration: another broker would refuse it too.
        let mut retry_codes = producer.retry_response_codes();
        retry_codes.remove(&RESPONSE_NO_PERMISSION);
        producer.set_retry_response_codes(retry_codes);
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
        if config.verify_credentials {
            if let Err(e) = Box::pin(verify_credentials(&mut producer, &config)).await {
                Box::pin(producer.shutdown()).await;
                Box::pin(host.shutdown()).await;
                return Err(e);
            }
        }
        let access_key = config.credentials.as_ref().map(|c| c.access_key());
        tracing::info!(namesrv = %config.namesrv_addr, group = %config.producer_group, topic = %config.topic,
            topics = ?config.topics, access_key = access_key.unwrap_or("-"),
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

    /// RocketMQ's rules for an event under this publisher's configuration
    /// ([`RocketMqConfig::event_limits`]): the limits to write its events with.
    pub fn event_limits(&self) -> sea_orm_outbox::EventLimits {
        self.config.event_limits()
    }

    /// The message `event` becomes: the topic of its event type
    /// ([`RocketMqConfig::topic_of`]), tag = event type, keys = business key, user properties
    /// `eventId`, `eventType`, `bizNo` and one per header (the trace context among them),
    /// body = payload.
    ///
    /// # Errors
    /// A permanent [`PublishError`] when the message cannot be built: a header named as one of
    /// RocketMQ's own properties ([`crate::RESERVED_PROPERTY_NAMES`], refused at write time
    /// under [`crate::EVENT_LIMITS`]; possible for a row written or edited outside the library,
    /// or under other limits) or one the client refuses.
    pub fn to_message(&self, event: &OutboxMessage) -> Result<Message, PublishError> {
        build_message(self.config.topic_of(&event.event_type), event)
    }

    /// Stops the producer, then the client runtime, then the runtime owner, in that order.
    pub async fn shutdown(self) {
        self.producer.shutdown().await;
        tracing::info!("RocketMQ publisher stopped");
    }
}

#[cfg(test)]
mod tests;
