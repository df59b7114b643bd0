//! [`KafkaPublisher`]: the [`Publisher`] that sends each event as one Kafka record through an
//! idempotent producer and waits for the brokers' ack of every one.
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use sea_orm_outbox::{OutboxError, OutboxMessage, PublishError, Publisher};
use tokio::time::{timeout_at, Instant};

use crate::client::{check_metadata, Ctx, HasClient};
use crate::config::{millis, KafkaConfig};
use crate::errors::classify;
use crate::message::{headers_of, topic};

/// How long librdkafka waits for a topic it does not know to appear before it fails the
/// topic's records as unknown (`topic.metadata.propagation.max.ms`): 1 s, so that a missing
/// topic shows as a configuration error rather than a send timeout.
const UNKNOWN_TOPIC_WAIT: Duration = Duration::from_secs(1);

/// Relays outbox events to Kafka through an idempotent producer, each one acknowledged by
/// every in-sync replica.
///
/// An event of type `T` goes to topic `<topic_prefix>.T` with key = `biz_no` (so one key's
/// events stay on one partition), value = payload and headers = the event's headers,
/// `eventId`, `eventType`, `bizNo`. The producer is idempotent (`enable.idempotence=true`,
/// hence `acks=all`): its own retries neither duplicate nor reorder records. Only the brokers'
/// ack counts as delivered.
///
/// A batch's records are all enqueued, then their deliveries awaited: one result per event. In
/// ordered mode ([`OutboxMessage::ordered`]) a key's next event of the batch is enqueued only
/// after the delivery of its previous one; after a failure the key's later events are not sent
/// (retryable).
///
/// An idempotent producer that fails fatally (fenced, or its producer id or sequence numbers
/// out of step with the broker's) refuses every later record: the publisher then replaces it
/// with a new one, and the failed sends are retryable, unless the fatal error is a login that
/// may not write or brokers without an idempotent producer (configuration errors).
///
/// Publishes take `&self`: wrap the publisher in an `Arc` and hand it to every worker. Call
/// [`KafkaPublisher::shutdown`] at the end, after the workers have stopped.
pub struct KafkaPublisher {
    config: KafkaConfig,
    /// The producer in use; replaced when it fails fatally (see [`KafkaPublisher::reset`]).
    producer: RwLock<Arc<Holder>>,
}

/// The producer and its context, shareable with a blocking thread.
struct Holder(FutureProducer<Ctx>, Ctx);

impl Holder {
    /// A new idempotent producer for `config`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when librdkafka refuses the settings.
    fn create(config: &KafkaConfig) -> Result<Holder, OutboxError> {
        let mut client = config.client_config("sea-orm-outbox-publisher");
        client
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // The Java client's partitioner: a key lands on the partition Java producers pick.
            .set("partitioner", "murmur2_random")
            .set("message.timeout.ms", millis(config.send_timeout))
            .set(
                "topic.metadata.propagation.max.ms",
                millis(UNKNOWN_TOPIC_WAIT),
            );
        let ctx = Ctx::default();
        let producer: FutureProducer<Ctx> =
            client.create_with_context(ctx.clone()).map_err(|e| {
                OutboxError::InvalidConfig(format!("the Kafka producer cannot be created: {e}"))
            })?;
        Ok(Holder(producer, ctx))
    }
}

impl HasClient for Holder {
    fn fetch_metadata(&self, topic: Option<&str>, wait: Duration) -> KafkaResult<Metadata> {
        self.0.client().fetch_metadata(topic, wait)
    }
    fn ctx(&self) -> &Ctx {
        &self.1
    }
}

impl std::fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl KafkaPublisher {
    /// Validates `config`, creates the idempotent producer and requests the cluster's metadata
    /// (which proves that a broker answers and accepts the login). The client then reconnects
    /// by itself whenever a connection breaks; publishes meanwhile fail retryably within the
    /// send timeout.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails [`KafkaConfig::validate`]
    /// or that librdkafka refuses (e.g. a CA file it cannot read), or a login the brokers
    /// refuse (the message names `KAFKA_PASSWORD`, never its value); [`OutboxError::Broker`]
    /// when no broker answers within [`KafkaConfig::connect_timeout`].
    pub async fn start(config: KafkaConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        let producer = Arc::new(Holder::create(&config)?);
        let metadata = check_metadata(producer.clone(), &config, None).await?;
        tracing::info!(brokers = %config.brokers, topics = %format!("{}.<event type>", config.topic_prefix),
            cluster_brokers = metadata.brokers().len(), "Kafka publisher started (idempotent producer, acks=all)");
        Ok(KafkaPublisher {
            config,
            producer: RwLock::new(producer),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// Waits up to the send timeout for records still in flight, then drops the producer.
    pub async fn shutdown(self) {
        let producer = self.current();
        let wait = self.config.send_timeout;
        let flushed = tokio::task::spawn_blocking(move || producer.0.flush(wait)).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "Kafka producer did not flush every record");
        }
        tracing::info!("Kafka publisher stopped");
    }

    /// Enqueues `messages` (all at once, then awaits their deliveries) by `deadline`; one
    /// result per message, in order.
    async fn send_all(
        &self,
        messages: &[&OutboxMessage],
        deadline: Instant,
    ) -> Vec<Result<(), PublishError>> {
        let producer = self.current();
        let pending: Vec<Result<DeliveryFuture, Failure>> = messages
            .iter()
            .map(|m| self.enqueue(&producer, m))
            .collect();
        let mut outcomes: Vec<Result<(), Failure>> = Vec::with_capacity(messages.len());
        for p in pending {
            outcomes.push(match p {
                Ok(delivery) => match timeout_at(deadline, delivery).await {
                    Ok(Ok(Ok(_delivery))) => Ok(()),
                    Ok(Ok(Err((e, _message)))) => Err(Failure::Kafka(e)),
                    Ok(Err(_canceled)) => Err(Failure::Other(PublishError::retryable(
                        "the Kafka producer closed before the record's delivery report",
                    ))),
                    Err(_) => Err(Failure::Other(timed_out(&self.config))),
                },
                Err(e) => Err(e),
            });
        }
        let cause = producer.0.client().fatal_error();
        let fatal = outcomes
            .iter()
            .any(|o| matches!(o, Err(Failure::Kafka(e)) if is_fatal(e)));
        if fatal || cause.is_some() {
            self.reset(producer);
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.map_err(|f| match (f, &cause) {
                    (Failure::Kafka(e), Some((code, reason)))
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) =>
                    {
                        fatal_outcome(*code, reason)
                    }
                    (Failure::Kafka(e), _) => classify(&e),
                    (Failure::Other(e), _) => e,
                })
            })
            .collect()
    }

    /// The producer in use.
    fn current(&self) -> Arc<Holder> {
        self.producer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces `failed` (unless another call did already) with a new producer, which gets a
    /// new producer id. An idempotent producer that failed fatally (fenced, or its sequence
    /// numbers out of step with the broker's) refuses every later record; only a new one
    /// sends again.
    fn reset(&self, failed: Arc<Holder>) {
        let fresh = match Holder::create(&self.config) {
            Ok(fresh) => Arc::new(fresh),
            Err(e) => {
                tracing::warn!(error = %e, "cannot replace the failed Kafka producer");
                return;
            }
        };
        let old = {
            let mut current = self.producer.write().unwrap_or_else(|p| p.into_inner());
            if !Arc::ptr_eq(&current, &failed) {
                return;
            }
            std::mem::replace(&mut *current, fresh)
        };
        let reason = old
            .0
            .client()
            .fatal_error()
            .map(|(code, text)| format!("{code:?}: {text}"));
        tracing::warn!(
            reason = reason.as_deref().unwrap_or("a fatal produce error"),
            "Kafka producer failed fatally; a new producer (a new producer id) replaces it"
        );
        // Dropping a producer waits for its queue and its threads: not on this thread. The
        // caller's reference goes too, so that this is the last one unless other sends hold it.
        tokio::task::spawn_blocking(move || drop((old, failed)));
    }

    /// Hands `m` to the producer (without waiting for its delivery).
    fn enqueue(&self, producer: &Holder, m: &OutboxMessage) -> Result<DeliveryFuture, Failure> {
        let topic = topic(&self.config.topic_prefix, m).map_err(Failure::Other)?;
        let record = FutureRecord::to(&topic)
            .key(m.biz_no.as_bytes())
            .payload(m.payload.as_bytes())
            .headers(headers_of(m));
        producer
            .0
            .send_result(record)
            .map_err(|(e, _record)| Failure::Kafka(e))
    }
}

/// Whether `e` leaves the idempotent producer unable to send: fenced, fatal, or its producer
/// id or sequence numbers out of step with the broker's.
fn is_fatal(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::UnknownProducerId
                | RDKafkaErrorCode::OutOfOrderSequenceNumber
        )
    )
}

/// Why one record was not delivered: the client's error (classified once the producer's fatal
/// error, if any, is known) or an outcome already decided.
enum Failure {
    Kafka(KafkaError),
    Other(PublishError),
}

/// The outcome of a record that a producer refused because it failed fatally with `code`: a
/// login that may not write (no `IdempotentWrite` on the cluster, no `Write` on the topic) or
/// brokers without an idempotent producer are configuration errors, since a new producer fails
/// the same way; any other cause is retryable (the new producer sends the record).
fn fatal_outcome(code: RDKafkaErrorCode, reason: &str) -> PublishError {
    match code {
        RDKafkaErrorCode::ClusterAuthorizationFailed
        | RDKafkaErrorCode::TopicAuthorizationFailed => PublishError::configuration(format!(
            "the Kafka login may not write: grant Write on the topics and IdempotentWrite on \
             the cluster (the producer failed fatally: {reason})"
        )),
        RDKafkaErrorCode::UnsupportedFeature => PublishError::configuration(format!(
            "the Kafka brokers do not support the idempotent producer (Kafka 0.11 or later \
             needed; the producer failed fatally: {reason})"
        )),
        _ => PublishError::retryable(format!(
            "the Kafka producer failed fatally ({code:?}: {reason}); a new producer replaces it"
        )),
    }
}

/// The error of a record whose delivery report did not come within the send timeout.
fn timed_out(config: &KafkaConfig) -> PublishError {
    PublishError::retryable(format!(
        "Kafka produce timed out: no ack within {:?} (send timeout)",
        config.send_timeout
    ))
}

#[async_trait]
impl Publisher for KafkaPublisher {
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

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::PublishErrorKind as Kind;

    #[test]
    fn a_fatal_error_is_classified_by_its_cause() {
        for code in [
            RDKafkaErrorCode::ClusterAuthorizationFailed,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::UnsupportedFeature,
        ] {
            assert_eq!(
                fatal_outcome(code, "x").kind,
                Kind::Configuration,
                "{code:?}"
            );
        }
        let fenced = fatal_outcome(RDKafkaErrorCode::Fenced, "Producer fenced");
        assert_eq!(fenced.kind, Kind::Retryable);
        assert!(
            fenced.message.contains("Producer fenced"),
            "{}",
            fenced.message
        );
    }
}
