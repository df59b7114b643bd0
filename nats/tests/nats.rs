//! The publisher against the NATS server at `NATS_URL` (default `nats://127.0.0.1:4222`, with
//! JetStream): the start-up stream check, per-event outcomes of a batch, deduplication of a
//! re-send. Under `CI=true` a server that does not answer fails the tests; elsewhere they are
//! skipped with a message.
use std::time::Duration;

use sea_orm_outbox::{OutboxError, OutboxMessage, PublishErrorKind, Publisher};
use sea_orm_outbox_nats::{NatsConfig, NatsConsumer, NatsPublisher, DEFAULT_URL, ENV_URL};

/// The server's URL, or `None` (skip) when it does not answer outside CI.
async fn server() -> Option<String> {
    let url = std::env::var(ENV_URL)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let addr = url.rsplit_once("://").map_or(url.as_str(), |(_, a)| a);
    let addr = addr.rsplit_once('@').map_or(addr, |(_, a)| a).to_owned();
    let up = matches!(
        tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(&addr)
        )
        .await,
        Ok(Ok(_))
    );
    if up {
        return Some(url);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no NATS server answers at {addr}"
    );
    eprintln!("SKIPPED: no NATS server answers at {addr}");
    None
}

/// A subject prefix (and stream name) unique to one test.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("outbox_nats_{name}_{}_{nanos}", std::process::id())
}

/// Reads `consumer` until `n` messages came or 10 s passed.
async fn read(consumer: &mut NatsConsumer, n: usize) -> Vec<sea_orm_outbox_nats::ReceivedMessage> {
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < n && tokio::time::Instant::now() < end {
        got.extend(consumer.poll(Duration::from_millis(200)).await);
    }
    // Late extras (duplicates) would show here.
    got.extend(consumer.poll(Duration::from_millis(300)).await);
    got
}

#[tokio::test]
async fn start_requires_a_stream_for_the_subjects() {
    let Some(url) = server().await else { return };
    let prefix = unique("nostream");
    let err = NatsPublisher::start(NatsConfig::new(&url).subject_prefix(&prefix))
        .await
        .expect_err("no stream captures the subjects");
    assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("OUTBOX_NATS_SUBJECT_PREFIX") && text.contains(&format!("{prefix}.>")),
        "{text}"
    );
}

#[tokio::test]
async fn a_batch_has_one_outcome_per_event_and_re_sends_are_dropped() {
    let Some(url) = server().await else { return };
    let prefix = unique("batch");
    let config = NatsConfig::new(&url).subject_prefix(&prefix);
    let mut consumer = NatsConsumer::start(&config, &prefix)
        .await
        .expect("consumer");
    let publisher = NatsPublisher::start(config).await.expect("publisher");
    assert!(publisher.batches());
    assert_eq!(publisher.stream(), prefix);
    let batch = vec![
        OutboxMessage::new(1, "order-1", "OrderCreated", r#"{"n":1}"#)
            .with_header("tenant", "acme"),
        OutboxMessage::new(2, "order-2", "Order.*", "{}"),
        OutboxMessage::new(3, "order-3", "OrderCreated", "{}").with_header("Nats-Rollup", "all"),
        OutboxMessage::new(4, "order-4", "order.paid", r#"{"n":4}"#),
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
            None
        ]
    );
    let reason = &results[1].as_ref().expect_err("event type").message;
    assert!(reason.contains("`Order.*`"), "{reason}");
    // A re-send of event 1 (a reclaim, say) succeeds and JetStream drops it as a duplicate.
    publisher.publish(&batch[0]).await.expect("re-send");
    let got = read(&mut consumer, 2).await;
    let ids: Vec<Option<i64>> = got.iter().map(|m| m.event_id).collect();
    assert_eq!(ids, [Some(1), Some(4)], "{got:?}");
    assert_eq!(got[0].subject, format!("{prefix}.OrderCreated"));
    assert_eq!(got[0].header("tenant"), Some("acme"));
    assert_eq!(got[0].msg_id.as_deref(), Some("1"));
    assert_eq!(got[1].biz_no.as_deref(), Some("order-4"));
    assert_eq!(got[1].event_type.as_deref(), Some("order.paid"));
    assert_eq!(got[1].subject, format!("{prefix}.order.paid"));
    publisher.shutdown().await;
    consumer.delete_stream().await.expect("delete the stream");
}

#[tokio::test]
async fn a_stream_of_some_of_the_subjects_counts() {
    let Some(url) = server().await else { return };
    let prefix = unique("partial");
    let client = async_nats::connect(url.as_str()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: prefix.clone(),
        subjects: vec![format!("{prefix}.OrderCreated")],
        ..Default::default()
    })
    .await
    .expect("create the stream");
    let started = NatsPublisher::start(NatsConfig::new(&url).subject_prefix(&prefix)).await;
    js.delete_stream(&prefix).await.expect("delete the stream");
    let publisher = started.expect("a stream of one event type's subject is enough");
    assert_eq!(publisher.stream(), prefix);
    // With the stream gone, a publish finds no stream: a configuration error, never a dead
    // letter by its retries running out.
    let e = publisher
        .publish(&OutboxMessage::new(1, "order-1", "OrderCreated", "{}"))
        .await
        .expect_err("no stream");
    assert_eq!(e.kind, PublishErrorKind::Configuration, "{}", e.message);
    publisher.shutdown().await;
}
