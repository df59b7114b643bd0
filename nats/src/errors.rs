//! Client errors as the relay's [`PublishError`]s ([`classify`]) and connection errors at start
//! as [`OutboxError`]s that name the setting to check.
use std::error::Error as _;

use async_nats::jetstream::context::{PublishError as ClientError, PublishErrorKind};
use async_nats::jetstream::ErrorCode;
use async_nats::{ConnectError, ConnectErrorKind};
use sea_orm_outbox::{OutboxError, PublishError};

use crate::config::{NatsConfig, ENV_SUBJECT_PREFIX, ENV_URL};

/// Decides whether a failed JetStream publish may succeed later, as the [`PublishError`] the
/// relay records.
///
/// Permanent: the message is larger than the server's `max_payload` (the client refuses it
/// before sending), or the stream refuses it as larger than its `max_msg_size` (JetStream error
/// 10054). Configuration ([`sea_orm_outbox::PublishErrorKind::Configuration`], the attempt is
/// not counted and the event stays `WAIT` until a stream captures it): no stream for the
/// subject ("no responders"; the message says to create one). Everything else is retryable: no
/// ack within the timeout, a connection that broke, too many acks in flight, and any other
/// server error. The message carries the client's error and its cause.
pub fn classify(e: &ClientError) -> PublishError {
    let text = error_text(e);
    match e.kind() {
        PublishErrorKind::MaxPayloadExceeded => PublishError::permanent(format!(
            "NATS refused the message for good: it is larger than the server's max_payload \
             ({text})"
        )),
        PublishErrorKind::StreamNotFound => PublishError::configuration(format!(
            "no JetStream stream captures the subject (no responders): create a stream for \
             the subjects `<{ENV_SUBJECT_PREFIX}>.>` ({text})"
        )),
        PublishErrorKind::Other
            if server_code(e) == Some(ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM) =>
        {
            PublishError::permanent(format!(
                "NATS refused the message for good: it is larger than the stream's \
                 max_msg_size ({text})"
            ))
        }
        _ => PublishError::retryable(format!("NATS JetStream publish failed: {text}")),
    }
}

/// The JetStream API error code a publish ack carried, if the server refused the message.
fn server_code(e: &ClientError) -> Option<ErrorCode> {
    e.source()
        .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
        .map(async_nats::jetstream::Error::error_code)
}

/// An error's `Display` followed by its causes, `: `-separated (the client's `Display` of some
/// errors leaves the cause out).
pub(crate) fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The start-up error of a failed connection to the server(s) of `config`: a rejected login is
/// an [`OutboxError::InvalidConfig`] naming the variable of the secret (never its value), any
/// other failure an [`OutboxError::Broker`] naming `NATS_URL`. The URL is shown without its
/// user and password.
pub(crate) fn connect_error(e: &ConnectError, config: &NatsConfig) -> OutboxError {
    let url = config.redacted_url();
    match e.kind() {
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            let (who, setting) = match (&config.credentials, config.url_has_login()) {
                (Some(c), _) => (c.describe(), c.setting().to_owned()),
                (None, true) => ("the login in the URL".to_owned(), ENV_URL.to_owned()),
                (None, false) => (
                    "no credentials".to_owned(),
                    "NATS_USER + NATS_PASSWORD, NATS_TOKEN, NATS_NKEY_SEED or NATS_CREDS_FILE"
                        .to_owned(),
                ),
            };
            OutboxError::InvalidConfig(format!(
                "the NATS server at {url} refused the login ({}) with {who}: check {setting}",
                e.kind()
            ))
        }
        _ => OutboxError::Broker(format!(
            "cannot connect to the NATS server at {url} ({ENV_URL}): {}",
            error_text(e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Credentials;
    use sea_orm_outbox::PublishErrorKind as Kind;

    #[test]
    fn classifies_publish_errors() {
        let too_big = ClientError::with_source(
            PublishErrorKind::MaxPayloadExceeded,
            "Payload size limit of 1048576 exceeded by message size of 1572900",
        );
        let p = classify(&too_big);
        assert_eq!(p.kind, Kind::Permanent);
        assert!(p.message.contains("1572900"), "{}", p.message);
        let p = classify(&ClientError::new(PublishErrorKind::StreamNotFound));
        assert_eq!(p.kind, Kind::Configuration);
        assert!(p.message.contains("create a stream"), "{}", p.message);
        for kind in [
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
            PublishErrorKind::MaxAckPending,
            PublishErrorKind::Other,
        ] {
            assert_eq!(classify(&ClientError::new(kind)).kind, Kind::Retryable);
        }
    }

    #[test]
    fn a_refused_login_names_the_setting_not_the_secret() {
        let e = ConnectError::new(ConnectErrorKind::AuthorizationViolation);
        let config = NatsConfig::new("nats://127.0.0.1:4222")
            .credentials(Credentials::user_password("outbox", "wrong-pass-1"));
        let text = connect_error(&e, &config).to_string();
        assert!(
            text.contains("NATS_PASSWORD") && text.contains("outbox"),
            "{text}"
        );
        assert!(!text.contains("wrong-pass-1"), "{text}");
        let config = NatsConfig::new("nats://outbox:wrong-pass-1@127.0.0.1:4222");
        let text = connect_error(&e, &config).to_string();
        assert!(
            text.contains("NATS_URL") && !text.contains("wrong-pass-1"),
            "{text}"
        );
        let e = ConnectError::new(ConnectErrorKind::Io);
        let err = connect_error(&e, &config);
        assert!(matches!(err, OutboxError::Broker(_)), "{err}");
        assert!(!err.to_string().contains("wrong-pass-1"), "{err}");
    }
}
