//! Helpers for the suites that run against a real RocketMQ broker.
//!
//! The name server address comes from `ROCKETMQ_NAMESRV_ADDR` (default `127.0.0.1:9876`; start
//! one with `scripts/rocketmq.sh start`). When nothing answers there the tests FAIL under
//! `CI=true` and are skipped with a message otherwise.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sea_orm_outbox::publisher::{ReceivedMessage, RocketMqConsumer};
use sea_orm_outbox::{RetryPolicy, RocketMqConfig, RocketMqPublisher, WorkerConfig};

pub const DEFAULT_NAMESRV_ADDR: &str = "127.0.0.1:9876";

pub fn namesrv_addr() -> String {
    std::env::var("ROCKETMQ_NAMESRV_ADDR")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESRV_ADDR.to_owned())
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether a name server answers at `addr`. Panics under CI when none does.
pub async fn broker_available(addr: &str, test: &str) -> bool {
    let first = addr.split(';').next().unwrap_or(addr).trim().to_owned();
    let up = matches!(
        tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(&first)
        )
        .await,
        Ok(Ok(_))
    );
    if !up {
        let msg = format!(
            "{test}: no RocketMQ name server at {addr} (start one with `scripts/rocketmq.sh start` \
             or set ROCKETMQ_NAMESRV_ADDR)"
        );
        if in_ci() {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    up
}

/// `prefix` plus a random suffix: topics and groups must be unique per test.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// A publisher on `topic` with its own producer group and send timeout `send_timeout`.
pub async fn publisher(addr: &str, topic: &str, send_timeout: Duration) -> Arc<RocketMqPublisher> {
    let config = RocketMqConfig::new(addr)
        .topic(topic)
        .producer_group(unique("outbox_test_pg"))
        .send_timeout(send_timeout);
    Arc::new(
        RocketMqPublisher::start(config)
            .await
            .expect("publisher starts"),
    )
}

/// A consumer on `topic` in its own group.
pub async fn consumer(addr: &str, topic: &str) -> RocketMqConsumer {
    RocketMqConsumer::start(addr, &unique("outbox_test_cg"), topic)
        .await
        .expect("consumer starts")
}

/// Stops a publisher shared through `Arc` once every other holder has dropped it.
pub async fn shutdown_publisher(p: Arc<RocketMqPublisher>) {
    match Arc::try_unwrap(p) {
        Ok(p) => p.shutdown().await,
        Err(_) => panic!("publisher still shared at shutdown"),
    }
}

/// Worker settings for the broker suites: short poll, lease 30 s, worker send timeout 5 s.
pub fn worker_config(owner: &str, retry: RetryPolicy) -> WorkerConfig {
    WorkerConfig::default()
        .poll_delay(Duration::from_millis(50))
        .reclaim_interval(Duration::from_secs(1))
        .lease(Duration::from_secs(30))
        .send_timeout(Duration::from_secs(5))
        .batch_size(50)
        .retry(retry)
        .instance_id(owner)
}

pub use crate::common::count;

/// What a consumer got, indexed by event id.
#[derive(Debug, Default)]
pub struct Received {
    pub all: Vec<ReceivedMessage>,
}

impl Received {
    pub fn by_event(&self) -> HashMap<i64, Vec<&ReceivedMessage>> {
        let mut map: HashMap<i64, Vec<&ReceivedMessage>> = HashMap::new();
        for m in &self.all {
            if let Some(id) = m.event_id {
                map.entry(id).or_default().push(m);
            }
        }
        map
    }
    pub fn distinct(&self) -> HashSet<i64> {
        self.all.iter().filter_map(|m| m.event_id).collect()
    }
    pub fn duplicates(&self) -> usize {
        self.all.len() - self.distinct().len()
    }
}

/// Polls `consumer` until every id in `expected` arrived (or `deadline`), then keeps polling for
/// `linger` to catch late duplicates.
pub async fn receive_all(
    consumer: &RocketMqConsumer,
    expected: &HashSet<i64>,
    deadline: Duration,
    linger: Duration,
) -> Received {
    let mut all = consumer
        .collect_until(deadline, |got| {
            let ids: HashSet<i64> = got.iter().filter_map(|m| m.event_id).collect();
            expected.is_subset(&ids)
        })
        .await;
    all.extend(consumer.collect_until(linger, |_| false).await);
    Received { all }
}

/// `scripts/rocketmq.sh` in this repository.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/rocketmq.sh")
}
