//! Client errors as the relay's [`PublishError`]s ([`classify`]) and failures at start as
//! [`OutboxError`]s that name the setting to check.
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode as Code;
use sea_orm_outbox::{OutboxError, PublishError};

use crate::config::{KafkaConfig, ENV_BROKERS, ENV_MAX_MESSAGE_BYTES, ENV_TOPIC_PREFIX};
use crate::credentials::{ENV_PASSWORD, ENV_USERNAME};

/// Decides whether a failed produce may succeed later, as the [`PublishError`] the relay
/// records.
///
/// Permanent: the message is larger than `message.max.bytes` (the client refuses it before
/// sending) or than the topic allows (`MSG_SIZE_TOO_LARGE`, `RECORD_LIST_TOO_LARGE`,
/// `INVALID_MSG_SIZE`), an invalid topic name, or a record the broker calls invalid.
/// Configuration ([`sea_orm_outbox::PublishErrorKind::Configuration`]: the attempt is not
/// counted and the event stays `WAIT`): the topic or partition does not exist, or the login
/// may not write to the topic or the cluster (an idempotent producer needs `IdempotentWrite`
/// on the cluster). Everything else is retryable: a message that timed out, brokers that are
/// down or unreachable, a refused login at run time, a full queue, and any other broker error.
pub fn classify(e: &KafkaError) -> PublishError {
    let text = e.to_string();
    match e.rdkafka_error_code() {
        Some(Code::MessageSizeTooLarge | Code::MessageBatchTooLarge | Code::InvalidMessageSize) => {
            PublishError::permanent(format!(
                "Kafka refused the message for good: it is larger than the producer's \
             message.max.bytes ({ENV_MAX_MESSAGE_BYTES}) or the topic's max.message.bytes \
             ({text})"
            ))
        }
        Some(Code::InvalidTopic | Code::InvalidRecord) => {
            PublishError::permanent(format!("Kafka refused the message for good: {text}"))
        }
        Some(Code::UnknownTopicOrPartition | Code::UnknownTopic | Code::UnknownPartition) => {
            PublishError::configuration(format!(
                "the Kafka topic does not exist: create the topics `<{ENV_TOPIC_PREFIX}>.<event \
                 type>` (or let the cluster create them on first use) ({text})"
            ))
        }
        Some(Code::TopicAuthorizationFailed | Code::ClusterAuthorizationFailed) => {
            PublishError::configuration(format!(
                "the Kafka login may not write: grant Write on the topics and IdempotentWrite on \
                 the cluster ({text})"
            ))
        }
        _ => PublishError::retryable(format!("Kafka produce failed: {text}")),
    }
}

/// The start-up error of a metadata request that failed with `e`: a refused login (the
/// client's error callback saw `auth_error`) is an [`OutboxError::InvalidConfig`] naming the
/// variable of the password (never its value), any other failure an [`OutboxError::Broker`]
/// naming `KAFKA_BROKERS` with the client's last error.
pub(crate) fn start_error(
    e: &KafkaError,
    config: &KafkaConfig,
    auth_error: Option<&str>,
    last_error: Option<&str>,
) -> OutboxError {
    let brokers = &config.brokers;
    if let Some(reason) = auth_error {
        let (who, setting) = match &config.credentials {
            Some(c) => (c.describe(), format!("{ENV_USERNAME} and {ENV_PASSWORD}")),
            None => (
                "no credentials".to_owned(),
                format!("{ENV_USERNAME} + {ENV_PASSWORD}"),
            ),
        };
        return OutboxError::InvalidConfig(format!(
            "the Kafka brokers at {brokers} refused the login with {who}: check {setting} \
             ({reason})"
        ));
    }
    let cause = last_error.map_or_else(String::new, |l| format!("; last client error: {l}"));
    OutboxError::Broker(format!(
        "cannot reach the Kafka brokers at {brokers} ({ENV_BROKERS}) within {:?}: {e}{cause}",
        config.connect_timeout
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Credentials;
    use sea_orm_outbox::PublishErrorKind as Kind;

    #[test]
    fn classifies_produce_errors() {
        let kind = |code| classify(&KafkaError::MessageProduction(code)).kind;
        assert_eq!(kind(Code::MessageSizeTooLarge), Kind::Permanent);
        assert_eq!(kind(Code::InvalidTopic), Kind::Permanent);
        assert_eq!(kind(Code::UnknownTopicOrPartition), Kind::Configuration);
        assert_eq!(kind(Code::UnknownTopic), Kind::Configuration);
        assert_eq!(kind(Code::TopicAuthorizationFailed), Kind::Configuration);
        for code in [
            Code::MessageTimedOut,
            Code::AllBrokersDown,
            Code::QueueFull,
            Code::NotEnoughReplicas,
            Code::Authentication,
        ] {
            assert_eq!(kind(code), Kind::Retryable, "{code:?}");
        }
        let p = classify(&KafkaError::MessageProduction(Code::MessageSizeTooLarge));
        assert!(p.message.contains(ENV_MAX_MESSAGE_BYTES), "{}", p.message);
    }

    #[test]
    fn a_refused_login_names_the_setting_not_the_secret() {
        let e = KafkaError::MetadataFetch(Code::OperationTimedOut);
        let config = KafkaConfig::new("127.0.0.1:9092")
            .credentials(Credentials::new("outbox", "wrong-pass-1"));
        let err = start_error(&e, &config, Some("SASL authentication error"), None);
        assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(ENV_PASSWORD) && text.contains("outbox"),
            "{text}"
        );
        assert!(!text.contains("wrong-pass-1"), "{text}");
        let err = start_error(&e, &config, None, Some("Connection refused"));
        assert!(matches!(err, OutboxError::Broker(_)), "{err}");
        let text = err.to_string();
        assert!(text.contains(ENV_BROKERS) && text.contains("Connection refused"));
        assert!(!text.contains("wrong-pass-1"), "{text}");
    }
}
