//! The conformance suite of sea-orm-outbox on a real RocketMQ broker: the name server at
//! `ROCKETMQ_NAMESRV_ADDR` (default `127.0.0.1:9876`, the broker `scripts/rocketmq.sh start`
//! runs). Two cases start private instances with `scripts/rocketmq.sh` (own state directory
//! in the temp dir, own ports from a block in 27000-31319, see `rmq_support::cluster`), each
//! stopped and removed when the case drops it:
//! - the outage case: a name server and broker whose broker the switch kills (SIGKILL) and
//!   starts again (RocketMQ clients learn the broker's address from the name server, so a proxy
//!   in front of the name server would not take the broker away);
//! - the wrong-credentials case: a broker with authentication (`ROCKETMQ_AUTH_USER`).
//!
//! They need the `rocketmq-namesrv-rust` / `rocketmq-broker-rust` binaries that the script
//! installs.
// The rocketmq-rust client's futures are deep (as in the crate itself).
#![recursion_limit = "512"]
#[path = "../../tests/common/mod.rs"]
mod common;
mod rmq_support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmq_support::cluster::{Ports, PrivateCluster};
use rmq_support::{namesrv_addr, unique};
use sea_orm_outbox::{OutboxMessage, PublishError, Publisher};
use sea_orm_outbox_conformance::{Broker, Consumer, Outage, Received, Switch, WrongCredentials};
use sea_orm_outbox_rocketmq::{
    ReceivedMessage, RocketMqConfig, RocketMqConsumer, RocketMqPublisher, DEFAULT_MAX_BATCH_BYTES,
    ENV_SECRET_KEY,
};

/// The publishers' largest message body in this suite, in bytes: 1 MiB (the default batch
/// size, which may not exceed it), so that a payload below the outbox's 4 MiB limit is one the
/// publisher refuses for good.
const MAX_MESSAGE_BYTES: u32 = DEFAULT_MAX_BATCH_BYTES;

/// The user of the authenticating broker.
const AUTH_USER: &str = "outbox-conformance";

struct RocketMq {
    /// The name server address(es), `;`-separated.
    namesrv: String,
}

#[async_trait]
impl Broker for RocketMq {
    const NAME: &'static str = "rocketmq";

    fn from_env() -> Self {
        RocketMq {
            namesrv: namesrv_addr(),
        }
    }

    /// The first name server.
    fn addr(&self) -> String {
        let first = self.namesrv.split(';').next().unwrap_or(&self.namesrv);
        first.trim().to_owned()
    }

    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String> {
        let config = RocketMqConfig::new(addr)
            .topic(dest)
            .producer_group(unique("outbox_conf_pg"))
            .send_timeout(send_timeout)
            .max_message_bytes(MAX_MESSAGE_BYTES);
        let publisher = RocketMqPublisher::start(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(TestPublisher(Some(publisher))))
    }

    async fn consumer(&self, dest: &str) -> Box<dyn Consumer> {
        Box::new(TestConsumer::start(&self.namesrv, dest).await)
    }

    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials {
        let right = format!("Right-{}", uuid::Uuid::new_v4().simple());
        let cluster = ClusterGuard::start(
            "outbox-rocketmq-conf-auth",
            Some(format!("{AUTH_USER}:{right}")),
        )
        .await;
        let secret = format!("Wrong-{}", uuid::Uuid::new_v4().simple());
        let config = RocketMqConfig::new(cluster.addr())
            .topic(dest)
            .producer_group(unique("outbox_conf_auth_pg"))
            .credentials(AUTH_USER, secret.as_str());
        let error = match RocketMqPublisher::start(config).await {
            Ok(publisher) => {
                publisher.shutdown().await;
                None
            }
            Err(e) => Some(e.to_string()),
        };
        WrongCredentials {
            error,
            setting: ENV_SECRET_KEY.to_owned(),
            secret,
        }
    }

    async fn outage(&self, dest: &str) -> Outage {
        let cluster = ClusterGuard::start("outbox-rocketmq-conf-outage", None).await;
        let addr = cluster.addr();
        Outage {
            consumer: Box::new(TestConsumer::start(&addr, dest).await),
            addr,
            switch: Box::new(cluster),
        }
    }

    fn oversized_payload_bytes(&self) -> usize {
        // Above the publishers' MAX_MESSAGE_BYTES (1 MiB), below the outbox's 4 MiB.
        MAX_MESSAGE_BYTES as usize * 3 / 2
    }

    /// An ordered message goes to its key's queue, and the test consumer (a lite pull
    /// consumer) pulls each queue in offset order.
    fn keeps_key_order(&self) -> bool {
        true
    }
}

/// Blocks the current worker thread of the suite's (multi-thread) runtime on `future`; runs
/// nothing outside a runtime.
fn block_on_here(what: &str, future: impl std::future::Future<Output = ()>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        eprintln!("{what}: no runtime to run it on");
        return;
    };
    tokio::task::block_in_place(|| {
        handle.block_on(async {
            if tokio::time::timeout(Duration::from_secs(20), future)
                .await
                .is_err()
            {
                eprintln!("{what}: not done in 20 s");
            }
        })
    });
}

/// The suite's publisher: a [`RocketMqPublisher`] shut down when the last relay drops it
/// (its client runtime must be stopped, not dropped, inside the suite's runtime).
struct TestPublisher(Option<RocketMqPublisher>);

impl TestPublisher {
    fn inner(&self) -> &RocketMqPublisher {
        self.0.as_ref().expect("the publisher runs until dropped")
    }
}

#[async_trait]
impl Publisher for TestPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.inner().publish(message).await
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        self.inner().publish_batch(messages).await
    }

    fn batches(&self) -> bool {
        self.inner().batches()
    }
}

impl Drop for TestPublisher {
    fn drop(&mut self) {
        if let Some(publisher) = self.0.take() {
            block_on_here("publisher shutdown", publisher.shutdown());
        }
    }
}

/// The suite's consumer: a [`RocketMqConsumer`] in a group of its own, shut down when the case
/// drops it.
struct TestConsumer(Option<RocketMqConsumer>);

impl TestConsumer {
    /// Starts a consumer of `topic` (created when missing) at the name server(s) `namesrv`.
    async fn start(namesrv: &str, topic: &str) -> TestConsumer {
        let consumer = RocketMqConsumer::start(namesrv, &unique("outbox_conf_cg"), topic)
            .await
            .expect("the consumer starts and creates its topic");
        TestConsumer(Some(consumer))
    }
}

#[async_trait]
impl Consumer for TestConsumer {
    async fn poll(&mut self, wait: Duration) -> Vec<Received> {
        let Some(consumer) = self.0.as_ref() else {
            return Vec::new();
        };
        consumer
            .poll(wait)
            .await
            .into_iter()
            .map(received)
            .collect()
    }
}

/// What the suite reads of a message: the outbox's properties (`eventType`, `bizNo`; else the
/// tag and keys), every property as a header, the body.
fn received(m: ReceivedMessage) -> Received {
    let event_type = m.property("eventType").or(m.tag.as_deref());
    let key = m.property("bizNo").or(m.keys.as_deref());
    Received {
        event_id: m.event_id.unwrap_or(-1),
        event_type: event_type.unwrap_or_default().to_owned(),
        key: key.unwrap_or_default().to_owned(),
        headers: m.properties.into_iter().collect(),
        payload: m.body,
    }
}

impl Drop for TestConsumer {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take() {
            block_on_here("consumer shutdown", consumer.shutdown());
        }
    }
}

/// A private name server and broker of one case ([`PrivateCluster`] on a block of free
/// ports), stopped and its state removed when dropped. As the outage case's [`Switch`] it
/// kills the broker (SIGKILL: a crash) and starts it again.
struct ClusterGuard(Option<Arc<PrivateCluster>>);

impl ClusterGuard {
    /// Starts the cluster (a broker with authentication for `auth_user`, `user:secret`).
    ///
    /// # Panics
    /// When the binaries are missing or the cluster does not start.
    async fn start(label: &'static str, auth_user: Option<String>) -> ClusterGuard {
        let cluster = tokio::task::spawn_blocking(move || {
            let ports = Ports::free_block("outbox-conformance-broker");
            PrivateCluster::start_with_auth(label, ports, auth_user)
        })
        .await
        .expect("the private RocketMQ start ran");
        let cluster = cluster.expect(
            "rocketmq-namesrv-rust / rocketmq-broker-rust not installed: \
             `scripts/rocketmq.sh start` installs them",
        );
        ClusterGuard(Some(Arc::new(cluster)))
    }

    fn addr(&self) -> String {
        self.0.as_ref().map(|c| c.addr()).unwrap_or_default()
    }

    /// Runs `scripts/rocketmq.sh cmd` on the cluster, off the runtime's worker threads.
    async fn script(&self, cmd: &'static str) {
        let Some(cluster) = self.0.clone() else {
            return;
        };
        let ok = tokio::task::spawn_blocking(move || cluster.script(cmd))
            .await
            .expect("the script ran");
        assert!(
            ok,
            "scripts/rocketmq.sh {cmd} failed on the private RocketMQ"
        );
    }
}

#[async_trait]
impl Switch for ClusterGuard {
    async fn down(&self) {
        self.script("kill-broker").await;
    }

    async fn up(&self) {
        let started = tokio::time::Instant::now();
        self.script("start").await;
        eprintln!(
            "rocketmq outage: the broker's restart took {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if let Some(cluster) = self.0.take() {
            // Stopping runs the script and waits for the processes: not on a worker thread
            // that other tasks wait for.
            match tokio::runtime::Handle::try_current() {
                Ok(_) => tokio::task::block_in_place(|| drop(cluster)),
                Err(_) => drop(cluster),
            }
        }
    }
}

sea_orm_outbox_conformance::suite!(crate::RocketMq);
