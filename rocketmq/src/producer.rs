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
use sea_orm_outbox::error::{OutboxError, PublishError, PublishErrorKind};
use sea_orm_outbox::publisher::{OutboxMessage, Publisher};

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

impl RocketMqPublisher {
    /// Sends `message` (carrying `count` events, the first `first_id`) once. With `key` (an
    /// ordered message's `biz_no`) to the key's queue ([`queue_of_key`]) whatever the
    /// [`Failover`] mode, with no broker avoidance (the key waits for its queue's broker);
    /// otherwise under [`Failover::Outbox`] to a queue chosen here, else as the client
    /// chooses. Under [`Failover::Outbox`] the outcome updates which brokers are avoided.
    async fn send(
        &self,
        message: Outgoing,
        first_id: i64,
        count: usize,
        key: Option<&str>,
    ) -> Result<(), PublishError> {
        let timeout = u64::from(self.config.send_timeout_ms());
        let signer = Signer::of(self.config.credentials.as_ref());
        let avoidance = self.avoidance.as_ref();
        // The client's own timeout does not bound everything a send does (a route lookup
        // through unreachable name servers can outlast it): the send is given up here too, as
        // a retryable error, `SEND_DEADLINE_GRACE` after `send_timeout`, so that the client's
        // own timeout wins whenever it works (its error names the broker and its fault
        // tolerance learns of a hung broker).
        let deadline = self.config.send_timeout + SEND_DEADLINE_GRACE;
        if key.is_none() && avoidance.is_none() {
            let sending = async {
                match message {
                    Outgoing::One(message) => self.producer.send(message, timeout).await,
                    Outgoing::Batch(batch) => self
                        .producer
                        .send_batch(batch.messages, timeout)
                        .await
                        .map(Some),
                }
            };
            return match tokio::time::timeout(deadline, sending).await {
                Ok(sent) => send_outcome(first_id, count, sent, signer),
                Err(_) => Err(no_answer_in_time(timeout)),
            };
        }
        let chosen: Mutex<Option<String>> = Mutex::new(None);
        let select = |queues: &[MessageQueue]| {
            let i = match (key, avoidance) {
                (Some(key), _) => queue_of_key(key, queues.len())?,
                (None, Some(avoidance)) => {
                    let brokers: Vec<&str> =
                        queues.iter().map(|q| q.broker_name().as_str()).collect();
                    avoidance.choose(&brokers, Instant::now())?
                }
                (None, None) => return None, // handled above
            };
            let queue = queues.get(i)?;
            *chosen.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(queue.broker_name().as_str().to_owned());
            Some(queue.clone())
        };
        // The worker's own send timeout may drop this future before the client's timeout
        // returns (both are `send_timeout` by default): the broker chosen then counts as failed
        // too, or a hung broker would stay in the round robin.
        let mut pending = avoidance.map(|avoidance| PendingSend {
            avoidance,
            chosen: &chosen,
            finished: false,
        });
        let sent = tokio::time::timeout(
            deadline,
            self.producer.send_selecting(message, timeout, &select),
        )
        .await;
        let Ok(sent) = sent else {
            // `pending`, not finished, counts the chosen broker as failed when dropped.
            drop(pending);
            return Err(no_answer_in_time(timeout));
        };
        if let Some(p) = pending.as_mut() {
            p.finished = true;
        }
        drop(pending);
        let outcome = send_outcome(first_id, count, sent, signer);
        let broker = chosen.into_inner().unwrap_or_else(|p| p.into_inner());
        if let (Some(avoidance), Some(broker)) = (avoidance, broker) {
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

    /// Sends one chunk of [`Publisher::publish_batch`]: a lone message as itself, several as
    /// one batch message; with `key` (ordered messages of one `biz_no`) to the key's queue.
    /// A batch refused for good is sent again message by message, so that only the message at
    /// fault fails for good (with `key` one after the other, stopping at the first failure:
    /// the rest are not sent); any other failure is every message's.
    async fn send_chunk(
        &self,
        chunk: Vec<(i64, Message)>,
        key: Option<&str>,
    ) -> Vec<Result<(), PublishError>> {
        if chunk.len() == 1 {
            let (id, message) = chunk.into_iter().next().expect("one message");
            return vec![self.send(Outgoing::One(message), id, 1, key).await];
        }
        let first_id = chunk[0].0;
        let n = chunk.len();
        let messages: Vec<Message> = chunk.iter().map(|(_, m)| m.clone()).collect();
        let outcome = match batch_message(messages) {
            Ok(batch) => self.send(Outgoing::Batch(batch), first_id, n, key).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => vec![Ok(()); n],
            Err(e) if e.kind == PublishErrorKind::Permanent => {
                tracing::warn!(first_event_id = first_id, events = n, error = %e.message,
                    "RocketMQ refused a batch for good; sending its messages one by one");
                if let Some(key) = key {
                    // In order: a later message of the key must not overtake an earlier one.
                    let mut results = Vec::with_capacity(n);
                    let mut failed = false;
                    for (id, message) in chunk {
                        if failed {
                            results.push(Err(not_sent_after_failure(key)));
                            continue;
                        }
                        let r = self.send(Outgoing::One(message), id, 1, Some(key)).await;
                        failed = r.is_err();
                        results.push(r);
                    }
                    return results;
                }
                // Concurrently: within the relay's one send timeout for the whole call, so
                // that the retry of the innocent messages takes one round trip, not n.
                let singles = chunk
                    .into_iter()
                    .map(|(id, message)| self.send(Outgoing::One(message), id, 1, None));
                futures::future::join_all(singles).await
            }
            Err(e) => vec![Err(e); n],
        }
    }

    /// The message of `event` for a batch, its unique id set (so that its encoded size is the
    /// one sent), its encoded size, and whether it must go alone: too large for a batch, or
    /// refused by the client anyway (over the message limit, or an empty body), so that it
    /// cannot fail a batch of others.
    fn batch_item(&self, event: &OutboxMessage) -> Result<(Message, usize, bool), PublishError> {
        let mut message = self.to_message(event)?;
        MessageClientIDSetter::set_uniq_id(&mut message);
        let size = encode_message(&message).len();
        let alone = size > self.config.max_batch_bytes as usize
            || event.payload.is_empty()
            || event.payload.len() > self.config.max_message_bytes as usize;
        Ok((message, size, alone))
    }

    /// [`Publisher::publish_batch`] of an ordered relay's messages: per key, chunks of
    /// consecutive messages of one topic in event order ([`ordered_chunks`]), sent one after
    /// the other to the key's queue; after a key's first failure its later messages are not
    /// sent (a retryable "not sent" error each). Different keys go concurrently.
    async fn publish_batch_ordered(
        &self,
        events: &[OutboxMessage],
    ) -> Vec<Result<(), PublishError>> {
        let limit = self.config.max_batch_bytes as usize;
        let mut built: Vec<Option<Result<Message, PublishError>>> =
            Vec::with_capacity(events.len());
        let mut items = Vec::with_capacity(events.len());
        for event in events {
            let topic = self.config.topic_of(&event.event_type);
            match self.batch_item(event) {
                Ok((message, size, alone)) => {
                    built.push(Some(Ok(message)));
                    items.push(ChunkItem {
                        key: event.biz_no.as_str(),
                        topic: Some(topic),
                        size,
                        alone,
                    });
                }
                Err(e) => {
                    built.push(Some(Err(e)));
                    items.push(ChunkItem {
                        key: event.biz_no.as_str(),
                        topic: None,
                        size: 0,
                        alone: true,
                    });
                }
            }
        }
        // Each key's steps, the messages moved in.
        let plan: Vec<(&str, Vec<KeyStep>)> = ordered_chunks(&items, limit)
            .into_iter()
            .map(|(key, chunks)| {
                let steps = chunks
                    .into_iter()
                    .map(|idx| {
                        let mut messages = Vec::with_capacity(idx.len());
                        let mut broken = None;
                        for &i in &idx {
                            match built[i].take() {
                                Some(Ok(m)) => messages.push((events[i].event_id, m)),
                                Some(Err(e)) => broken = Some(e),
                                None => {}
                            }
                        }
                        let step = match broken {
                            Some(e) => Step::Broken(e),
                            None => Step::Send(messages),
                        };
                        (idx, step)
                    })
                    .collect();
                (key, steps)
            })
            .collect();
        let per_key = plan.into_iter().map(|(key, steps)| async move {
            let mut outcomes: Vec<(usize, Result<(), PublishError>)> = Vec::new();
            let mut failed = false;
            for (idx, step) in steps {
                if failed {
                    outcomes.extend(
                        idx.into_iter()
                            .map(|i| (i, Err(not_sent_after_failure(key)))),
                    );
                    continue;
                }
                let sent = match step {
                    Step::Broken(e) => vec![Err(e)],
                    Step::Send(messages) => self.send_chunk(messages, Some(key)).await,
                };
                failed = sent.iter().any(Result::is_err);
                outcomes.extend(idx.into_iter().zip(sent));
            }
            outcomes
        });
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; events.len()];
        for (i, outcome) in futures::future::join_all(per_key)
            .await
            .into_iter()
            .flatten()
        {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
            .collect()
    }
}

/// One step of a key in [`RocketMqPublisher::publish_batch_ordered`] and the indices of its
/// events in the call.
type KeyStep = (Vec<usize>, Step);

/// The topic and encoded size of a key's open chunk in [`ordered_chunks`] (`None`: closed).
type OpenChunk<'a> = Option<(&'a str, usize)>;

/// One step of a key in [`RocketMqPublisher::publish_batch_ordered`].
enum Step {
    /// A chunk to send (event id, message), in event order.
    Send(Vec<(i64, Message)>),
    /// An event whose message could not be built: it fails, and stops its key.
    Broken(PublishError),
}

/// The error of an ordered message not sent because an earlier message of its key failed in
/// the same call (retryable: it goes again after that one).
fn not_sent_after_failure(key: &str) -> PublishError {
    PublishError::retryable(format!(
        "not sent: an earlier event of key {key} failed in the same batch"
    ))
}

/// What [`ordered_chunks`] knows of one message.
#[derive(Debug, Clone, Copy)]
struct ChunkItem<'a> {
    /// Its business key.
    key: &'a str,
    /// Its topic; `None` when its message could not be built (it is a chunk of its own).
    topic: Option<&'a str>,
    /// Its encoded size in bytes.
    size: usize,
    /// Whether it must be sent alone (a chunk of its own).
    alone: bool,
}

/// The chunks of an ordered batch: for each key, in the order of the key's first message,
/// the indices into `items` of its chunks in message order. A chunk holds consecutive
/// messages of the key with one topic and at most `limit` encoded bytes; a message that must
/// go alone, or could not be built, is a chunk of its own.
fn ordered_chunks<'a>(items: &[ChunkItem<'a>], limit: usize) -> Vec<(&'a str, Vec<Vec<usize>>)> {
    let mut keys: Vec<(&'a str, Vec<Vec<usize>>)> = Vec::new();
    // Per key: its position in `keys`, and the open chunk's topic and size (`None`: closed).
    let mut open: std::collections::HashMap<&'a str, (usize, OpenChunk<'a>)> =
        std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let (k, current) = *open.entry(item.key).or_insert_with(|| {
            keys.push((item.key, Vec::new()));
            (keys.len() - 1, None)
        });
        let chunks = &mut keys[k].1;
        let next = match (item.topic, current) {
            (Some(topic), Some((t, size)))
                if !item.alone && t == topic && size + item.size <= limit =>
            {
                chunks.last_mut().expect("an open chunk").push(i);
                Some((topic, size + item.size))
            }
            (Some(topic), _) if !item.alone => {
                chunks.push(vec![i]);
                Some((topic, item.size))
            }
            _ => {
                chunks.push(vec![i]);
                None
            }
        };
        open.insert(item.key, (k, next));
    }
    keys
}

#[async_trait]
impl Publisher for RocketMqPublisher {
    /// Sends the event's message once. Under [`Failover::Outbox`] the queue is chosen here
    /// ([`Failover`]); the outcome of the send updates which brokers are avoided. Never sent a
    /// second time within one call: a failure is returned (retryable unless the message itself
    /// was refused) and the outbox's retry sends it again, to another broker if this one failed.
    ///
    /// An [`OutboxMessage::ordered`] message goes to its key's queue instead, whatever the
    /// [`Failover`] mode: the queue `biz_no`'s Java `String.hashCode()` picks among the
    /// route's queues (the rule of Java's `SelectMessageQueueByHash`), so that every relay
    /// sends one key to one queue and an orderly consumer sees the key in order. No broker is
    /// avoided for it: while its queue's broker is down its sends fail (retryable) and the key
    /// waits, the other keys go on; the outcome still updates the avoidance memory.
    async fn publish(&self, event: &OutboxMessage) -> Result<(), PublishError> {
        let message = self.to_message(event)?;
        let key = event.ordered.then_some(event.biz_no.as_str());
        self.send(Outgoing::One(message), event.event_id, 1, key)
            .await
    }

    /// Sends `events` as RocketMQ batch messages: one per topic ([`RocketMqConfig::topic_of`])
    /// and at most [`RocketMqConfig::max_batch_bytes`] of encoded messages each (the
    /// client's wire encoding), in event order, the topics' batches concurrently. A batch goes
    /// to one queue of one broker and is stored all or nothing, so each event's result is its
    /// batch's. One topic's batches go one after the other, in event order.
    ///
    /// An event whose message alone exceeds `max_batch_bytes` is sent alone, and fails alone
    /// (permanently: the client refuses it, `MESSAGE_ILLEGAL`) when its body exceeds
    /// [`RocketMqConfig::max_message_bytes`]; so does an event with an empty body. A batch
    /// refused for good anyway is sent again message by message (concurrently, within the same
    /// call), so that only the message at fault becomes a dead letter. A batch that failed
    /// otherwise (time-out, broker down or busy) fails for each of its events, retryable, and
    /// the relay puts each back with its own back-off; under [`Failover::Outbox`] its broker is
    /// then avoided like after a failed single send. Never sent a second time within one call
    /// except in the permanent case above, whose first attempt the broker refused.
    ///
    /// Ordered messages ([`OutboxMessage::ordered`]; when any message of the call is, all are
    /// treated so): per key, chunks of consecutive messages of one topic (at most
    /// `max_batch_bytes` each) in event order, sent one after the other to the key's queue
    /// (see [`Publisher::publish`] here); after a key's first failed chunk its later messages
    /// are not sent and fail retryably ("not sent: an earlier event of key K failed ...").
    /// Different keys go concurrently. A chunk refused for good is sent again message by
    /// message in order, stopping at the first failure.
    async fn publish_batch(&self, events: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        if events.iter().any(|e| e.ordered) {
            return self.publish_batch_ordered(events).await;
        }
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; events.len()];
        let mut chunks: Vec<(String, Vec<usize>, Vec<(i64, Message)>, usize)> = Vec::new();
        let limit = self.config.max_batch_bytes as usize;
        // Per topic, the chunk being filled (an index into `chunks`).
        let mut open: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, event) in events.iter().enumerate() {
            let mut message = match self.to_message(event) {
                Ok(m) => m,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            // Set here (the client would set it while sending) so that the size is the one sent.
            MessageClientIDSetter::set_uniq_id(&mut message);
            let size = encode_message(&message).len();
            let topic = self.config.topic_of(&event.event_type);
            // Alone: too large for a batch, refused by the client anyway (over the message
            // limit, or an empty body), so that it cannot fail a batch of others.
            let alone = size > limit
                || event.payload.is_empty()
                || event.payload.len() > self.config.max_message_bytes as usize;
            let fits = open
                .get(topic)
                .is_some_and(|&c| !alone && chunks[c].3 + size <= limit);
            if fits {
                let c = open[topic];
                chunks[c].1.push(i);
                chunks[c].2.push((event.event_id, message));
                chunks[c].3 += size;
            } else {
                chunks.push((
                    topic.to_owned(),
                    vec![i],
                    vec![(event.event_id, message)],
                    size,
                ));
                if alone {
                    open.remove(topic);
                } else {
                    open.insert(topic, chunks.len() - 1);
                }
            }
        }
        // One topic's chunks one after the other (the broker keeps a topic's events in the
        // order given), the topics concurrently.
        let mut by_topic: Vec<(String, Vec<(Vec<usize>, Vec<(i64, Message)>)>)> = Vec::new();
        for (topic, idx, msgs, _) in chunks {
            match by_topic.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, list)) => list.push((idx, msgs)),
                None => by_topic.push((topic, vec![(idx, msgs)])),
            }
        }
        let per_topic = by_topic.into_iter().map(|(_, list)| async move {
            let mut outcomes = Vec::new();
            for (idx, msgs) in list {
                outcomes.push((idx, self.send_chunk(msgs, None).await));
            }
            outcomes
        });
        for (idx, sent) in futures::future::join_all(per_topic)
            .await
            .into_iter()
            .flatten()
        {
            for (i, outcome) in idx.into_iter().zip(sent) {
                results[i] = Some(outcome);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
            .collect()
    }

    /// `true`: [`Publisher::publish_batch`] sends RocketMQ batch messages.
    fn batches(&self) -> bool {
        true
    }
}

/// A send in flight under [`Failover::Outbox`]: dropped before it finished (the caller gave up
/// on it, e.g. the worker's send timeout), it counts as a failure of the broker it chose.
struct PendingSend<'a> {
    avoidance: &'a BrokerAvoidance,
    chosen: &'a Mutex<Option<String>>,
    finished: bool,
}

impl Drop for PendingSend<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let broker = self
            .chosen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(broker) = broker {
            if self.avoidance.failed(&broker, Instant::now()) == Failed::NewlyAvoided {
                tracing::warn!(%broker, avoid_ms = self.avoidance.window().as_millis() as u64,
                    "RocketMQ send to a broker was given up (no answer in time); other brokers take the sends");
            }
        }
    }
}

/// How long after its `send_timeout` the publisher gives up a send the client has not answered
/// (500 milliseconds): the client's own timeout comes first whenever it bounds the send.
const SEND_DEADLINE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The retryable error of a send the client did not answer within `timeout_ms`
/// milliseconds (the configured `send_timeout`).
fn no_answer_in_time(timeout_ms: u64) -> PublishError {
    PublishError::retryable(format!(
        "RocketMQ send timed out: no answer from the client within the send_timeout of \
         {timeout_ms} ms"
    ))
}

/// What a send's result means for the event (`signer`: the credentials in use, for the text of
/// a `NO_PERMISSION` answer).
fn send_outcome(
    first_id: i64,
    count: usize,
    sent: ClientResult<Option<SendResult>>,
    signer: Signer<'_>,
) -> Result<(), PublishError> {
    match sent {
        Ok(Some(result)) if result.send_status == SendStatus::SendOk => {
            tracing::debug!(
                event_id = first_id,
                events = count,
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
        Err(e) => Err(classify_for(&e, signer)),
    }
}

/// Longest the credentials check at start may take.
const VERIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks a broker for the maximum offset of a queue of `config.topic` (or of `TBW102` when the
/// topic has no route yet), a signed read-only request: `NO_PERMISSION` means the credentials
/// (or their absence) are rejected. When no broker can be asked the check is skipped (INFO).
///
/// # Errors
/// [`OutboxError::InvalidConfig`] naming the access key when the broker answers
/// `NO_PERMISSION`.
async fn verify_credentials(
    producer: &mut DefaultMQProducer,
    config: &RocketMqConfig,
) -> Result<(), OutboxError> {
    let check = async {
        let mut queue = None;
        let mut why = String::new();
        for topic in [
            config.topic.as_str(),
            TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC,
        ] {
            match Box::pin(producer.fetch_publish_message_queues(topic)).await {
                Ok(queues) if !queues.is_empty() => {
                    queue = queues.into_iter().next();
                    break;
                }
                Ok(_) => why = format!("no queues for {topic}"),
                Err(e) => why = format!("no route for {topic}: {}", client_error_text(&e)),
            }
        }
        let Some(queue) = queue else {
            return Err(why);
        };
        match Box::pin(producer.max_offset(&queue)).await {
            Ok(_) => {
                tracing::debug!(topic = %queue.topic(), broker = %queue.broker_name(), "RocketMQ broker accepted the publisher's credentials");
                Ok(true)
            }
            Err(e) if is_no_permission(&e) => Ok(false),
            Err(e) => Err(client_error_text(&e)),
        }
    };
    match tokio::time::timeout(VERIFY_TIMEOUT, check).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(OutboxError::InvalidConfig(no_permission_text(Signer::of(
            config.credentials.as_ref(),
        )))),
        Ok(Err(why)) => {
            tracing::info!(reason = %why, "RocketMQ credentials not checked at start (no broker could be asked); a rejection by the broker later keeps events WAIT, uncounted");
            Ok(())
        }
        Err(_) => {
            tracing::info!(
                timeout_ms = VERIFY_TIMEOUT.as_millis() as u64,
                "RocketMQ credentials not checked at start (no answer in time)"
            );
            Ok(())
        }
    }
}

/// What one send carries: one message, or a batch of one topic's messages.
enum Outgoing {
    One(Message),
    Batch(MessageBatch),
}

/// `messages` (one topic, each with its unique id set) as one RocketMQ batch message, built as
/// the client builds one (`DefaultMQProducer::batch`): the messages encoded one after another
/// in the batch's body, the batch with a unique id of its own.
///
/// # Errors
/// A permanent [`PublishError`] when the client refuses to batch them (topics differ).
fn batch_message(messages: Vec<Message>) -> Result<MessageBatch, PublishError> {
    let mut batch = MessageBatch::generate_from_messages(messages).map_err(|e| {
        PublishError::permanent(format!(
            "RocketMQ batch could not be built: {}",
            error_text(&e)
        ))
    })?;
    for message in &mut batch.messages {
        MessageClientIDSetter::set_uniq_id(message);
    }
    MessageClientIDSetter::set_uniq_id(&mut batch.final_message);
    let body = encode_messages(&batch.messages);
    batch.set_body(body);
    Ok(batch)
}

/// The message for `event` on `topic` (see [`RocketMqPublisher::to_message`]).
fn build_message(topic: &str, event: &OutboxMessage) -> Result<Message, PublishError> {
    let mut builder = Message::builder()
        .topic(topic)
        .tags(event.event_type.as_str())
        .key(event.biz_no.as_str())
        .body_slice(event.payload.as_bytes());
    if let Some((name, _)) = event.headers.iter().find(|(n, _)| limits::is_reserved(n)) {
        return Err(PublishError::permanent(format!(
            "event {}: the header name {name} is reserved for RocketMQ's own properties",
            event.event_id
        )));
    }
    let fixed = event.properties();
    let headers = event.headers.iter().map(|(n, v)| (n.as_str(), v.clone()));
    for (name, value) in fixed.into_iter().chain(headers) {
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
        let event = OutboxMessage::new(42, "ORD-42", "ORDER_CREATED", r#"{"a":1}"#)
            .with_header("tenant", "acme");
        let m = build_message("T", &event).expect("message");
        // A row written outside the library with one of RocketMQ's own names is refused for good.
        for name in ["DELAY", "__RMQ.TRANSIENT.x"] {
            let bad = event.clone().with_header(name, "1");
            let err = build_message("T", &bad).expect_err(name);
            assert!(!err.is_retryable(), "{name}: {err}");
        }
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
        assert_eq!(get("tenant").as_deref(), Some("acme"));
        // A reserved name (only possible for a row edited by hand) is refused, not sent.
        let bad = event.clone().with_header("KEYS", "x");
        assert!(build_message("T", &bad).is_err());
    }

    /// One send the fake producer saw: the event ids it carried and the queue chosen
    /// (`None`: the client's own choice).
    type Seen = (Vec<i64>, Option<MessageQueue>);

    /// A producer without a broker: a route of 4 queues on broker-a and 4 on broker-b for
    /// every topic; a send that carries an event of `fail` gets a non-OK status.
    struct FakeProducer {
        seen: std::sync::Arc<Mutex<Vec<Seen>>>,
        fail: std::collections::HashSet<i64>,
    }

    fn route(topic: &str) -> Vec<MessageQueue> {
        ["broker-a", "broker-b"]
            .iter()
            .flat_map(|b| (0..4).map(move |q| MessageQueue::from_parts(topic, *b, q)))
            .collect()
    }

    fn event_ids(messages: &[&Message]) -> Vec<i64> {
        messages
            .iter()
            .filter_map(|m| {
                m.get_properties()
                    .iter()
                    .find(|(n, _)| n.as_str() == "eventId")
                    .and_then(|(_, v)| v.as_str().parse().ok())
            })
            .collect()
    }

    impl FakeProducer {
        fn outcome(&self, ids: Vec<i64>, queue: Option<MessageQueue>) -> SendResult {
            let failed = ids.iter().any(|id| self.fail.contains(id));
            self.seen.lock().expect("lock").push((ids, queue));
            SendResult {
                send_status: if failed {
                    SendStatus::FlushDiskTimeout
                } else {
                    SendStatus::SendOk
                },
                ..SendResult::default()
            }
        }
    }

    impl ProducerHandle for FakeProducer {
        fn send(
            &self,
            message: Message,
            _: u64,
        ) -> SendFuture<'_, ClientResult<Option<SendResult>>> {
            let r = self.outcome(event_ids(&[&message]), None);
            Box::pin(async move { Ok(Some(r)) })
        }

        fn send_batch(
            &self,
            messages: Vec<Message>,
            _: u64,
        ) -> SendFuture<'_, ClientResult<SendResult>> {
            let r = self.outcome(event_ids(&messages.iter().collect::<Vec<_>>()), None);
            Box::pin(async move { Ok(r) })
        }

        fn send_selecting<'a>(
            &'a self,
            message: Outgoing,
            _: u64,
            select: QueueSelector<'a>,
        ) -> SendFuture<'a, ClientResult<Option<SendResult>>> {
            let (topic, ids) = match &message {
                Outgoing::One(m) => (m.topic().to_string(), event_ids(&[m])),
                Outgoing::Batch(b) => (
                    b.messages[0].topic().to_string(),
                    event_ids(&b.messages.iter().collect::<Vec<_>>()),
                ),
            };
            let queue = select(&route(&topic));
            let r = self.outcome(ids, queue);
            Box::pin(async move { Ok(Some(r)) })
        }

        fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    /// A publisher on the fake producer (topics: `E1` → `T1`, `E2` → `T2`).
    fn fake(
        failover: Failover,
        fail: &[i64],
    ) -> (RocketMqPublisher, std::sync::Arc<Mutex<Vec<Seen>>>) {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let config = RocketMqConfig::new("127.0.0.1:9876")
            .topic("T1")
            .topic_for("E2", "T2")
            .failover(failover);
        let avoidance = (failover == Failover::Outbox)
            .then(|| BrokerAvoidance::new(std::time::Duration::from_secs(30)));
        let producer = FakeProducer {
            seen: seen.clone(),
            fail: fail.iter().copied().collect(),
        };
        (
            RocketMqPublisher {
                config,
                producer: Box::new(producer),
                avoidance,
            },
            seen,
        )
    }

    fn ordered(id: i64, key: &str, event_type: &str) -> OutboxMessage {
        OutboxMessage::new(id, key, event_type, "{}").with_ordered(true)
    }

    /// The queue `key` goes to on the fake route.
    fn queue_of(key: &str, topic: &str) -> MessageQueue {
        route(topic)[queue_of_key(key, 8).expect("a queue")].clone()
    }

    #[tokio::test]
    async fn an_ordered_message_goes_to_its_keys_queue_whatever_the_failover() {
        for failover in [Failover::Outbox, Failover::Client, Failover::Off] {
            let (p, seen) = fake(failover, &[]);
            if let Some(a) = &p.avoidance {
                // Avoiding the key's broker changes nothing for an ordered message.
                a.failed(
                    queue_of("ORD-1", "T1").broker_name().as_str(),
                    Instant::now(),
                );
            }
            for id in 1..=3 {
                p.publish(&ordered(id, "ORD-1", "E1")).await.expect("sent");
            }
            p.publish(&ordered(4, "ORD-2", "E1")).await.expect("sent");
            // Unordered: the client's choice (or the avoidance's), not the key's.
            p.publish(&OutboxMessage::new(5, "ORD-1", "E1", "{}"))
                .await
                .expect("sent");
            let seen = seen.lock().expect("lock").clone();
            let queues: Vec<_> = seen.iter().map(|(_, q)| q.clone()).collect();
            let want = Some(queue_of("ORD-1", "T1"));
            assert_eq!(
                &queues[..3],
                &[want.clone(), want.clone(), want],
                "{failover}"
            );
            assert_eq!(queues[3], Some(queue_of("ORD-2", "T1")), "{failover}");
            match failover {
                Failover::Outbox => assert!(queues[4].is_some()),
                _ => assert_eq!(queues[4], None, "{failover}"),
            }
        }
    }

    #[tokio::test]
    async fn an_ordered_batch_stops_a_key_at_its_first_failed_chunk() {
        let (p, seen) = fake(Failover::Off, &[3]);
        // Key A: 1, 2 (T1), 3, 4 (T2), 5 (T1): chunks [1, 2], [3, 4], [5]; 3 fails.
        // Key B: 6, 7 (T1), interleaved.
        let messages = [
            ordered(1, "A", "E1"),
            ordered(6, "B", "E1"),
            ordered(2, "A", "E1"),
            ordered(3, "A", "E2"),
            ordered(4, "A", "E2"),
            ordered(7, "B", "E1"),
            ordered(5, "A", "E1"),
        ];
        let results = p.publish_batch(&messages).await;
        let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [true, true, true, false, false, true, false]);
        let not_sent = results[6].as_ref().expect_err("not sent");
        assert_eq!(not_sent.kind, PublishErrorKind::Retryable);
        assert!(
            not_sent.message.contains("earlier event of key A"),
            "{not_sent:?}"
        );
        let seen = seen.lock().expect("lock").clone();
        let mut sends: Vec<_> = seen.iter().map(|(ids, _)| ids.clone()).collect();
        sends.sort();
        // Event 5 was never sent; B's events went as one batch.
        assert_eq!(sends, [vec![1, 2], vec![3, 4], vec![6, 7]]);
        for (ids, queue) in &seen {
            let (key, topic) = match ids[0] {
                1 | 2 => ("A", "T1"),
                3 | 4 => ("A", "T2"),
                _ => ("B", "T1"),
            };
            assert_eq!(queue.as_ref(), Some(&queue_of(key, topic)), "{ids:?}");
        }
        // Unordered batches are unchanged: one per topic, the client's queue (Failover::Off).
        let (p, seen) = fake(Failover::Off, &[]);
        let plain: Vec<OutboxMessage> = (1..=4)
            .map(|id| OutboxMessage::new(id, ["A", "B"][id as usize % 2], "E1", "{}"))
            .collect();
        assert!(p.publish_batch(&plain).await.iter().all(Result::is_ok));
        assert_eq!(
            seen.lock().expect("lock").clone(),
            [(vec![1, 2, 3, 4], None)]
        );
    }

    fn item<'a>(key: &'a str, topic: &'a str, size: usize) -> ChunkItem<'a> {
        ChunkItem {
            key,
            topic: Some(topic),
            size,
            alone: false,
        }
    }

    #[test]
    fn ordered_chunks_follow_each_key_in_event_order() {
        let items = [
            item("A", "T", 10), // 0
            item("B", "T", 10), // 1
            item("A", "T", 10), // 2
            item("A", "U", 10), // 3: another topic starts a chunk
            item("A", "U", 10), // 4
            item("B", "T", 10), // 5
            ChunkItem {
                alone: true,
                ..item("A", "U", 10)
            }, // 6: alone
            item("A", "U", 10), // 7: after a lone one, a new chunk
            ChunkItem {
                topic: None,
                ..item("B", "T", 0)
            }, // 8: not built
            item("B", "T", 10), // 9
            item("C", "T", 15), // 10
            item("C", "T", 15), // 11: over the limit of 25
        ];
        let plan = ordered_chunks(&items, 25);
        assert_eq!(
            plan,
            vec![
                ("A", vec![vec![0, 2], vec![3, 4], vec![6], vec![7]]),
                ("B", vec![vec![1, 5], vec![8], vec![9]]),
                ("C", vec![vec![10], vec![11]]),
            ]
        );
        // Within the limit, one key's consecutive events of one topic are one chunk, and the
        // keys keep the order of their first message.
        let items: Vec<_> = (0..6).map(|i| item(["K2", "K1"][i % 2], "T", 1)).collect();
        assert_eq!(
            ordered_chunks(&items, 100),
            vec![("K2", vec![vec![0, 2, 4]]), ("K1", vec![vec![1, 3, 5]])]
        );
        assert!(ordered_chunks(&[], 100).is_empty());
    }

    #[test]
    fn a_send_given_up_counts_as_a_failure_of_its_broker() {
        let avoidance = BrokerAvoidance::new(std::time::Duration::from_secs(30));
        let brokers = ["broker-a", "broker-b"];
        // Finished sends leave the avoidance to the outcome.
        let chosen = Mutex::new(Some("broker-a".to_owned()));
        drop(PendingSend {
            avoidance: &avoidance,
            chosen: &chosen,
            finished: true,
        });
        let now = Instant::now();
        let picks: Vec<_> = (0..4)
            .map(|_| avoidance.choose(&brokers, now).expect("a broker"))
            .collect();
        assert!(picks.contains(&0), "broker-a still chosen: {picks:?}");
        // Dropped before it finished (the worker's timeout): broker-a is avoided.
        drop(PendingSend {
            avoidance: &avoidance,
            chosen: &chosen,
            finished: false,
        });
        for _ in 0..4 {
            assert_eq!(avoidance.choose(&brokers, now), Some(1));
        }
        // Dropped before any queue was chosen: nothing to count.
        let none = Mutex::new(None);
        drop(PendingSend {
            avoidance: &avoidance,
            chosen: &none,
            finished: false,
        });
    }
}
