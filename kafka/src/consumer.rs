//! [`KafkaConsumer`], a small consumer for tests, examples and demos that read back what the
//! relay sent, and the [`ReceivedMessage`]s it returns.
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sea_orm_outbox::OutboxError;

use crate::client::{check_metadata, Ctx, HasClient};
use crate::config::KafkaConfig;

/// Most messages one [`KafkaConsumer::poll`] returns.
const POLL_MAX: usize = 1_000;

/// One message as [`KafkaConsumer`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The topic it was sent to (`<topic_prefix>.<event_type>`).
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The record's key (the event's `biz_no`), as UTF-8 (lossy).
    pub key: Option<String>,
    /// The `eventId` header, parsed (`None` when missing or not a number).
    pub event_id: Option<i64>,
    /// The `eventType` header.
    pub event_type: Option<String>,
    /// The `bizNo` header.
    pub biz_no: Option<String>,
    /// Every header (name, value as UTF-8, lossy), the ones above included, in record order.
    pub headers: Vec<(String, String)>,
    /// The value, as UTF-8 (lossy).
    pub payload: String,
}

impl ReceivedMessage {
    /// The first value of header `name`, if the message has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn of(m: &BorrowedMessage<'_>) -> Self {
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
        let headers: Vec<(String, String)> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), text(h.value).unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        let first = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        ReceivedMessage {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            key: text(m.key()),
            event_id: first("eventId").and_then(|v| v.parse().ok()),
            event_type: first("eventType"),
            biz_no: first("bizNo"),
            payload: text(m.payload()).unwrap_or_default(),
            headers,
        }
    }
}

/// The consumer and its context, shareable with a blocking thread.
struct Holder(StreamConsumer<Ctx>, Ctx);

impl HasClient for Holder {
    fn fetch_metadata(&self, topic: Option<&str>, wait: Duration) -> KafkaResult<Metadata> {
        self.0.fetch_metadata(topic, wait)
    }
    fn ctx(&self) -> &Ctx {
        &self.1
    }
}

/// A small consumer for tests and demos: it creates the topics `<topic_prefix>.<event_type>`
/// of the event types it is given unless they exist, and reads every partition of them from
/// the first record (assigned partitions, no consumer group rebalancing, no commits).
///
/// Meant for an application's own tests: publish through the relay, then read the records
/// back and check them (the `eventId` header, the headers, the order of a key). Not a
/// production consumer: it keeps no position and has no retry or dead-letter handling.
///
/// ```no_run
/// # async fn demo() -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::time::Duration;
/// use sea_orm_outbox_kafka::{KafkaConfig, KafkaConsumer};
///
/// let config = KafkaConfig::new("127.0.0.1:9092").topic_prefix("order");
/// let mut consumer = KafkaConsumer::start(&config, &["OrderCreated", "OrderPaid"], 3).await?;
/// let got = consumer.poll(Duration::from_secs(5)).await;
/// assert!(got.iter().all(|m| m.event_id.is_some()));
/// consumer.delete_topics().await?;
/// # Ok(()) }
/// ```
pub struct KafkaConsumer {
    config: KafkaConfig,
    consumer: Arc<Holder>,
    topics: Vec<String>,
}

impl std::fmt::Debug for KafkaConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConsumer")
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

impl KafkaConsumer {
    /// Connects to the brokers of `config` (with its login and TLS), creates the topic
    /// `<topic_prefix>.<T>` of each event type `T` of `event_types` with `partitions`
    /// partitions (replication factor 1) unless it exists, and starts reading every partition
    /// of them from the first record.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`KafkaConfig::validate`], or a refused login; [`OutboxError::Broker`] when no broker
    /// answers, or a topic cannot be created or read.
    pub async fn start(
        config: &KafkaConfig,
        event_types: &[&str],
        partitions: i32,
    ) -> Result<Self, OutboxError> {
        config.validate()?;
        let broker = |what: String| OutboxError::Broker(format!("Kafka consumer: {what}"));
        let topics: Vec<String> = event_types.iter().map(|t| config.topic_of(t)).collect();
        let admin: AdminClient<Ctx> = config
            .client_config("sea-orm-outbox-consumer-admin")
            .create_with_context(Ctx::default())
            .map_err(|e| broker(format!("cannot create the admin client: {e}")))?;
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(config.connect_timeout));
        let created = admin
            .create_topics(&new, &options)
            .await
            .map_err(|e| broker(format!("cannot create the topics: {e}")))?;
        for result in created {
            if let Err((topic, code)) = result {
                if code != RDKafkaErrorCode::TopicAlreadyExists {
                    return Err(broker(format!("cannot create topic `{topic}`: {code}")));
                }
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let group = format!("sea-orm-outbox-test-{}-{nanos}", std::process::id());
        let ctx = Ctx::default();
        let consumer: StreamConsumer<Ctx> = config
            .client_config("sea-orm-outbox-consumer")
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create_with_context(ctx.clone())
            .map_err(|e| broker(format!("cannot create the consumer: {e}")))?;
        let consumer = Arc::new(Holder(consumer, ctx));
        let mut assignment = TopicPartitionList::new();
        for topic in &topics {
            let metadata = check_metadata(consumer.clone(), config, Some(topic.clone())).await?;
            let count = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .map_or(0, |t| t.partitions().len());
            if count == 0 {
                return Err(broker(format!("topic `{topic}` has no partitions")));
            }
            for p in 0..i32::try_from(count).unwrap_or(i32::MAX) {
                assignment
                    .add_partition_offset(topic, p, Offset::Beginning)
                    .map_err(|e| broker(format!("cannot assign `{topic}` {p}: {e}")))?;
            }
        }
        consumer
            .0
            .assign(&assignment)
            .map_err(|e| broker(format!("cannot assign the partitions: {e}")))?;
        Ok(KafkaConsumer {
            config: config.clone(),
            consumer,
            topics,
        })
    }

    /// The topics it reads.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    /// The records that arrived since the last call, each partition's in offset order (the
    /// partitions interleave), waiting at most `wait` for the first one; empty when none came. At most 1,000 per call;
    /// errors of the consumer are logged and skipped.
    pub async fn poll(&mut self, wait: Duration) -> Vec<ReceivedMessage> {
        let mut out = Vec::new();
        let end = tokio::time::Instant::now() + wait;
        while out.len() < POLL_MAX {
            // After the first record, take only what is already there.
            let until = if out.is_empty() {
                end
            } else {
                tokio::time::Instant::now() + Duration::from_millis(20)
            };
            match tokio::time::timeout_at(until, self.consumer.0.recv()).await {
                Ok(Ok(m)) => out.push(ReceivedMessage::of(&m)),
                Ok(Err(e)) => tracing::warn!(error = %e, "Kafka consumer error"),
                Err(_) => break,
            }
        }
        out
    }

    /// Deletes the topics it reads, with their records, and drops the consumer.
    ///
    /// # Errors
    /// [`OutboxError::Broker`] when the brokers do not delete them.
    pub async fn delete_topics(self) -> Result<(), OutboxError> {
        // The consumer goes first: a client that still reads a deleted topic asks for its
        // metadata by topic id, and Tansu 0.6.0 answers with neither name nor id, on which
        // librdkafka 2.12.1 crashes.
        let KafkaConsumer {
            config,
            consumer,
            topics,
        } = self;
        drop(consumer);
        let admin: AdminClient<Ctx> = config
            .client_config("sea-orm-outbox-consumer-admin")
            .create_with_context(Ctx::default())
            .map_err(|e| OutboxError::Broker(format!("Kafka admin client: {e}")))?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let options = AdminOptions::new().operation_timeout(Some(config.connect_timeout));
        let results = admin
            .delete_topics(&names, &options)
            .await
            .map_err(|e| OutboxError::Broker(format!("Kafka: cannot delete the topics: {e}")))?;
        for result in results {
            if let Err((topic, code)) = result {
                return Err(OutboxError::Broker(format!(
                    "Kafka: cannot delete topic `{topic}`: {code}"
                )));
            }
        }
        Ok(())
    }
}
