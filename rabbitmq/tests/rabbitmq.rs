//! What the conformance suite does not ask, on the RabbitMQ server at `RABBITMQ_URL` (default
//! the local one): unroutable messages, a missing exchange, a wrong password in the URL.
use std::time::Duration;

use sea_orm_outbox::{OutboxError, OutboxMessage, PublishErrorKind, Publisher};
use sea_orm_outbox_conformance::in_ci;
use sea_orm_outbox_rabbitmq::{
    RabbitMqConfig, RabbitMqConsumer, RabbitMqPublisher, ENV_EXCHANGE, ENV_URL,
};

/// The configuration from the environment with an exchange of its own, or `None` (skip) when
/// no server answers outside CI.
async fn config(case: &str) -> Option<RabbitMqConfig> {
    let config = RabbitMqConfig::from_env().expect("RabbitMQ settings");
    let url = url::Url::parse(&config.url).expect("url");
    let addr = format!(
        "{}:{}",
        url.host_str().unwrap_or("127.0.0.1"),
        url.port_or_known_default().unwrap_or(5672)
    );
    if tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(!in_ci(), "no RabbitMQ at {addr}");
        eprintln!("SKIPPED {case}: no RabbitMQ at {addr}");
        return None;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Some(config.exchange(format!("outbox_test_{case}_{}_{nanos}", std::process::id())))
}

#[tokio::test]
async fn an_unroutable_message_fails_retryably_naming_exchange_and_key() {
    let Some(config) = config("unroutable").await else {
        return;
    };
    let exchange = config.exchange.clone();
    let publisher = RabbitMqPublisher::start(config.clone().routing_prefix("orders."))
        .await
        .expect("starts");
    let err = publisher
        .publish(&OutboxMessage::new(1, "order-1", "OrderPaid", "{}"))
        .await
        .expect_err("no queue is bound");
    assert_eq!(err.kind, PublishErrorKind::Retryable, "{}", err.message);
    assert!(
        err.message.contains(&format!("`{exchange}`"))
            && err.message.contains("`orders.OrderPaid`"),
        "{}",
        err.message
    );
    // Bound now: the same event goes.
    let mut consumer = RabbitMqConsumer::start(&config, "orders.#")
        .await
        .expect("consumer");
    publisher
        .publish(&OutboxMessage::new(1, "order-1", "OrderPaid", "{}"))
        .await
        .expect("routed");
    let got = consumer.poll(Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].routing_key, "orders.OrderPaid");
    publisher.shutdown().await;
    consumer.close(true).await;
}

#[tokio::test]
async fn a_missing_exchange_is_a_configuration_error_unless_declared() {
    let Some(config) = config("missing").await else {
        return;
    };
    let err = RabbitMqPublisher::start(config.clone().declare_exchange(false))
        .await
        .expect_err("no such exchange");
    assert!(
        matches!(&err, OutboxError::InvalidConfig(m) if m.contains(ENV_EXCHANGE)),
        "{err}"
    );
    // Declared by the publisher, then found by a passive check.
    let publisher = RabbitMqPublisher::start(config.clone())
        .await
        .expect("declares");
    let checked = RabbitMqPublisher::start(config.clone().declare_exchange(false))
        .await
        .expect("exists now");
    checked.shutdown().await;
    publisher.shutdown().await;
    RabbitMqConsumer::start(&config, "#")
        .await
        .expect("consumer")
        .close(true)
        .await;
}

#[tokio::test]
async fn a_wrong_password_in_the_url_names_the_url_and_hides_it() {
    let Some(config) = config("password").await else {
        return;
    };
    let mut url = url::Url::parse(&config.url).expect("url");
    if url.username().is_empty() {
        url.set_username("guest").expect("user");
    }
    url.set_password(Some("wrong-pw-31337")).expect("password");
    let err = RabbitMqPublisher::start(config.url(url.to_string()))
        .await
        .expect_err("refused");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, OutboxError::InvalidConfig(_)), "{text}");
    assert!(
        text.contains(ENV_URL) && !text.contains("wrong-pw-31337"),
        "{text}"
    );
}
