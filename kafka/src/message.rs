//! The message each outbox event becomes (topic, key, headers, value), the topic-name rules,
//! and Kafka's rules for an event at write time ([`EVENT_LIMITS`]).
use rdkafka::message::{Header, OwnedHeaders};
use sea_orm_outbox::{EventLimits, OutboxMessage, PublishError};

/// Default largest message the producer sends, in bytes (librdkafka's `message.max.bytes`
/// default): 1,000,000. A larger one fails for good before it is sent.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_000_000;

/// Longest topic name Kafka accepts: 249 characters.
pub const MAX_TOPIC_LEN: usize = 249;

/// Kafka's rules for an event, checked at write time: a payload of at most 1,000,000 bytes
/// (the producer's default `message.max.bytes`; key and headers count too, so the publisher
/// may still refuse an event just under it). Give them to the core's `Outbox`
/// (`Outbox::new().limits(EVENT_LIMITS)`) that writes the events.
///
/// ```
/// use sea_orm_outbox::NewEvent;
/// use sea_orm_outbox_kafka::EVENT_LIMITS;
/// let big = "x".repeat(1_000_001);
/// assert!(NewEvent::raw("order-1", "OrderCreated", big).validate(&EVENT_LIMITS).is_err());
/// ```
pub const EVENT_LIMITS: EventLimits = EventLimits::new(DEFAULT_MAX_MESSAGE_BYTES);

/// Why `part` cannot be part of a topic name: empty, or a character other than ASCII letters,
/// digits, `.`, `_` and `-`, or longer than [`MAX_TOPIC_LEN`].
pub(crate) fn check_topic_part(part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err("it is empty".into());
    }
    if part.len() > MAX_TOPIC_LEN {
        return Err(format!(
            "it is {} characters long; a topic name has at most {MAX_TOPIC_LEN}",
            part.len()
        ));
    }
    if let Some(c) = part
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "it holds {c:?}; a Kafka topic name holds only ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}

/// The topic of `event` under `prefix`: `<prefix>.<event_type>`.
///
/// # Errors
/// A permanent [`PublishError`] naming the event type when the topic would not be a valid
/// Kafka topic name (a character other than letters, digits, `.`, `_`, `-`, or too long).
pub(crate) fn topic(prefix: &str, event: &OutboxMessage) -> Result<String, PublishError> {
    let topic = format!("{prefix}.{}", event.event_type);
    check_topic_part(&event.event_type)
        .and_then(|()| check_topic_part(&topic))
        .map_err(|reason| {
            PublishError::permanent(format!(
                "event type `{}` of event {} cannot be part of a Kafka topic name: {reason}",
                event.event_type, event.event_id
            ))
        })?;
    Ok(topic)
}

/// The headers of `event`'s record: every event header, then `eventId`, `eventType`, `bizNo`.
pub(crate) fn headers_of(event: &OutboxMessage) -> OwnedHeaders {
    let properties = event.properties();
    let all = event
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .chain(properties.iter().map(|(n, v)| (*n, v.as_str())));
    let mut headers = OwnedHeaders::new_with_capacity(event.headers.len() + properties.len());
    for (key, value) in all {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;
    use sea_orm_outbox::PublishErrorKind;

    #[test]
    fn topics_follow_kafkas_rules() {
        for ok in ["outbox", "svc.order", "a-b_c", "ORDER_1"] {
            check_topic_part(ok).expect(ok);
        }
        for bad in ["", "a b", "a/b", "a*", "ä", "a\tb"] {
            assert!(check_topic_part(bad).is_err(), "{bad:?}");
        }
        assert!(check_topic_part(&"x".repeat(250)).is_err());
        let m = OutboxMessage::new(7, "k", "Paid", "{}");
        assert_eq!(topic("svc.order", &m).expect("ok"), "svc.order.Paid");
        let m = OutboxMessage::new(7, "k", "order.paid", "{}");
        assert_eq!(topic("outbox", &m).expect("dots"), "outbox.order.paid");
        for bad in ["Order Created", "Order/Created", "", "Order*"] {
            let e = topic("outbox", &OutboxMessage::new(7, "k", bad, "{}")).expect_err(bad);
            assert_eq!(e.kind, PublishErrorKind::Permanent, "{bad}");
            assert!(e.message.contains(&format!("`{bad}`")), "{}", e.message);
        }
        let long = "x".repeat(245);
        assert!(topic("outbox", &OutboxMessage::new(7, "k", &long, "{}")).is_err());
    }

    #[test]
    fn headers_carry_the_event_headers_and_properties() {
        let m = OutboxMessage::new(7, "order-1", "Paid", "{}").with_header("tenant", "acme");
        let h = headers_of(&m);
        let got: Vec<(String, String)> = h
            .iter()
            .map(|h| {
                let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                (h.key.to_owned(), value.into_owned())
            })
            .collect();
        let want = [
            ("tenant", "acme"),
            ("eventId", "7"),
            ("eventType", "Paid"),
            ("bizNo", "order-1"),
        ];
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
    }
}
