//! [`ReceivedMessage`]: one message as the test consumer received it.
use super::*;

/// One message as a consumer received it, reduced to what the outbox sets (fields may be
/// added: construct it only through the consumer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The broker's message id.
    pub msg_id: String,
    /// The `eventId` user property parsed as a number (`None` when absent or not a number).
    pub event_id: Option<i64>,
    /// Message keys (the outbox's `biz_no`).
    pub keys: Option<String>,
    /// Message tag (the outbox's `event_type`).
    pub tag: Option<String>,
    /// Body as text (lossy UTF-8).
    pub body: String,
    /// Every property of the message, system ones included.
    pub properties: HashMap<String, String>,
    /// The queue the message was read from.
    pub queue_id: i32,
    /// Its offset in that queue (the broker's consume-queue index).
    pub queue_offset: i64,
    /// Its byte offset in the broker's commit log.
    pub commit_log_offset: i64,
    /// The broker the queue is on.
    pub broker_name: String,
    /// Its place in the order this consumer handed messages out (0, 1, 2, ...; a redelivered
    /// message gets a new one).
    pub received_seq: u64,
}

impl ReceivedMessage {
    /// The outbox's view of a message the client returned.
    pub(super) fn from_ext(m: &MessageExt) -> Self {
        let properties: HashMap<String, String> = m
            .properties()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        ReceivedMessage {
            msg_id: m.msg_id().as_str().to_owned(),
            event_id: properties.get("eventId").and_then(|v| v.parse().ok()),
            keys: m.get_keys().map(|k| k.as_str().to_owned()),
            tag: m.get_tags().map(|t| t.as_str().to_owned()),
            body: m
                .get_body()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
            properties,
            queue_id: m.queue_id(),
            queue_offset: m.queue_offset(),
            commit_log_offset: m.commit_log_offset(),
            broker_name: m.broker_name().to_string(),
            received_seq: 0,
        }
    }

    /// The message with [`ReceivedMessage::received_seq`] taken from `counter`.
    pub(super) fn numbered(mut self, counter: &AtomicU64) -> Self {
        self.received_seq = counter.fetch_add(1, Ordering::Relaxed);
        self
    }

    /// The user property `name`.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name).map(String::as_str)
    }
}
