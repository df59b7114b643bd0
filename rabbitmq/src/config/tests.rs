use std::collections::HashMap;
use std::time::Duration;

use super::*;

fn from(vars: &[(&str, &str)]) -> Result<RabbitMqConfig, OutboxError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    RabbitMqConfig::from_lookup(|name| vars.get(name).cloned())
}

fn message(result: Result<RabbitMqConfig, OutboxError>) -> String {
    match result.expect_err("invalid") {
        OutboxError::InvalidConfig(m) => m,
        other => panic!("not InvalidConfig: {other}"),
    }
}

#[test]
fn defaults_without_variables() {
    let c = from(&[]).expect("defaults");
    assert_eq!(c, RabbitMqConfig::default());
    assert_eq!(c.url, DEFAULT_URL);
    assert_eq!(c.exchange, "outbox");
    assert!(c.declare_exchange);
    assert_eq!(c.routing_key("OrderPaid"), "OrderPaid");
    assert_eq!(c.send_timeout, Duration::from_secs(3));
    assert_eq!(c.max_message_bytes, 4 * 1024 * 1024);
    assert_eq!(c.content_type.as_deref(), Some("application/json"));
    let uri = c.amqp_uri().expect("uri");
    assert_eq!(uri.authority.host, "127.0.0.1");
    assert_eq!(uri.authority.port, 5672);
    assert_eq!(uri.vhost, "/");
    assert_eq!(uri.authority.userinfo.username, "guest");
}

#[test]
fn every_variable_is_read() {
    let c = from(&[
        (ENV_URL, " amqps://u:p@mq.example:5671/prod "),
        (ENV_USERNAME, "orders"),
        (ENV_PASSWORD, "s3cret"),
        (ENV_EXCHANGE, "order-events"),
        (ENV_DECLARE_EXCHANGE, "FALSE"),
        (ENV_ROUTING_PREFIX, "orders."),
        (ENV_MAX_MESSAGE_BYTES, "65536"),
        (ENV_SEND_TIMEOUT_MS, "1500"),
        (ENV_APP_ID, "order-service"),
    ])
    .expect("valid");
    assert_eq!(c.exchange, "order-events");
    assert!(!c.declare_exchange);
    assert_eq!(c.routing_key("OrderPaid"), "orders.OrderPaid");
    assert_eq!(c.max_message_bytes, 65_536);
    assert_eq!(c.send_timeout, Duration::from_millis(1500));
    assert_eq!(c.app_id.as_deref(), Some("order-service"));
    let uri = c.amqp_uri().expect("uri");
    assert_eq!(uri.authority.userinfo.username, "orders");
    assert_eq!(uri.authority.userinfo.password, "s3cret");
    assert_eq!(uri.authority.host, "mq.example");
    assert_eq!(uri.authority.port, 5671);
    assert_eq!(uri.vhost, "prod");
    assert_eq!(c.password_setting(), ENV_PASSWORD);
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("u:p@"),
        "{shown}"
    );
}

#[test]
fn ip_hosts_are_kept() {
    for (url, host) in [
        ("amqp://10.1.2.3:5672/%2f", "10.1.2.3"),
        ("amqp://[::1]:5672/%2f", "::1"),
        ("amqp://rabbit/%2f", "rabbit"),
    ] {
        let uri = RabbitMqConfig::new(url).amqp_uri().expect(url);
        assert_eq!(uri.authority.host, host, "{url}");
    }
}

#[test]
fn bad_values_name_their_variable() {
    for (vars, names) in [
        (vec![(ENV_URL, "http://guest:pw-7@h")], ENV_URL),
        (vec![(ENV_URL, "amqp://guest:pw-7@h:notaport")], ENV_URL),
        (vec![(ENV_USERNAME, "u")], ENV_PASSWORD),
        (vec![(ENV_DECLARE_EXCHANGE, "yes")], ENV_DECLARE_EXCHANGE),
        (vec![(ENV_EXCHANGE, "has space")], ENV_EXCHANGE),
        (vec![(ENV_EXCHANGE, "amq.topic")], ENV_EXCHANGE),
        (vec![(ENV_MAX_MESSAGE_BYTES, "1MiB")], ENV_MAX_MESSAGE_BYTES),
        (vec![(ENV_MAX_MESSAGE_BYTES, "0")], ENV_MAX_MESSAGE_BYTES),
        (vec![(ENV_SEND_TIMEOUT_MS, "0")], ENV_SEND_TIMEOUT_MS),
        (vec![(ENV_SEND_TIMEOUT_MS, "soon")], ENV_SEND_TIMEOUT_MS),
    ] {
        let m = message(from(&vars));
        assert!(m.contains(names), "{vars:?}: {m}");
        assert!(!m.contains("pw-7"), "the password shows: {m}");
    }
    let long = "k".repeat(256);
    let m = message(from(&[(ENV_ROUTING_PREFIX, &long)]));
    assert!(m.contains(ENV_ROUTING_PREFIX), "{m}");
    // An existing `amq.` exchange may be used without declaring it.
    let c = from(&[(ENV_EXCHANGE, "amq.topic"), (ENV_DECLARE_EXCHANGE, "false")]).expect("ok");
    assert_eq!(c.exchange, "amq.topic");
}

#[test]
fn event_limits_follow_the_message_size() {
    let c = RabbitMqConfig::default().max_message_bytes(2048);
    assert_eq!(c.event_limits().max_payload_bytes, 2048);
}

#[test]
fn a_password_with_a_slash_stays_out_of_errors_and_debug() {
    for url in [
        "amqp://u:pw/secret@h:5672/%2f",
        "amqp://u:pw#secret@h",
        "amqp://u:pw?secret@h",
    ] {
        let config = RabbitMqConfig::new(url);
        let err = config.validate().expect_err("the port does not parse");
        for text in [
            err.to_string(),
            format!("{config:?}"),
            config.redacted_url(),
        ] {
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
