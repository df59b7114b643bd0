//! The stream entry an outbox event becomes: its field names ([`FIELD_EVENT_ID`] and the
//! others), its size, and the `XADD` command that appends it.
use std::borrow::Cow;

use sea_orm_outbox::{OutboxMessage, PublishError};

use crate::config::RedisConfig;

/// Field with the outbox event id (`t_event_record.id`, decimal): the key consumers
/// deduplicate on.
pub const FIELD_EVENT_ID: &str = "eventId";
/// Field with the event type (also the stream name's last part).
pub const FIELD_EVENT_TYPE: &str = "eventType";
/// Field with the business key (`biz_no`).
pub const FIELD_BIZ_NO: &str = "bizNo";
/// Field with the payload (the event's JSON body).
pub const FIELD_PAYLOAD: &str = "payload";
/// Prefix of a header's field: event header `tenant` is field `h:tenant`.
pub const HEADER_FIELD_PREFIX: &str = "h:";

/// The fields of `message`'s entry, in the order they are sent: `eventId`, `eventType`,
/// `bizNo`, `payload`, then `h:<name>` per header.
pub(crate) fn fields(message: &OutboxMessage) -> Vec<(Cow<'static, str>, Cow<'_, str>)> {
    let mut fields: Vec<(Cow<'static, str>, Cow<'_, str>)> = vec![
        (FIELD_EVENT_ID.into(), message.event_id.to_string().into()),
        (FIELD_EVENT_TYPE.into(), message.event_type.as_str().into()),
        (FIELD_BIZ_NO.into(), message.biz_no.as_str().into()),
        (FIELD_PAYLOAD.into(), message.payload.as_str().into()),
    ];
    for (name, value) in &message.headers {
        fields.push((
            format!("{HEADER_FIELD_PREFIX}{name}").into(),
            value.as_str().into(),
        ));
    }
    fields
}

/// The size of `message`'s entry in bytes: every field name and value.
pub(crate) fn entry_bytes(message: &OutboxMessage) -> usize {
    fields(message)
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum()
}

/// The `XADD` that appends `message` to its stream, after checking its size.
///
/// # Errors
/// A permanent [`PublishError`] when the entry is larger than
/// [`RedisConfig::max_message_bytes`].
pub(crate) fn xadd(
    config: &RedisConfig,
    message: &OutboxMessage,
) -> Result<redis::Cmd, PublishError> {
    let size = entry_bytes(message);
    if size > config.max_message_bytes {
        return Err(PublishError::permanent(format!(
            "event {} is {size} bytes as a Redis stream entry; the limit is {} bytes \
             (max_message_bytes, OUTBOX_REDIS_MAX_MESSAGE_BYTES)",
            message.event_id, config.max_message_bytes
        )));
    }
    let mut cmd = redis::cmd("XADD");
    cmd.arg(config.stream_of(&message.event_type));
    if let Some(n) = config.max_len {
        cmd.arg("MAXLEN").arg("~").arg(n);
    }
    cmd.arg("*");
    for (name, value) in fields(message) {
        cmd.arg(name.as_ref()).arg(value.as_ref());
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_carries_every_field() {
        let m = OutboxMessage::new(42, "order-42", "OrderPaid", "{}").with_header("tenant", "acme");
        let config = RedisConfig::default().max_len(1000);
        let cmd = xadd(&config, &m).expect("fits");
        let args: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<other>".into(),
            })
            .collect();
        assert_eq!(
            args,
            [
                "XADD",
                "outbox:OrderPaid",
                "MAXLEN",
                "~",
                "1000",
                "*",
                "eventId",
                "42",
                "eventType",
                "OrderPaid",
                "bizNo",
                "order-42",
                "payload",
                "{}",
                "h:tenant",
                "acme"
            ]
        );
        assert_eq!(entry_bytes(&m), 7 + 2 + 9 + 9 + 5 + 8 + 7 + 2 + 8 + 4);
    }

    #[test]
    fn an_oversized_entry_is_permanent() {
        let config = RedisConfig::default().max_message_bytes(100);
        let m = OutboxMessage::new(1, "k", "T", "x".repeat(100));
        let e = xadd(&config, &m).expect_err("too large");
        assert_eq!(e.kind, sea_orm_outbox::PublishErrorKind::Permanent);
        assert!(
            e.message.contains("OUTBOX_REDIS_MAX_MESSAGE_BYTES"),
            "{}",
            e.message
        );
        assert!(xadd(&config, &OutboxMessage::new(1, "k", "T", "x")).is_ok());
    }
}
