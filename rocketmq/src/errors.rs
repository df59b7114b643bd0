//! The client's errors as text and as retryable or permanent [`PublishError`]s.
//!
//! A rocketmq-rust error's `Display` prints `<redacted>`, so the text is built from its code,
//! public message and the detail the client keeps in its cause; the classification goes by
//! code and response code, never by `Display`.
use rocketmq_client_rust::{ClientError, MQClientException};

use sea_orm_outbox::PublishError;

/// RocketMQ's `MESSAGE_ILLEGAL` response code (too large, empty body, bad property).
const RESPONSE_MESSAGE_ILLEGAL: i32 = 13;
/// RocketMQ's `NO_PERMISSION` response code: a broker with authentication rejected the
/// request's credentials (missing, unknown user, wrong signature) or its authorization denied
/// the action. The client keeps only the code, not the broker's remark.
pub(super) const RESPONSE_NO_PERMISSION: i32 = 16;

/// Whether `e` is the broker's `NO_PERMISSION` answer ([`RESPONSE_NO_PERMISSION`]).
pub(super) fn is_no_permission(e: &ClientError) -> bool {
    e.broker_response_code() == Some(RESPONSE_NO_PERMISSION)
        || e.source_ref::<MQClientException>()
            .is_some_and(|x| x.response_code() == RESPONSE_NO_PERMISSION)
}

/// How the refused requests were signed, for the text of a `NO_PERMISSION` error.
#[derive(Debug, Clone, Copy)]
pub(super) enum Signer<'a> {
    /// Not known ([`classify`] without the publisher's configuration).
    Unknown,
    /// Not signed: no credentials configured.
    Unsigned,
    /// Signed with this access key.
    AccessKey(&'a str),
}

impl<'a> Signer<'a> {
    /// The signer of a publisher with `credentials`.
    pub(super) fn of(credentials: Option<&'a super::credentials::Credentials>) -> Self {
        credentials.map_or(Signer::Unsigned, |c| Signer::AccessKey(c.access_key()))
    }
}

/// What a `NO_PERMISSION` answer means and what to check, for requests signed by `signer`.
pub(super) fn no_permission_text(signer: Signer<'_>) -> String {
    use super::credentials::{ENV_ACCESS_KEY, ENV_SECRET_KEY};
    match signer {
        Signer::Unknown => format!(
            "RocketMQ refused the request: the broker answered NO_PERMISSION (code 16), i.e. \
             missing or rejected credentials, or a user without permission for the topic; \
             check {ENV_ACCESS_KEY} / {ENV_SECRET_KEY} and the broker's users"
        ),
        Signer::AccessKey(ak) => format!(
            "RocketMQ rejected the credentials (access key `{ak}`): the broker answered \
             NO_PERMISSION (code 16), i.e. an unknown user, a wrong secret key, or a user \
             without permission for the topic; check {ENV_ACCESS_KEY} / {ENV_SECRET_KEY} and \
             the broker's users"
        ),
        Signer::Unsigned => format!(
            "RocketMQ requires credentials: the broker answered NO_PERMISSION (code 16) to a \
             request without them; set {ENV_ACCESS_KEY} / {ENV_SECRET_KEY} (a user of the \
             broker's)"
        ),
    }
}

/// Text of a rocketmq-rust error: its code and public message (`Display` prints `<redacted>`).
pub(super) fn error_text(e: &rocketmq_error::Error) -> String {
    format!(
        "{} ({})",
        e.code().as_str(),
        e.descriptor().public_message()
    )
}

/// Text of a client error: code, public message, and the detail the client keeps in its cause.
pub(super) fn client_error_text(e: &ClientError) -> String {
    let mut text = error_text(e);
    if let Some(detail) = e
        .source_ref::<MQClientException>()
        .and_then(|x| x.error_message())
    {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(code) = e.broker_response_code() {
        text.push_str(&format!("; broker response code {code}"));
    }
    if let Some(addr) = e.broker_addr() {
        text.push_str(&format!("; broker {addr}"));
    }
    text
}

/// Decides whether a failed send may succeed later, as the [`PublishError`] the relay records.
///
/// Configuration ([`sea_orm_outbox::PublishErrorKind::Configuration`], the attempt is not counted):
/// the broker answered `NO_PERMISSION` (code 16): credentials rejected or missing, or the user may
/// not publish to the topic. Permanent: the client or broker refused the message itself (response
/// code `MESSAGE_ILLEGAL`: body too large or empty), the catalog says the message is too large or
/// invalid, or the topic name is illegal or forbidden. Everything else (connection refused,
/// time-outs, no route yet, broker busy, broker errors) is retryable. The message carries the
/// error's code, public message, cause detail, broker response code and broker address.
pub fn classify(e: &ClientError) -> PublishError {
    classify_for(e, Signer::Unknown)
}

/// [`classify`], saying in a `NO_PERMISSION` error how the requests were signed.
pub(super) fn classify_for(e: &ClientError, signer: Signer<'_>) -> PublishError {
    if is_no_permission(e) {
        return PublishError::configuration(format!(
            "{} ({})",
            no_permission_text(signer),
            client_error_text(e)
        ));
    }
    let code = e.code().as_str();
    let text = client_error_text(e);
    let client = e.source_ref::<MQClientException>();
    let detail = client.and_then(|x| x.error_message()).unwrap_or_default();
    let illegal_message = client.is_some_and(|x| x.response_code() == RESPONSE_MESSAGE_ILLEGAL)
        || e.broker_response_code() == Some(RESPONSE_MESSAGE_ILLEGAL)
        || matches!(code, "broker.message.too_large" | "broker.message.invalid");
    let illegal_topic = detail.starts_with("The specified topic")
        || (detail.contains("topic[")
            && (detail.contains("forbidden") || detail.contains("conflict with system topic")));
    if illegal_message || illegal_topic {
        PublishError::permanent(format!("RocketMQ refused the message for good: {text}"))
    } else {
        PublishError::retryable(format!("RocketMQ send failed: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::PublishErrorKind;

    fn kind(e: ClientError) -> (PublishErrorKind, String) {
        let p = classify(&e);
        (p.kind, p.message)
    }

    #[test]
    fn classifies_by_code_and_cause() {
        use PublishErrorKind::{Permanent, Retryable};
        // The client's own size check (MESSAGE_ILLEGAL, code 13).
        let (k, text) = kind(ClientError::from(MQClientException::new_with_code(
            RESPONSE_MESSAGE_ILLEGAL,
            "the message body size over max value, MAX: 4194304",
        )));
        assert_eq!(k, Permanent);
        assert!(
            text.contains("core.argument.invalid") && text.contains("over max value"),
            "{text}"
        );
        // The broker's size check.
        let (k, text) = kind(ClientError::broker_operation_failed(
            "SEND_MESSAGE",
            13,
            "body too large",
        ));
        assert_eq!(k, Permanent, "{text}");
        // An illegal topic.
        let (k, _) = kind(ClientError::from(MQClientException::new(
            "The specified topic[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        )));
        assert_eq!(k, Permanent);
        // No route yet: same code as the illegal message, but worth retrying.
        let (k, text) = kind(ClientError::from(MQClientException::new(
            "No route info for this topic, T",
        )));
        assert_eq!(k, Retryable);
        assert!(text.contains("No route info"), "{text}");
        // Broker busy, time-outs, connection refused.
        let (k, text) = kind(ClientError::broker_operation_failed(
            "SEND_MESSAGE",
            2,
            "system busy",
        ));
        assert_eq!(k, Retryable);
        assert!(text.contains("broker response code 2"), "{text}");
        assert_eq!(kind(ClientError::timeout("send", 3000)).0, Retryable);
        // NO_PERMISSION: the publisher's configuration, never the event's.
        let denied = ClientError::broker_operation_failed("BROKER_OPERATION", 16, "invalid")
            .with_broker_addr("127.0.0.1:10911");
        let (k, text) = kind(denied.clone());
        assert_eq!(k, PublishErrorKind::Configuration, "{text}");
        assert!(text.contains("ROCKETMQ_ACCESS_KEY"), "{text}");
        let p = classify_for(&denied, Signer::Unsigned);
        assert!(p.message.contains("requires credentials"), "{}", p.message);
        let p = classify_for(&denied, Signer::AccessKey("order-svc"));
        assert!(
            p.message.contains("access key `order-svc`") && p.message.contains("code 16"),
            "{}",
            p.message
        );
        let (k, text) = kind(ClientError::from_error(rocketmq_error::Error::new(
            &rocketmq_error::TRANSPORT_CONNECTION_FAILED,
        )));
        assert_eq!(k, Retryable);
        assert!(text.contains("transport.connection.failed"), "{text}");
    }
}
