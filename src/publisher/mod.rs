//! Where the relay sends events: the [`Publisher`] trait and the publishers of this crate.
mod logging;
mod memory;
mod rounds;
mod secret;

use async_trait::async_trait;

pub use logging::LoggingPublisher;
pub use memory::InMemoryPublisher;
pub use rounds::send_in_key_rounds;
pub use secret::Secret;

use crate::error::PublishError;

/// One outbox event on its way to the broker. Non-exhaustive: later versions may carry more;
/// build one with [`OutboxMessage::new`] or from a row (`OutboxMessage::try_from(&model)`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxMessage {
    /// `t_event_record.id`; the `eventId` property and the key an idempotent consumer
    /// deduplicates on (a re-send by another instance keeps it).
    pub event_id: i64,
    /// Business key: message `keys` and `bizNo` property.
    pub biz_no: String,
    /// Event type: message tag and `eventType` property.
    pub event_type: String,
    /// Message body.
    pub payload: String,
    /// Failed attempts before this one (`retry_count`).
    pub retry_count: i32,
    /// The event's headers ([`crate::NewEvent::header`]) in name order, including a recorded
    /// trace context; a publisher sends each as a message property or header of its broker.
    pub headers: Vec<(String, String)>,
    /// The relay runs in ordered mode ([`crate::WorkerConfig::ordered`]): a publisher that can
    /// keep one key's messages in order must do so (e.g. one `biz_no` to one partition).
    pub ordered: bool,
}

impl OutboxMessage {
    /// A message for event `event_id` on its first attempt (`retry_count` 0).
    pub fn new(
        event_id: i64,
        biz_no: impl Into<String>,
        event_type: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        OutboxMessage {
            event_id,
            biz_no: biz_no.into(),
            event_type: event_type.into(),
            payload: payload.into(),
            retry_count: 0,
            headers: Vec::new(),
            ordered: false,
        }
    }

    /// The message with [`OutboxMessage::ordered`] set to `ordered`.
    #[must_use]
    pub fn with_ordered(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// The message with header `name` = `value` added (no check here: the rules of
    /// [`crate::NewEvent::header`] apply when an event is written).
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The value of header `name`, if the message has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The user properties every message carries: `eventId`, `eventType`, `bizNo`.
    pub fn properties(&self) -> [(&'static str, String); 3] {
        [
            ("eventId", self.event_id.to_string()),
            ("eventType", self.event_type.clone()),
            ("bizNo", self.biz_no.clone()),
        ]
    }
}

impl TryFrom<&sea_orm_outbox_entity::event_record::Model> for OutboxMessage {
    type Error = PublishError;

    /// The message of a stored event.
    ///
    /// # Errors
    /// A permanent [`PublishError`] when the row's `headers` is not a JSON object of strings or
    /// holds a header [`crate::NewEvent::header`] refuses under the default
    /// [`crate::EventLimits`] (only a row written or edited outside the library can).
    fn try_from(m: &sea_orm_outbox_entity::event_record::Model) -> Result<Self, PublishError> {
        let headers = m.header_pairs().map_err(|e| {
            PublishError::permanent(format!(
                "t_event_record.headers of event {} is not a JSON object of strings: {e}",
                m.id
            ))
        })?;
        for (name, value) in &headers {
            crate::event::check_header(name, value, &crate::EventLimits::default())
                .map_err(|e| PublishError::permanent(format!("event {}: {e}", m.id)))?;
        }
        Ok(OutboxMessage {
            retry_count: m.retry_count,
            headers,
            ..OutboxMessage::new(m.id, &m.biz_no, &m.event_type, &m.payload)
        })
    }
}

/// Sends one message to the broker, synchronously from the relay's point of view: return only
/// once the broker accepted it (or refused it).
///
/// The relay wraps every call in the configured send timeout and treats a timeout as a
/// retryable error. Delivery is at-least-once: the same `event_id` may be published again after
/// a reclaim, so consumers must be idempotent.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publishes `message`.
    ///
    /// # Errors
    /// [`PublishError::retryable`] for failures worth retrying after back-off,
    /// [`PublishError::permanent`] for failures that can never succeed (the event goes to `FAIL`).
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError>;

    /// Publishes `messages` together, in as few broker requests as the broker allows, and
    /// returns one result per message, in the order given (a missing result counts as a
    /// retryable failure), each recorded as [`Publisher::publish`]'s would be. The relay calls
    /// it with up to `batch_size` events of one claim when [`Publisher::batches`] says so,
    /// within one send timeout for the whole call. The default sends them one after another
    /// with [`Publisher::publish`].
    ///
    /// A batch the broker refused for good because of one of its messages must not fail the
    /// others for good: send them alone, or return a retryable error for them. In ordered mode
    /// ([`OutboxMessage::ordered`]) no message of a key may be sent after a failed one of that
    /// key (return a retryable error for it, as the default does), or it would overtake the
    /// retried one at the consumer.
    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let mut results = Vec::with_capacity(messages.len());
        // Ordered mode: the keys whose message failed.
        let mut failed = std::collections::HashSet::new();
        for message in messages {
            if message.ordered && failed.contains(message.biz_no.as_str()) {
                results.push(Err(PublishError::retryable(format!(
                    "not sent: an earlier event of key {} failed in the same batch",
                    message.biz_no
                ))));
                continue;
            }
            let result = self.publish(message).await;
            if message.ordered && result.is_err() {
                failed.insert(message.biz_no.as_str());
            }
            results.push(result);
        }
        results
    }

    /// Whether [`Publisher::publish_batch`] carries several messages per broker request. Only
    /// then does the relay hand it a claim's events in one call; otherwise it calls
    /// [`Publisher::publish`] once per event, `send_concurrency` at a time. `false` unless the
    /// publisher overrides it. A publisher that wraps another must forward both this and
    /// [`Publisher::publish_batch`], or the relay stops batching through it.
    fn batches(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod default_batch_tests {
    use super::*;
    use std::sync::Mutex;

    /// Fails event 2 (retryably) and records what was published.
    #[derive(Default)]
    struct FailsTwo(Mutex<Vec<i64>>);

    #[async_trait]
    impl Publisher for FailsTwo {
        async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(m.event_id);
            if m.event_id == 2 {
                Err(PublishError::retryable("scripted"))
            } else {
                Ok(())
            }
        }
    }

    /// The default `publish_batch` sends nothing more of a key after an ordered message of the
    /// key failed, as the trait's rule says.
    #[tokio::test]
    async fn the_default_batch_stops_an_ordered_key_at_its_first_failure() {
        let p = FailsTwo::default();
        let msgs: Vec<OutboxMessage> = [(1, "A"), (2, "A"), (3, "B"), (4, "A")]
            .into_iter()
            .map(|(id, key)| OutboxMessage::new(id, key, "E", "{}").with_ordered(true))
            .collect();
        let results = p.publish_batch(&msgs).await;
        let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [true, false, true, false]);
        assert_eq!(
            *p.0.lock().unwrap_or_else(|e| e.into_inner()),
            [1, 2, 3],
            "event 4 of A not sent"
        );
        // Unordered messages all go.
        let p = FailsTwo::default();
        let msgs: Vec<OutboxMessage> = [(1, "A"), (2, "A"), (4, "A")]
            .into_iter()
            .map(|(id, key)| OutboxMessage::new(id, key, "E", "{}"))
            .collect();
        p.publish_batch(&msgs).await;
        assert_eq!(*p.0.lock().unwrap_or_else(|e| e.into_inner()), [1, 2, 4]);
    }
}
