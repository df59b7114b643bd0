//! The publisher against the Kafka-compatible broker at `KAFKA_BROKERS` (default
//! `127.0.0.1:9092`): the start-up check, per-event outcomes of a batch (a too-large record, a
//! bad event type and a missing topic among good ones), one partition per key. Under `CI=true` a
//! broker that does not answer fails the tests; elsewhere they are skipped with a message.
use std::time::Duration;

use sea_orm_outbox::{OutboxError, OutboxMessage, PublishErrorKind, Publisher};
use sea_orm_outbox_kafka::{
    KafkaConfig, KafkaConsumer, KafkaPublisher, ReceivedMessage, DEFAULT_BROKERS, ENV_BROKERS,
};

/// The brokers, or `None` (skip) when the first does not answer outside CI.
async fn server() -> Option<String> {
    let brokers = std::env::var(ENV_BROKERS)
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_BROKERS.to_owned());
    let addr = brokers
        .split(',')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let up = matches!(
        tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(&addr)
        )
        .await,
        Ok(Ok(_))
    );
    if up {
        return Some(brokers);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no Kafka broker answers at {addr}"
    );
    eprintln!("SKIPPED: no Kafka broker answers at {addr}");
    None
}

/// A topic prefix unique to one test.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("outbox_kafka_{name}_{}_{nanos}", std::process::id())
}

/// Reads `consumer` until `n` records came or 10 s passed, then a little more (late extras
/// would show).
async fn read(consumer: &mut KafkaConsumer, n: usize) -> Vec<ReceivedMessage> {
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < n && tokio::time::Instant::now() < end {
        got.extend(consumer.poll(Duration::from_millis(200)).await);
    }
    got.extend(consumer.poll(Duration::from_millis(500)).await);
    got
}

#[tokio::test]
async fn start_fails_when_no_broker_answers() {
    // A port nothing listens on: the metadata request at start finds no broker.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let config =
        KafkaConfig::new(format!("127.0.0.1:{port}")).connect_timeout(Duration::from_secs(2));
    let started = std::time::Instant::now();
    let err = KafkaPublisher::start(config).await.expect_err("no broker");
    assert!(matches!(err, OutboxError::Broker(_)), "{err}");
    assert!(err.to_string().contains(ENV_BROKERS), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_batch_has_one_outcome_per_event() {
    let Some(brokers) = server().await else {
        return;
    };
    let prefix = unique("batch");
    let config = KafkaConfig::new(&brokers).topic_prefix(&prefix);
    let mut consumer = KafkaConsumer::start(&config, &["OrderCreated", "order.paid"], 3)
        .await
        .expect("consumer");
    let publisher = KafkaPublisher::start(config).await.expect("publisher");
    assert!(publisher.batches());
    let big = "x".repeat(1_500_000);
    let batch = vec![
        OutboxMessage::new(1, "order-1", "OrderCreated", r#"{"n":1}"#)
            .with_header("tenant", "acme"),
        OutboxMessage::new(2, "order-2", "Order Created", "{}"),
        OutboxMessage::new(3, "order-3", "OrderCreated", big),
        OutboxMessage::new(4, "order-4", "order.paid", r#"{"n":4}"#),
        OutboxMessage::new(5, "order-5", "NoSuchTopic", "{}"),
    ];
    let results = publisher.publish_batch(&batch).await;
    let kinds: Vec<Option<PublishErrorKind>> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(PublishErrorKind::Permanent),
            Some(PublishErrorKind::Permanent),
            None,
            Some(PublishErrorKind::Configuration),
        ],
        "{results:?}"
    );
    let reason = &results[1].as_ref().expect_err("event type").message;
    assert!(reason.contains("`Order Created`"), "{reason}");
    let mut got = read(&mut consumer, 2).await;
    got.sort_by_key(|m| m.event_id);
    let ids: Vec<Option<i64>> = got.iter().map(|m| m.event_id).collect();
    assert_eq!(ids, [Some(1), Some(4)], "{got:?}");
    assert_eq!(got[0].topic, format!("{prefix}.OrderCreated"));
    assert_eq!(got[0].key.as_deref(), Some("order-1"));
    assert_eq!(got[0].header("tenant"), Some("acme"));
    assert_eq!(got[0].payload, r#"{"n":1}"#);
    assert_eq!(got[1].biz_no.as_deref(), Some("order-4"));
    assert_eq!(got[1].event_type.as_deref(), Some("order.paid"));
    assert_eq!(got[1].topic, format!("{prefix}.order.paid"));
    publisher.shutdown().await;
    consumer.delete_topics().await.expect("delete the topics");
}

/// In an ordered batch each key's records go to one partition (the key is `biz_no`), in order.
#[tokio::test]
async fn a_key_keeps_its_partition() {
    let Some(brokers) = server().await else {
        return;
    };
    let prefix = unique("partition");
    let config = KafkaConfig::new(&brokers).topic_prefix(&prefix);
    let mut consumer = KafkaConsumer::start(&config, &["T"], 3)
        .await
        .expect("consumer");
    let publisher = KafkaPublisher::start(config).await.expect("publisher");
    let batch: Vec<OutboxMessage> = [(1, "A"), (2, "B"), (3, "A"), (4, "B"), (5, "A"), (6, "B")]
        .into_iter()
        .map(|(id, key)| OutboxMessage::new(id, key, "T", "{}").with_ordered(true))
        .collect();
    let results = publisher.publish_batch(&batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let got = read(&mut consumer, 6).await;
    for (key, ids) in [("A", [1, 3, 5]), ("B", [2, 4, 6])] {
        let of_key: Vec<&ReceivedMessage> = got
            .iter()
            .filter(|m| m.key.as_deref() == Some(key))
            .collect();
        let order: Vec<Option<i64>> = of_key.iter().map(|m| m.event_id).collect();
        assert_eq!(order, ids.map(Some), "key {key}: {got:?}");
        let partitions: std::collections::HashSet<i32> =
            of_key.iter().map(|m| m.partition).collect();
        assert_eq!(partitions.len(), 1, "key {key}, one partition: {got:?}");
    }
    publisher.shutdown().await;
    consumer.delete_topics().await.expect("delete the topics");
}
