//! RocketMQ's rules for an event, checked at write time: [`EVENT_LIMITS`] for the core's
//! `Outbox::limits`, and the same reserved names checked
//! again when a message is built (a row written or edited outside the library).
use sea_orm_outbox::EventLimits;

/// Default largest message body, in bytes: 4 MiB, the broker's default `maxMessageSize` and
/// the client's default (`DefaultMQProducer::max_message_size`).
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 4 * 1024 * 1024;

/// Largest size of an event's headers together under RocketMQ: 16 KiB (16,384 bytes of their
/// JSON form).
///
/// RocketMQ stores a message's properties (the broker's own and the user's) in at most
/// 32,767 bytes (`MAX_PROPERTIES_SIZE`, rocketmq-rust 1.0 broker and Apache RocketMQ alike);
/// half of that is left to the broker's and the outbox's own properties.
pub const MAX_PROPERTIES_BYTES: usize = 16 * 1024;

/// Every system property name of RocketMQ (`MessageConst` of rocketmq-rust 1.0, `rocketmq-model`
/// `common/message.rs`, the same names as Apache RocketMQ's Java client): an event may not use
/// them as header names. A reserved name set as a header would change how the broker treats
/// the message (delay, transaction, keys). The outbox's own properties (`eventId`, `eventType`,
/// `bizNo`) are refused by the core whatever the publisher.
pub const RESERVED_PROPERTY_NAMES: &[&str] = &[
    "TRACE_ON",
    "MSG_REGION",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "ORIGIN_GROUP",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_ORIGINAL_DELIVER_MS",
    "TIMER_DELIVERY_TOKEN",
    "TIMER_ID",
    "TIMER_OWNER_EPOCH",
    "TIMER_LANE",
    "TIMER_GENERATION",
    "E_T",
    "TIMER_FORMAT_VERSION",
    "TIMER_POLICY_FINGERPRINT",
    "TIMER_DELAY_LEVEL",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "_SYS_MSG_PRIORITY_",
    "TRACE_CONTEXT",
    "TRANSACTION_CHECK_TIMES",
    "TRANS_OFFSET",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "INNER_BASE",
    "INNER_NUM",
    "INNER_MULTI_DISPATCH",
    "PROPERTY_FORWARD_QUEUE_ID",
    "REDIRECT",
    "TIMER_ROLL_LABEL",
];

/// Prefixes of RocketMQ's internal property names (e.g. `__RMQ.TRANSIENT.`): header names
/// starting with one are refused.
pub const RESERVED_PROPERTY_PREFIXES: &[&str] = &["__"];

/// RocketMQ's rules for an event with the default message size: the payload at most
/// [`DEFAULT_MAX_MESSAGE_BYTES`] (4 MiB, the broker's default `maxMessageSize`), the headers at
/// most [`MAX_PROPERTIES_BYTES`], no header named as one of [`RESERVED_PROPERTY_NAMES`] or
/// starting with one of [`RESERVED_PROPERTY_PREFIXES`]. With another message size, use
/// [`RocketMqConfig::event_limits`](crate::RocketMqConfig::event_limits).
///
/// ```
/// use sea_orm_outbox::NewEvent;
/// use sea_orm_outbox_rocketmq::EVENT_LIMITS;
/// let event = NewEvent::raw("ORD-1", "ORDER_CREATED", "{}").header("DELAY", "3");
/// assert!(event.validate(&EVENT_LIMITS).is_err());
/// ```
pub const EVENT_LIMITS: EventLimits = limits_for(DEFAULT_MAX_MESSAGE_BYTES as usize);

/// RocketMQ's rules for an event with messages of at most `max_message_bytes`.
pub(crate) const fn limits_for(max_message_bytes: usize) -> EventLimits {
    EventLimits::new(max_message_bytes)
        .with_max_headers_bytes(MAX_PROPERTIES_BYTES)
        .with_reserved_header_names(RESERVED_PROPERTY_NAMES)
        .with_reserved_header_prefixes(RESERVED_PROPERTY_PREFIXES)
}

/// Whether `name` is a property name RocketMQ keeps for itself.
pub(crate) fn is_reserved(name: &str) -> bool {
    EVENT_LIMITS.is_reserved(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::{EventError, NewEvent};

    #[test]
    fn refuses_rocketmq_property_names_at_write_time() {
        for name in [
            "__RMQ.TRANSIENT.x",
            "KEYS",
            "UNIQ_KEY",
            "DELAY",
            "TAGS",
            "eventId",
        ] {
            let event = NewEvent::raw("A", "T", "{}").header(name, "v");
            assert!(
                matches!(
                    event.validate(&EVENT_LIMITS),
                    Err(EventError::InvalidHeader { .. })
                ),
                "{name}"
            );
            assert!(is_reserved(name), "{name}");
        }
        assert!(!is_reserved("tenant"));
        assert_eq!(EVENT_LIMITS.max_payload_bytes, 4 * 1024 * 1024);
        assert_eq!(EVENT_LIMITS.max_headers_bytes, MAX_PROPERTIES_BYTES);
    }
}
