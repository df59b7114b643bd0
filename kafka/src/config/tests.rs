use std::collections::HashMap;

use super::*;
use crate::SaslMechanism;

fn from(vars: &[(&str, &str)]) -> Result<KafkaConfig, OutboxError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    KafkaConfig::from_lookup(|name| vars.get(name).cloned())
}

fn setting(c: &ClientConfig, key: &str) -> Option<String> {
    c.get(key).map(str::to_owned)
}

#[test]
fn defaults_without_variables() {
    let c = from(&[]).expect("defaults");
    assert_eq!(c, KafkaConfig::default());
    assert_eq!(c.brokers, DEFAULT_BROKERS);
    assert_eq!(c.topic_prefix, "outbox");
    assert_eq!(c.send_timeout, Duration::from_secs(3));
    assert_eq!(c.max_message_bytes, 1_000_000);
    assert_eq!(c.credentials, None);
    assert!(!c.uses_tls());
    assert_eq!(c.topic_of("OrderPaid"), "outbox.OrderPaid");
    let rd = c.client_config("t");
    assert_eq!(
        setting(&rd, "security.protocol").as_deref(),
        Some("plaintext")
    );
    assert_eq!(setting(&rd, "sasl.username"), None);
}

#[test]
fn reads_every_variable() {
    let c = from(&[
        (ENV_BROKERS, " a:9092,b:9093 "),
        (ENV_TOPIC_PREFIX, "svc.order"),
        (ENV_SEND_TIMEOUT_MS, "1500"),
        (ENV_MAX_MESSAGE_BYTES, "2000000"),
        (ENV_TLS_CA_FILE, "/etc/ca.pem"),
        (ENV_USERNAME, "outbox"),
        (ENV_PASSWORD, "pw-123"),
        (ENV_SASL_MECHANISM, "SCRAM-SHA-256"),
    ])
    .expect("config");
    assert_eq!(c.brokers, "a:9092,b:9093");
    assert_eq!(c.topic_prefix, "svc.order");
    assert_eq!(c.send_timeout, Duration::from_millis(1500));
    assert_eq!(c.max_message_bytes, 2_000_000);
    assert!(c.uses_tls());
    assert_eq!(
        c.credentials,
        Some(Credentials::new("outbox", "pw-123").mechanism(SaslMechanism::ScramSha256))
    );
    let rd = c.client_config("t");
    for (key, value) in [
        ("bootstrap.servers", "a:9092,b:9093"),
        ("security.protocol", "sasl_ssl"),
        ("sasl.mechanism", "SCRAM-SHA-256"),
        ("sasl.username", "outbox"),
        ("ssl.ca.location", "/etc/ca.pem"),
        ("message.max.bytes", "2000000"),
    ] {
        assert_eq!(setting(&rd, key).as_deref(), Some(value), "{key}");
    }
    let c = from(&[(ENV_TLS, "true")]).expect("tls");
    assert_eq!(
        setting(&c.client_config("t"), "security.protocol").as_deref(),
        Some("ssl")
    );
    let c = from(&[(ENV_USERNAME, "u"), (ENV_PASSWORD, "p")]).expect("sasl");
    assert_eq!(
        setting(&c.client_config("t"), "security.protocol").as_deref(),
        Some("sasl_plaintext")
    );
    assert_eq!(
        c.credentials.map(|c| c.mechanism),
        Some(SaslMechanism::ScramSha512)
    );
    let c = from(&[(ENV_TOPIC_PREFIX, "  ")]).expect("blank is unset");
    assert_eq!(c.topic_prefix, DEFAULT_TOPIC_PREFIX);
}

#[test]
fn invalid_values_name_their_variable() {
    for (vars, name) in [
        (vec![(ENV_TOPIC_PREFIX, "a*b")], ENV_TOPIC_PREFIX),
        (vec![(ENV_TOPIC_PREFIX, "order events")], ENV_TOPIC_PREFIX),
        (vec![(ENV_SEND_TIMEOUT_MS, "3s")], ENV_SEND_TIMEOUT_MS),
        (vec![(ENV_SEND_TIMEOUT_MS, "0")], ENV_SEND_TIMEOUT_MS),
        (vec![(ENV_MAX_MESSAGE_BYTES, "12")], ENV_MAX_MESSAGE_BYTES),
        (vec![(ENV_MAX_MESSAGE_BYTES, "1MB")], ENV_MAX_MESSAGE_BYTES),
        (vec![(ENV_BROKERS, "a:9092,,")], ENV_BROKERS),
        (vec![(ENV_BROKERS, "host:notaport")], ENV_BROKERS),
        (vec![(ENV_BROKERS, "host")], ENV_BROKERS),
        (vec![(ENV_TLS, "maybe")], ENV_TLS),
        (vec![(ENV_USERNAME, "outbox")], ENV_PASSWORD),
        (vec![(ENV_SASL_MECHANISM, "PLAIN")], ENV_SASL_MECHANISM),
    ] {
        let err = from(&vars).expect_err(name);
        assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
}

#[test]
fn the_password_stays_out_of_debug_and_errors() {
    let c = from(&[
        (ENV_USERNAME, "outbox"),
        (ENV_PASSWORD, " pw-secret "),
        (ENV_SASL_MECHANISM, "PLAIN"),
    ])
    .expect("config");
    // The password is taken as given, spaces included.
    assert_eq!(
        c.credentials.as_ref().map(|c| c.password.expose()),
        Some(" pw-secret ")
    );
    assert!(!format!("{c:?}").contains("pw-secret"), "{c:?}");
    let err = from(&[
        (ENV_USERNAME, "outbox"),
        (ENV_PASSWORD, "pw-secret"),
        (ENV_SASL_MECHANISM, "GSSAPI"),
    ])
    .expect_err("mechanism");
    assert!(!err.to_string().contains("pw-secret"), "{err}");
    // A login in the brokers' address is refused, and the message does not repeat it.
    for brokers in [
        "outbox:pw-secret@b:9092",
        "outbox:pw-secret@b",
        "sasl_ssl://u:pw-secret@b:1",
    ] {
        let err = from(&[(ENV_BROKERS, brokers)]).expect_err(brokers);
        let text = err.to_string();
        assert!(
            text.contains(ENV_BROKERS) && text.contains(ENV_PASSWORD),
            "{text}"
        );
        assert!(!text.contains("pw-secret"), "{text}");
    }
}
