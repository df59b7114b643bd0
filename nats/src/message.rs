//! The message each outbox event becomes (subject, headers, `Nats-Msg-Id`, body), the subject
//! rules, and NATS's rules for an event at write time ([`EVENT_LIMITS`]).
use std::str::FromStr;

use async_nats::jetstream::message::PublishMessage as Publish;
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use sea_orm_outbox::{EventLimits, OutboxMessage, PublishError};

/// The server's default largest message (`max_payload`, payload and headers together): 1 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Prefixes of header names NATS keeps for itself (`Nats-Msg-Id`, `Nats-Expected-*`,
/// `Nats-Rollup`, ...: JetStream acts on them). An event header may not start with one.
pub const RESERVED_HEADER_PREFIXES: &[&str] = &["Nats-"];

/// NATS's rules for an event, checked at write time: a payload of at most 1 MiB (the server's
/// default `max_payload`; the headers count too, so the publisher may still refuse an event
/// just under it) and no header named `Nats-*`. Give them to the core's `Outbox`
/// (`Outbox::new().limits(EVENT_LIMITS)`) that writes the events.
///
/// ```
/// use sea_orm_outbox::NewEvent;
/// use sea_orm_outbox_nats::EVENT_LIMITS;
/// let event = NewEvent::raw("order-1", "OrderCreated", "{}").header("Nats-Rollup", "all");
/// assert!(event.validate(&EVENT_LIMITS).is_err());
/// ```
pub const EVENT_LIMITS: EventLimits = EventLimits::new(DEFAULT_MAX_PAYLOAD_BYTES)
    .with_reserved_header_prefixes(RESERVED_HEADER_PREFIXES);

/// Why `subject` is not a valid subject to publish to: empty, an empty token (`a..b`, a
/// leading or trailing `.`), a wildcard (`*`, `>`), whitespace or a control character.
pub(crate) fn check_subject(subject: &str) -> Result<(), String> {
    if subject.is_empty() {
        return Err("it is empty".into());
    }
    for token in subject.split('.') {
        check_token(token)?;
    }
    Ok(())
}

/// Why `token` is not one valid subject token (see [`check_subject`]; `.` is not allowed).
pub(crate) fn check_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("it has an empty subject token (`..`, or a leading or trailing `.`)".into());
    }
    if let Some(c) = token
        .chars()
        .find(|&c| matches!(c, '.' | '*' | '>') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "it holds {c:?}; a subject token may not hold `.`, `*`, `>`, spaces or control \
             characters"
        ));
    }
    Ok(())
}

/// The subject of `event` under `prefix`: `<prefix>.<event_type>`. A dotted event type
/// (`order.created`) gives a subject of several tokens, which `<prefix>.>` still captures.
///
/// # Errors
/// A permanent [`PublishError`] naming the event type when it is not a valid subject: empty
/// tokens (`..`, a leading or trailing `.`), wildcards, whitespace or control characters.
pub(crate) fn subject(prefix: &str, event: &OutboxMessage) -> Result<String, PublishError> {
    check_subject(&event.event_type).map_err(|reason| {
        PublishError::permanent(format!(
            "event type `{}` of event {} cannot be part of a NATS subject: {reason}",
            event.event_type, event.event_id
        ))
    })?;
    Ok(format!("{prefix}.{}", event.event_type))
}

/// The JetStream message of `event`: body = payload; headers = every event header, then
/// `eventId`, `eventType`, `bizNo`, and `Nats-Msg-Id` = `msg_id_prefix` + event id.
///
/// # Errors
/// A permanent [`PublishError`] when a header name is reserved ([`RESERVED_HEADER_PREFIXES`])
/// or NATS cannot carry a header's name or value.
pub(crate) fn publish_of(
    event: &OutboxMessage,
    msg_id_prefix: &str,
) -> Result<Publish, PublishError> {
    let mut headers = HeaderMap::new();
    let refuse = |name: &str, reason: String| {
        PublishError::permanent(format!(
            "header `{name}` of event {} cannot be sent to NATS: {reason}",
            event.event_id
        ))
    };
    let properties = event.properties();
    let all = event
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str(), true))
        .chain(properties.iter().map(|(n, v)| (*n, v.as_str(), false)));
    for (name, value, from_event) in all {
        if from_event && RESERVED_HEADER_PREFIXES.iter().any(|p| name.starts_with(p)) {
            return Err(refuse(
                name,
                "names starting with `Nats-` are NATS's own".into(),
            ));
        }
        let header_name = HeaderName::from_str(name).map_err(|e| refuse(name, e.to_string()))?;
        let header_value = HeaderValue::from_str(value).map_err(|e| refuse(name, e.to_string()))?;
        headers.insert(header_name, header_value);
    }
    Ok(Publish::build()
        .payload(Bytes::from(event.payload.clone()))
        .headers(headers)
        .message_id(format!("{msg_id_prefix}{}", event.event_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::{NewEvent, PublishErrorKind};

    #[test]
    fn subjects_and_tokens() {
        for ok in ["outbox", "svc.order", "a-b_c", "ORDER_1"] {
            check_subject(ok).expect(ok);
        }
        for bad in ["", "a..b", ".a", "a.", "a.*", "a.>", "a b", "a\tb"] {
            assert!(check_subject(bad).is_err(), "{bad:?}");
        }
        check_token("OrderCreated").expect("token");
        assert!(check_token("Order.Created").is_err());
        let e = subject("outbox", &OutboxMessage::new(7, "k", "Order Created", "{}"))
            .expect_err("space");
        assert_eq!(e.kind, PublishErrorKind::Permanent);
        assert!(e.message.contains("`Order Created`"), "{}", e.message);
        assert_eq!(
            subject("svc.order", &OutboxMessage::new(7, "k", "Paid", "{}")).expect("ok"),
            "svc.order.Paid"
        );
        assert_eq!(
            subject("outbox", &OutboxMessage::new(7, "k", "order.created", "{}")).expect("dots"),
            "outbox.order.created"
        );
        for bad in ["order..created", ".created", "order.", "order.*", "order.>"] {
            let e = subject("outbox", &OutboxMessage::new(7, "k", bad, "{}")).expect_err(bad);
            assert_eq!(e.kind, PublishErrorKind::Permanent, "{bad}");
        }
    }

    #[test]
    fn reserved_headers_are_refused() {
        let m = OutboxMessage::new(7, "k", "T", "{}").with_header("Nats-Rollup", "all");
        let e = publish_of(&m, "").expect_err("reserved");
        assert_eq!(e.kind, PublishErrorKind::Permanent);
        assert!(e.message.contains("Nats-Rollup"), "{}", e.message);
        let event = NewEvent::raw("k", "T", "{}").header("Nats-Msg-Id", "1");
        assert!(event.validate(&EVENT_LIMITS).is_err());
        assert!(NewEvent::raw("k", "T", "{}")
            .header("tenant", "acme")
            .validate(&EVENT_LIMITS)
            .is_ok());
    }

    #[test]
    fn builds_headers_and_id() {
        let m = OutboxMessage::new(7, "order-1", "Paid", "{}").with_header("tenant", "acme");
        let p = publish_of(&m, "svc-").expect("message");
        let text = format!("{p:?}");
        for part in [
            "tenant",
            "acme",
            "eventId",
            "eventType",
            "bizNo",
            "NatsMessageId",
            "svc-7",
        ] {
            assert!(text.contains(part), "{part} missing: {text}");
        }
    }
}
