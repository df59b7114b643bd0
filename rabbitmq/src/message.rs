//! The AMQP message an outbox event becomes, and the checks that refuse it before sending.
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use sea_orm_outbox::{OutboxMessage, PublishError};

use crate::config::RabbitMqConfig;
use crate::errors;

/// AMQP's `delivery_mode` of a persistent message: the server writes it to disk in a durable
/// queue.
pub(crate) const PERSISTENT: u8 = 2;

/// What [`basic_publish`](lapin::Channel::basic_publish) gets for one event besides the
/// exchange and the body.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// `<routing_prefix><event_type>`.
    pub(crate) routing_key: ShortString,
    /// Persistent, with the event's id, type and headers.
    pub(crate) properties: BasicProperties,
}

/// The message of `m` under `config`: routing key `<routing_prefix><event_type>`, persistent
/// (`delivery_mode` 2), `message_id` = the event id, `type` = the event type, `app_id` and
/// `content_type` from the configuration, and headers = every event header plus `eventId`,
/// `eventType`, `bizNo` (strings).
///
/// # Errors
/// A permanent [`PublishError`] when the body is larger than `max_message_bytes`, the routing
/// key is longer than 255 bytes, or a header name or the event type is (the server could never
/// take the message).
pub(crate) fn outgoing(
    config: &RabbitMqConfig,
    m: &OutboxMessage,
) -> Result<Outgoing, PublishError> {
    if m.payload.len() > config.max_message_bytes {
        return Err(errors::oversized(m.payload.len(), config.max_message_bytes));
    }
    let key = config.routing_key(&m.event_type);
    let routing_key =
        ShortString::try_new(key.clone()).map_err(|_| errors::routing_key_too_long(&key))?;
    let too_long = |what: &str, value: &str| {
        PublishError::permanent(format!(
            "{what} `{value}` of event {} has {} bytes, more than the 255 AMQP allows",
            m.event_id,
            value.len()
        ))
    };
    let kind = ShortString::try_new(m.event_type.clone())
        .map_err(|_| too_long("event type", &m.event_type))?;
    let mut headers = FieldTable::default();
    let own = m.properties();
    let all = m
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .chain(own.iter().map(|(n, v)| (*n, v.as_str())));
    for (name, value) in all {
        let name = ShortString::try_new(name).map_err(|_| too_long("header name", name))?;
        headers.insert(name, AMQPValue::LongString(LongString::from(value)));
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_message_id(m.event_id.to_string().into())
        .with_type(kind)
        .with_headers(headers);
    // Both checked (at most 255 bytes) by `RabbitMqConfig::validate`.
    if let Some(app_id) = config.app_id.as_deref() {
        properties = properties.with_app_id(app_id.into());
    }
    if let Some(content_type) = config.content_type.as_deref() {
        properties = properties.with_content_type(content_type.into());
    }
    Ok(Outgoing {
        routing_key,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::PublishErrorKind;

    fn header<'a>(p: &'a BasicProperties, name: &str) -> Option<&'a AMQPValue> {
        p.headers().as_ref().and_then(|h| h.inner().get(name))
    }

    #[test]
    fn an_event_becomes_a_persistent_message() {
        let config = RabbitMqConfig::default()
            .routing_prefix("orders.")
            .app_id("order-service");
        let m = OutboxMessage::new(42, "order-42", "OrderPaid", "{}").with_header("tenant", "acme");
        let out = outgoing(&config, &m).expect("fits");
        assert_eq!(out.routing_key.as_str(), "orders.OrderPaid");
        let p = &out.properties;
        assert_eq!(*p.delivery_mode(), Some(PERSISTENT));
        assert_eq!(p.message_id().as_ref().map(ShortString::as_str), Some("42"));
        assert_eq!(
            p.kind().as_ref().map(ShortString::as_str),
            Some("OrderPaid")
        );
        assert_eq!(
            p.app_id().as_ref().map(ShortString::as_str),
            Some("order-service")
        );
        assert_eq!(
            p.content_type().as_ref().map(ShortString::as_str),
            Some("application/json")
        );
        for (name, value) in [
            ("tenant", "acme"),
            ("eventId", "42"),
            ("eventType", "OrderPaid"),
            ("bizNo", "order-42"),
        ] {
            assert_eq!(
                header(p, name),
                Some(&AMQPValue::LongString(value.into())),
                "{name}"
            );
        }
    }

    #[test]
    fn what_the_server_could_never_take_is_permanent() {
        let config = RabbitMqConfig::default().max_message_bytes(10);
        let big = OutboxMessage::new(1, "k", "E", "x".repeat(11));
        let e = outgoing(&config, &big).expect_err("too large");
        assert_eq!(e.kind, PublishErrorKind::Permanent);
        assert!(
            e.message.contains("OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES"),
            "{}",
            e.message
        );
        assert!(outgoing(&config, &OutboxMessage::new(1, "k", "E", "x".repeat(10))).is_ok());
        let long_type = OutboxMessage::new(1, "k", "E".repeat(256), "{}");
        let e = outgoing(&RabbitMqConfig::default(), &long_type).expect_err("routing key");
        assert_eq!(e.kind, PublishErrorKind::Permanent);
        let long_header = OutboxMessage::new(1, "k", "E", "{}").with_header("h".repeat(256), "v");
        let e = outgoing(&RabbitMqConfig::default(), &long_header).expect_err("header name");
        assert_eq!(e.kind, PublishErrorKind::Permanent);
    }
}
