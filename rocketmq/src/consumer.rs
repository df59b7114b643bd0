//! [`RocketMqConsumer`], a small consumer for tests, examples and demos that read back what the
//! relay sent, and the [`ReceivedMessage`]s it returns.
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{
    ClientConfig, ClientOptions, ConsumeOrderlyContext, ConsumeOrderlyStatus,
    DefaultLitePullConsumer, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::common::topic::TopicValidator;

use super::config::{check_name, RocketMqConfig, GROUP_MAX_LEN};
use super::credentials::Credentials;
use super::errors::client_error_text;
use super::runtime::{probe_namesrv, ClientHost, SendFuture};
use sea_orm_outbox::OutboxError;

mod received;
mod topic;

pub use received::ReceivedMessage;
use topic::ensure_topic;

/// A small consumer for tests and demos on one topic (all tags) in its own consumer group,
/// reading each queue from its first offset, with its own client runtime: a lite pull
/// consumer ([`RocketMqConsumer::start`]), or an orderly push consumer
/// ([`RocketMqConsumer::start_orderly`]).
///
/// Meant for an application's own tests: publish through the relay, then read the messages
/// back and check them (the `eventId` property, the headers, the order of a key). It creates
/// the topic when missing. Not a production consumer: it keeps no offsets and has no retry or
/// dead-letter handling.
///
/// ```no_run
/// # async fn demo() -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::time::Duration;
/// use sea_orm_outbox_rocketmq::RocketMqConsumer;
///
/// let consumer = RocketMqConsumer::start("127.0.0.1:9876", "my_test_cg", "ORDERS").await?;
/// let got = consumer.collect_until(Duration::from_secs(30), |m| m.len() >= 10).await;
/// assert!(got.iter().all(|m| m.event_id.is_some()));
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
pub struct RocketMqConsumer {
    consumer: Box<dyn ConsumerHandle>,
    topic: String,
}

/// The consumer and its runtime behind a trait object (see [`SendFuture`]).
trait ConsumerHandle: Send + Sync {
    /// The messages that arrive within `timeout_ms` milliseconds.
    fn poll(&self, timeout_ms: u64) -> SendFuture<'_, Vec<ReceivedMessage>>;
    /// Stops the consumer, then its host.
    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()>;
}

/// A started consumer and the host it runs on.
struct OwnedConsumer {
    consumer: DefaultLitePullConsumer,
    host: ClientHost,
    /// Numbers the messages handed out ([`ReceivedMessage::received_seq`]).
    seq: AtomicU64,
}

/// A started orderly push consumer, the host it runs on, and the channel its listener hands
/// the messages to, in the order it consumed them.
struct OwnedOrderlyConsumer {
    consumer: DefaultMQPushConsumer,
    host: ClientHost,
    received: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<ReceivedMessage>>,
}

impl ConsumerHandle for OwnedOrderlyConsumer {
    fn poll(&self, timeout_ms: u64) -> SendFuture<'_, Vec<ReceivedMessage>> {
        Box::pin(async move {
            let mut rx = self.received.lock().await;
            let mut out = Vec::new();
            let first = tokio::time::timeout(Duration::from_millis(timeout_ms), rx.recv()).await;
            if let Ok(Some(m)) = first {
                out.push(m);
                while let Ok(m) = rx.try_recv() {
                    out.push(m);
                }
            }
            out
        })
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async move {
            let OwnedOrderlyConsumer {
                mut consumer, host, ..
            } = *self;
            Box::pin(consumer.shutdown()).await;
            Box::pin(host.shutdown()).await;
        })
    }
}

/// Longest the broker holds a pull open when there is nothing new (its long poll).
const BROKER_SUSPEND_MS: u64 = 1_000;
/// How long [`ConsumerHandle::shutdown`] lets the pulls in flight return after pausing every
/// queue: the broker's long poll and a margin.
const PULL_DRAIN: Duration = Duration::from_millis(BROKER_SUSPEND_MS + 500);

impl ConsumerHandle for OwnedConsumer {
    fn poll(&self, timeout_ms: u64) -> SendFuture<'_, Vec<ReceivedMessage>> {
        Box::pin(async move {
            let messages = Box::pin(self.consumer.poll_with_timeout(timeout_ms)).await;
            // Commit only the queues that returned messages: the client's auto-commit also
            // commits the queues nothing was read from yet and logs an ERROR ("Consume offset
            // is -1 ..., skip commit") for each of them, at the first poll and every 5 s.
            let queues: HashSet<MessageQueue> = messages
                .iter()
                .map(|m| MessageQueue::from_parts(m.topic().clone(), m.broker_name(), m.queue_id()))
                .collect();
            if !queues.is_empty() {
                Box::pin(self.consumer.commit_with_set(queues, false)).await;
            }
            messages
                .iter()
                .map(|m| ReceivedMessage::from_ext(m).numbered(&self.seq))
                .collect()
        })
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async move {
            let OwnedConsumer { consumer, host, .. } = *self;
            // The client's shutdown drops each queue's assignment before the pull in flight
            // on it returns, and that pull then logs "Pull error ... core.argument.invalid" at
            // ERROR. Paused first, every pull task finishes its pull (within the broker's long
            // poll) and then waits, and a waiting task ends quietly at shutdown.
            if let Ok(queues) = Box::pin(consumer.assignment()).await {
                if !queues.is_empty() {
                    Box::pin(consumer.pause(queues.into_iter().collect())).await;
                    tokio::time::sleep(PULL_DRAIN).await;
                }
            }
            Box::pin(consumer.shutdown()).await;
            Box::pin(host.shutdown()).await;
        })
    }
}

impl std::fmt::Debug for RocketMqConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqConsumer")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl RocketMqConsumer {
    /// Subscribes `group` to `topic` through the name server(s) at `namesrv_addr` and starts.
    ///
    /// The topic is created first when missing or not on every broker of the `TBW102`
    /// template's route (4 queues per broker), so the consumer's queues are assigned at start
    /// instead of after a later route poll (every 10 s here, 30 s by default), and a cluster's
    /// producers can send to every broker.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for an invalid group or topic name,
    /// [`OutboxError::Broker`] when no name server answers, the topic's route does not appear
    /// within 15 s, or the consumer cannot start.
    pub async fn start(namesrv_addr: &str, group: &str, topic: &str) -> Result<Self, OutboxError> {
        Self::start_with_credentials(namesrv_addr, group, topic, None).await
    }

    /// [`RocketMqConsumer::start`] with every broker request signed with `credentials` (a
    /// broker with authentication; `None`: unsigned).
    ///
    /// # Errors
    /// As [`RocketMqConsumer::start`], and [`OutboxError::InvalidConfig`] for credentials
    /// that fail [`Credentials::validate`].
    pub async fn start_with_credentials(
        namesrv_addr: &str,
        group: &str,
        topic: &str,
        credentials: Option<Credentials>,
    ) -> Result<Self, OutboxError> {
        check_name("consumer group", group, GROUP_MAX_LEN)?;
        let mut probe = RocketMqConfig::new(namesrv_addr).topic(topic);
        probe.credentials = credentials.clone();
        probe.validate()?;
        probe_namesrv(&probe).await?;
        let host = ClientHost::new("consumer")?;
        let started = Box::pin(async {
            ensure_topic(&host, namesrv_addr, topic, credentials.as_ref()).await?;
            let client_config = ClientConfig::builder()
                .namesrv_addr(namesrv_addr)
                // The client's minimum (default 30 s): route changes are seen sooner.
                .poll_name_server_interval(10_000)
                .build()
                .map_err(|e| client_error_text(&e))?;
            let mut builder = DefaultLitePullConsumer::builder(host.runtime.clone());
            if let Some(c) = &credentials {
                builder = builder.rpc_hook(c.rpc_hook());
            }
            let consumer = builder
                .client_options(ClientOptions::legacy(client_config))
                .consumer_group(group)
                .name_server_addr(namesrv_addr)
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .pull_batch_size(32)
                .poll_timeout_millis(500)
                // Short broker long-polls: shutdown waits for the pull in flight on each queue.
                .broker_suspend_max_time_millis(BROKER_SUSPEND_MS)
                .consumer_timeout_millis_when_suspend(3_000)
                .topic_metadata_check_interval_millis(1_000)
                // Offsets are committed by `poll`, for the queues it read from.
                .auto_commit(false)
                .build()
                .map_err(|e| client_error_text(&e))?;
            Box::pin(consumer.subscribe_with_expression(topic, "*"))
                .await
                .map_err(|e| client_error_text(&e))?;
            Box::pin(consumer.start())
                .await
                .map_err(|e| client_error_text(&e))?;
            Ok::<_, String>(consumer)
        })
        .await;
        match started {
            Ok(consumer) => Ok(RocketMqConsumer {
                consumer: Box::new(OwnedConsumer {
                    consumer,
                    host,
                    seq: AtomicU64::new(0),
                }),
                topic: topic.to_owned(),
            }),
            Err(e) => {
                Box::pin(host.shutdown()).await;
                Err(OutboxError::Broker(format!(
                    "RocketMQ consumer did not start: {e}"
                )))
            }
        }
    }

    /// An orderly consumer (the client's push consumer with a `MessageListenerOrderly`):
    /// subscribes `group` to `topic` at the name server(s) `namesrv_addr` and starts. It
    /// locks each of its queues at the broker and consumes one queue's messages strictly in
    /// queue-offset order, one batch at a time, as a RocketMQ orderly consumer of an
    /// application does; [`RocketMqConsumer::poll`] hands them out in the order consumed
    /// ([`ReceivedMessage::received_seq`]), with their queue and offset. The topic is created
    /// first as by [`RocketMqConsumer::start`].
    ///
    /// # Errors
    /// As [`RocketMqConsumer::start`].
    pub async fn start_orderly(
        namesrv_addr: &str,
        group: &str,
        topic: &str,
    ) -> Result<Self, OutboxError> {
        check_name("consumer group", group, GROUP_MAX_LEN)?;
        let probe = RocketMqConfig::new(namesrv_addr).topic(topic);
        probe.validate()?;
        probe_namesrv(&probe).await?;
        let host = ClientHost::new("consumer")?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let started = Box::pin(async {
            ensure_topic(&host, namesrv_addr, topic, None).await?;
            let client_config = ClientConfig::builder()
                .namesrv_addr(namesrv_addr)
                .poll_name_server_interval(10_000)
                .build()
                .map_err(|e| client_error_text(&e))?;
            let mut consumer = DefaultMQPushConsumer::builder(host.runtime.clone())
                .client_options(ClientOptions::legacy(client_config))
                .consumer_group(group)
                .name_server_addr(namesrv_addr)
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .pull_batch_size(32)
                .consume_message_batch_max_size(32)
                .build();
            Box::pin(consumer.subscribe(topic, "*"))
                .await
                .map_err(|e| client_error_text(&e))?;
            let seq = Arc::new(AtomicU64::new(0));
            consumer.register_message_listener_orderly(
                move |msgs: &[&MessageExt],
                      ctx: &mut ConsumeOrderlyContext|
                      -> rocketmq_client_rust::ClientResult<ConsumeOrderlyStatus> {
                    ctx.set_auto_commit(true);
                    for m in msgs {
                        // The receiver is gone only at shutdown: nothing left to record.
                        let _ = tx.send(ReceivedMessage::from_ext(m).numbered(&seq));
                    }
                    Ok(ConsumeOrderlyStatus::Success)
                },
            );
            Box::pin(consumer.start())
                .await
                .map_err(|e| client_error_text(&e))?;
            Ok::<_, String>(consumer)
        })
        .await;
        match started {
            Ok(consumer) => Ok(RocketMqConsumer {
                consumer: Box::new(OwnedOrderlyConsumer {
                    consumer,
                    host,
                    received: tokio::sync::Mutex::new(rx),
                }),
                topic: topic.to_owned(),
            }),
            Err(e) => {
                Box::pin(host.shutdown()).await;
                Err(OutboxError::Broker(format!(
                    "RocketMQ orderly consumer did not start: {e}"
                )))
            }
        }
    }

    /// The messages that arrived within `timeout` (possibly none).
    pub async fn poll(&self, timeout: Duration) -> Vec<ReceivedMessage> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.consumer.poll(ms).await
    }

    /// Polls until `done` says the messages so far are enough or `deadline` passes; returns
    /// everything received, in arrival order.
    pub async fn collect_until<F>(&self, deadline: Duration, mut done: F) -> Vec<ReceivedMessage>
    where
        F: FnMut(&[ReceivedMessage]) -> bool,
    {
        let end = tokio::time::Instant::now() + deadline;
        let mut all = Vec::new();
        while !done(&all) && tokio::time::Instant::now() < end {
            all.extend(self.poll(Duration::from_millis(500)).await);
        }
        all
    }

    /// Stops the consumer, then its client runtime and runtime owner.
    pub async fn shutdown(self) {
        self.consumer.shutdown().await;
    }
}
