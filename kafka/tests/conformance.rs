//! The conformance suite of sea-orm-outbox on a real Kafka-compatible broker: the one at
//! `KAFKA_BROKERS` (default `127.0.0.1:9092`, e.g. `scripts/tansu.sh start`), and for the
//! outage and wrong-credentials cases private Tansu brokers that the test starts on loopback
//! ports below 32768 and kills at the end (`TANSU_BIN`, default `tansu` on the `PATH`, else
//! `~/.cargo/bin/tansu`).
//!
//! Kafka clients connect to the address the broker advertises, so a proxy in front of the
//! shared broker would be bypassed: the outage case starts a private broker on port Q that
//! advertises a proxy's port P, and the proxy (to Q) is the switch.
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;
use sea_orm_outbox_conformance::{
    free_port, server_bin, Broker, Consumer, Outage, Proxy, Received, Server, Switch,
    WrongCredentials,
};
use sea_orm_outbox_kafka::{
    Credentials, KafkaConfig, KafkaConsumer, KafkaPublisher, SaslMechanism, DEFAULT_BROKERS,
    ENV_BROKERS, ENV_PASSWORD,
};

/// The event types the suite's cases write; the consumer creates their topics.
const EVENT_TYPES: &[&str] = &["OrderCreated", "OrderPaid", "OrderUpdated"];
/// Partitions of each topic the consumer creates.
const PARTITIONS: i32 = 3;

struct Kafka {
    brokers: String,
}

#[async_trait]
impl Broker for Kafka {
    const NAME: &'static str = "kafka";

    fn from_env() -> Self {
        let brokers = std::env::var(ENV_BROKERS)
            .ok()
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BROKERS.to_owned());
        Kafka { brokers }
    }

    fn addr(&self) -> String {
        let first = self.brokers.split(',').next().unwrap_or_default().trim();
        first
            .split_once("://")
            .map_or(first, |(_, rest)| rest)
            .to_owned()
    }

    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String> {
        let config = KafkaConfig::new(addr)
            .topic_prefix(dest)
            .send_timeout(send_timeout);
        let publisher = KafkaPublisher::start(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(publisher))
    }

    async fn consumer(&self, dest: &str) -> Box<dyn Consumer> {
        consumer(&self.brokers, dest, true).await
    }

    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials {
        let port = free_port().await;
        let server = private_tansu(port, port, true).await;
        let secret = format!("wrong-secret-{}", std::process::id());
        let config = KafkaConfig::new(format!("127.0.0.1:{port}"))
            .topic_prefix(dest)
            .credentials(
                Credentials::new("outbox", secret.as_str()).mechanism(SaslMechanism::ScramSha512),
            );
        let error = KafkaPublisher::start(config)
            .await
            .err()
            .map(|e| e.to_string());
        drop(server);
        WrongCredentials {
            error,
            setting: ENV_PASSWORD.to_owned(),
            secret,
        }
    }

    async fn outage(&self, dest: &str) -> Outage {
        let server_port = free_port().await;
        // Held while the proxy binds, which would otherwise take the same first free port.
        let reserved = std::net::TcpListener::bind(("127.0.0.1", server_port))
            .expect("the broker's port is free");
        let proxy = Proxy::start(&format!("127.0.0.1:{server_port}")).await;
        drop(reserved);
        let advertised: u16 = proxy
            .addr()
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("the proxy's port");
        let server = private_tansu(server_port, advertised, false).await;
        let addr = proxy.addr().to_owned();
        Outage {
            consumer: consumer(&addr, dest, false).await,
            addr,
            switch: Box::new(ProxiedServer {
                proxy,
                _server: server,
            }),
        }
    }

    fn oversized_payload_bytes(&self) -> usize {
        // Above the producer's default message.max.bytes of 1,000,000.
        1_500_000
    }
}

/// A consumer of `dest`'s topics on the brokers at `brokers`, which deletes them when dropped
/// when `delete` is set.
async fn consumer(brokers: &str, dest: &str, delete: bool) -> Box<dyn Consumer> {
    let config = KafkaConfig::new(brokers).topic_prefix(dest);
    let consumer = KafkaConsumer::start(&config, EVENT_TYPES, PARTITIONS)
        .await
        .expect("the consumer starts and creates its topics");
    Box::new(TestConsumer(Some(consumer), delete))
}

/// The outage case's switch: the proxy that the private broker advertises, and the broker,
/// killed when this is dropped.
struct ProxiedServer {
    proxy: Proxy,
    _server: Server,
}

#[async_trait]
impl Switch for ProxiedServer {
    async fn down(&self) {
        self.proxy.down();
    }
    async fn up(&self) {
        self.proxy.up();
    }
}

/// The suite's consumer: a [`KafkaConsumer`] whose topics are deleted when the case drops it
/// (on the shared broker).
struct TestConsumer(Option<KafkaConsumer>, bool);

#[async_trait]
impl Consumer for TestConsumer {
    async fn poll(&mut self, wait: Duration) -> Vec<Received> {
        let Some(consumer) = self.0.as_mut() else {
            return Vec::new();
        };
        consumer
            .poll(wait)
            .await
            .into_iter()
            .map(|m| Received {
                event_id: m.event_id.unwrap_or(-1),
                event_type: m.event_type.clone().unwrap_or_default(),
                key: m.key.clone().unwrap_or_default(),
                headers: m.headers.clone(),
                payload: m.payload,
            })
            .collect()
    }
}

impl Drop for TestConsumer {
    fn drop(&mut self) {
        let Some(consumer) = self.0.take() else {
            return;
        };
        if !self.1 {
            return;
        }
        // The suite's runtime has worker threads: block one of them for the deletion.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            tokio::task::block_in_place(|| {
                handle.block_on(async {
                    let topics = consumer.topics().join(", ");
                    match tokio::time::timeout(Duration::from_secs(10), consumer.delete_topics())
                        .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => eprintln!("topics {topics} not deleted: {e}"),
                        Err(_) => eprintln!("topics {topics} not deleted: no answer in 10 s"),
                    }
                })
            });
        }
    }
}

/// A Tansu broker with in-memory storage listening on loopback port `port` and advertising
/// port `advertised`, with SASL authentication required when asked; killed when dropped.
///
/// # Panics
/// When the `tansu` binary (`TANSU_BIN`, else on the `PATH`, else `~/.cargo/bin/tansu`) is
/// missing or the broker does not come up in 20 s.
async fn private_tansu(port: u16, advertised: u16, authentication: bool) -> Server {
    let home = std::env::var("HOME").unwrap_or_default();
    let bin = server_bin("TANSU_BIN", "tansu", &format!("{home}/.cargo/bin/tansu"));
    let mut command = tokio::process::Command::new(bin);
    command
        .arg("broker")
        .args(["--listener-url", &format!("tcp://127.0.0.1:{port}")])
        .args([
            "--advertised-listener-url",
            &format!("tcp://127.0.0.1:{advertised}"),
        ])
        .args(["--storage-engine", "memory://tansu/"]);
    if authentication {
        command.arg("--authentication");
    }
    Server::spawn(command, port, Duration::from_secs(20), "TANSU_BIN").await
}

sea_orm_outbox_conformance::suite!(crate::Kafka);
