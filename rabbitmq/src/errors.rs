//! The client's errors and the server's answers as retryable, permanent or configuration
//! [`PublishError`]s.
//!
//! lapin's errors never hold the URL or the password (the login goes as SASL `PLAIN` bytes and
//! is not echoed), so their `Display` is used as the text.
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::{Error, ErrorKind};

use sea_orm_outbox::PublishError;

/// The AMQP error a lapin error carries, if the server sent one.
fn amqp_error(e: &Error) -> Option<&lapin::protocol::AMQPError> {
    match e.kind() {
        ErrorKind::ProtocolError(amqp) => Some(amqp),
        // A channel or connection the server closed: later calls report it as their state.
        _ => None,
    }
}

/// Whether `e` is the server's `ACCESS_REFUSED` (403): a refused login, or a user without the
/// right to the exchange.
pub(crate) fn is_access_refused(e: &Error) -> bool {
    amqp_error(e).is_some_and(|a| {
        matches!(
            a.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)
                | AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED)
        )
    })
}

/// Whether `e` is the server's `NOT_FOUND` (404): the exchange (or virtual host) does not exist.
pub(crate) fn is_not_found(e: &Error) -> bool {
    amqp_error(e).is_some_and(|a| matches!(a.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

/// Whether `e` is the server's `PRECONDITION_FAILED` (406): e.g. an exchange declared with a
/// type or arguments other than those it exists with.
pub(crate) fn is_precondition_failed(e: &Error) -> bool {
    amqp_error(e).is_some_and(|a| {
        matches!(
            a.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)
        )
    })
}

/// Decides whether a failed publish may succeed later, as the [`PublishError`] the relay records.
///
/// Configuration ([`sea_orm_outbox::PublishErrorKind::Configuration`], the attempt is not
/// counted and the event stays `WAIT`): the server answered `ACCESS_REFUSED` (a refused login
/// or no write permission on the exchange) or `NOT_FOUND` (the exchange was deleted).
/// Everything else is retryable: connection lost or refused, a channel the server closed,
/// heartbeats missed, `PRECONDITION_FAILED` (a message above the server's `max_message_size`
/// closes the channel for every message in flight, so no one message can be blamed; keep
/// `max_message_bytes` at most that size) and any other server error. Messages the publisher
/// refuses before sending (too large, a routing key too long) are permanent, but they never
/// reach this function.
pub fn classify(e: &Error) -> PublishError {
    if is_access_refused(e) {
        return PublishError::configuration(format!(
            "RabbitMQ refused access (check the user, its password and its permissions on \
             the exchange): {e}"
        ));
    }
    if is_not_found(e) {
        return PublishError::configuration(format!(
            "RabbitMQ has no such exchange or virtual host (declare it, or let the publisher \
             declare it with OUTBOX_RABBITMQ_DECLARE_EXCHANGE=true): {e}"
        ));
    }
    PublishError::retryable(format!("RabbitMQ publish failed: {e}"))
}

/// The server did not take a message: it answered `basic.nack` (it could not store it, e.g. a
/// queue's `overflow = reject-publish`). Retryable.
pub(crate) fn nacked(exchange: &str, routing_key: &str) -> PublishError {
    PublishError::retryable(format!(
        "RabbitMQ refused the message (basic.nack) on exchange `{exchange}` with routing key \
         `{routing_key}`: not stored; a full queue with overflow=reject-publish does this"
    ))
}

/// The server returned a mandatory message: no queue is bound for its routing key. Retryable,
/// since a binding may be added later.
pub(crate) fn unroutable(
    exchange: &str,
    routing_key: &str,
    reply_code: u16,
    reply_text: &str,
) -> PublishError {
    PublishError::retryable(format!(
        "RabbitMQ returned the message as unroutable ({reply_code} {reply_text}): exchange \
         `{exchange}` has no queue bound for routing key `{routing_key}`; bind a queue (or an \
         alternate exchange) for it"
    ))
}

/// No confirm arrived within the send timeout: the server may or may not have stored the
/// message. Retryable (the consumer deduplicates on `eventId`).
pub(crate) fn no_confirm(timeout: std::time::Duration) -> PublishError {
    PublishError::retryable(format!(
        "RabbitMQ sent no confirm within {timeout:?} (connection lost or server busy); the \
         message may have been stored and is sent again"
    ))
}

/// A body larger than the configured maximum: permanent, before anything is sent.
pub(crate) fn oversized(bytes: usize, max: usize) -> PublishError {
    PublishError::permanent(format!(
        "message body of {bytes} bytes is larger than OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES \
         ({max} bytes); RabbitMQ would refuse it"
    ))
}

/// A routing key longer than AMQP allows: permanent, before anything is sent.
pub(crate) fn routing_key_too_long(routing_key: &str) -> PublishError {
    PublishError::permanent(format!(
        "routing key `{routing_key}` has {} bytes, more than the 255 AMQP allows (shorten the \
         event type or OUTBOX_RABBITMQ_ROUTING_PREFIX)",
        routing_key.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::AMQPError;
    use sea_orm_outbox::PublishErrorKind::{Configuration, Permanent, Retryable};

    fn amqp(kind: AMQPErrorKind, text: &str) -> Error {
        ErrorKind::ProtocolError(AMQPError::new(kind, text.into())).into()
    }

    #[test]
    fn server_answers_are_classified() {
        let refused = amqp(
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED),
            "ACCESS_REFUSED - write access to exchange 'x' refused",
        );
        let p = classify(&refused);
        assert_eq!(p.kind, Configuration, "{}", p.message);
        assert!(p.message.contains("write access"), "{}", p.message);
        let missing = amqp(
            AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND),
            "NOT_FOUND - no exchange 'x' in vhost '/'",
        );
        assert_eq!(classify(&missing).kind, Configuration);
        assert!(classify(&missing).message.contains("DECLARE_EXCHANGE"));
        for e in [
            amqp(
                AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED),
                "PRECONDITION_FAILED - message size 200 is larger than configured max size 100",
            ),
            amqp(
                AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED),
                "CONNECTION_FORCED - broker forced connection closure",
            ),
            Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
            Error::from(ErrorKind::MissingHeartbeatError),
        ] {
            let p = classify(&e);
            assert_eq!(p.kind, Retryable, "{e}: {}", p.message);
            assert!(
                p.message.starts_with("RabbitMQ publish failed"),
                "{}",
                p.message
            );
        }
    }

    #[test]
    fn outcomes_of_one_message() {
        let p = unroutable("orders", "OrderPaid", 312, "NO_ROUTE");
        assert_eq!(p.kind, Retryable);
        assert!(
            p.message.contains("`orders`") && p.message.contains("`OrderPaid`"),
            "{}",
            p.message
        );
        assert_eq!(nacked("orders", "OrderPaid").kind, Retryable);
        assert_eq!(
            no_confirm(std::time::Duration::from_secs(3)).kind,
            Retryable
        );
        let p = oversized(2000, 1000);
        assert_eq!(p.kind, Permanent);
        assert!(
            p.message.contains("2000") && p.message.contains("1000"),
            "{}",
            p.message
        );
        assert_eq!(routing_key_too_long(&"k".repeat(300)).kind, Permanent);
    }
}
