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

use sea_orm_outbox::{RetryPolicy, WorkerConfig, WorkerSummary};
use sea_orm_outbox_rocketmq::{ReceivedMessage, RocketMqConsumer};
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};

use crate::common::Fleet;

pub mod cluster;

/// The shared broker's default name server.
pub const DEFAULT_NAMESRV_ADDR: &str = "127.0.0.1:9876";

/// The name server of the shared broker: `ROCKETMQ_NAMESRV_ADDR`, else [`DEFAULT_NAMESRV_ADDR`].
pub fn namesrv_addr() -> String {
    std::env::var("ROCKETMQ_NAMESRV_ADDR")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESRV_ADDR.to_owned())
}

/// Whether this runs under CI (`CI=true`), where a missing broker fails the tests.
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

/// Worker settings for the broker suites: short poll, lease 30 s, worker send timeout 5 s,
/// the run's completion ([`crate::common::completion`]).
pub fn worker_config(owner: &str, retry: RetryPolicy) -> WorkerConfig {
    WorkerConfig::default()
        .completion(crate::common::completion())
        .poll_delay(Duration::from_millis(50))
        .lease(Duration::from_secs(30))
        .send_timeout(Duration::from_secs(5))
        .batch_size(50)
        .retry(retry)
        .instance_id(owner)
}

// Not every suite counts rows.
#[allow(unused_imports)]
pub use crate::common::count;

/// What a consumer got, indexed by event id.
#[derive(Debug, Default)]
pub struct Received {
    /// Every message, in the order received.
    pub all: Vec<ReceivedMessage>,
}

impl Received {
    /// The messages received per event id.
    pub fn by_event(&self) -> HashMap<i64, Vec<&ReceivedMessage>> {
        let mut map: HashMap<i64, Vec<&ReceivedMessage>> = HashMap::new();
        for m in &self.all {
            if let Some(id) = m.event_id {
                map.entry(id).or_default().push(m);
            }
        }
        map
    }
    /// The event ids received.
    pub fn distinct(&self) -> HashSet<i64> {
        self.all.iter().filter_map(|m| m.event_id).collect()
    }
    /// Messages beyond the first per event id.
    pub fn duplicates(&self) -> usize {
        self.all.len() - self.distinct().len()
    }
    /// Asserts that every event of `expected` arrived, naming up to ten that did not.
    pub fn assert_all_arrived(&self, expected: &HashSet<i64>) {
        let got = self.distinct();
        let missing: Vec<_> = expected.difference(&got).take(10).collect();
        assert!(
            missing.is_empty(),
            "{} of {} events never arrived, e.g. {missing:?}",
            expected.difference(&got).count(),
            expected.len()
        );
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

/// A consumer and a publisher on a topic of their own.
pub struct Clients {
    /// The consumer, in a group of its own.
    pub consumer: RocketMqConsumer,
    /// The publisher, with a producer group of its own.
    pub publisher: Arc<RocketMqPublisher>,
}

impl Clients {
    /// A consumer and then a publisher (send timeout `send_timeout`) on the topic
    /// `<prefix>_<random>` at the name server `addr`.
    pub async fn start(addr: &str, prefix: &str, send_timeout: Duration) -> Self {
        let topic = unique(prefix);
        let consumer = consumer(addr, &topic).await;
        Clients {
            consumer,
            publisher: publisher(addr, &topic, send_timeout).await,
        }
    }

    /// A consumer on `topic` and a publisher started with `config` (which should name the
    /// same topic), at the name server `addr`.
    pub async fn start_with(addr: &str, topic: &str, config: RocketMqConfig) -> Self {
        let consumer = consumer(addr, topic).await;
        let publisher = RocketMqPublisher::start(config)
            .await
            .expect("publisher starts");
        Clients {
            consumer,
            publisher: Arc::new(publisher),
        }
    }

    /// [`receive_all`] (`expected` within 120 s, then 3 s more for late duplicates), then
    /// stops `fleet` and shuts both clients down: what arrived and the workers' summaries.
    pub async fn receive_and_stop(
        self,
        fleet: Fleet,
        expected: &HashSet<i64>,
    ) -> (Received, Vec<WorkerSummary>) {
        let (deadline, linger) = (Duration::from_secs(120), Duration::from_secs(3));
        let received = receive_all(&self.consumer, expected, deadline, linger).await;
        let summaries = fleet.stop().await;
        self.shutdown().await;
        (received, summaries)
    }

    /// Shuts the consumer and the publisher down (see [`shutdown_publisher`]).
    pub async fn shutdown(self) {
        self.consumer.shutdown().await;
        shutdown_publisher(self.publisher).await;
    }
}

/// `scripts/rocketmq.sh` in this repository.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/rocketmq.sh")
}

/// Runs `f` on a fresh database of `backend` with the shared broker's name server, unless the
/// backend is not selected or no broker answers ([`broker_available`]: a failure under
/// `CI=true`).
pub async fn run_on<F>(backend: crate::common::Backend, name: &str, f: F)
where
    F: for<'a> AsyncFn(&'a crate::common::TestContext, &'a str),
{
    if !crate::common::selected(backend, name) {
        return;
    }
    let addr = namesrv_addr();
    if !broker_available(&addr, name).await {
        return;
    }
    let ctx = crate::common::TestContext::new(backend, name).await;
    f(&ctx, &addr).await;
    ctx.cleanup().await;
}
