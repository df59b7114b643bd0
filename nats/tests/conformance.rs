//! The conformance suite of sea-orm-outbox on a real NATS server with JetStream: the server at
//! `NATS_URL` (default `nats://127.0.0.1:4222`), and for the wrong-credentials case a private
//! `nats-server` with a user and password that the test starts on a loopback port below 32768
//! and kills at the end (`NATS_SERVER_BIN`, default `nats-server` on the `PATH`, else
//! `/usr/sbin/nats-server`).
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;
use sea_orm_outbox_conformance::{
    server_bin, Broker, Consumer, Received, Server, WrongCredentials,
};
use sea_orm_outbox_nats::{
    Credentials, NatsConfig, NatsConsumer, NatsPublisher, DEFAULT_URL, ENV_PASSWORD, ENV_URL,
};

struct Nats {
    url: String,
}

#[async_trait]
impl Broker for Nats {
    const NAME: &'static str = "nats";

    fn from_env() -> Self {
        let url = std::env::var(ENV_URL)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        Nats { url }
    }

    fn addr(&self) -> String {
        let url = self.url.trim();
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        rest.rsplit_once('@')
            .map_or(rest, |(_, host)| host)
            .to_owned()
    }

    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String> {
        let config = NatsConfig::new(format!("nats://{addr}"))
            .subject_prefix(dest)
            .send_timeout(send_timeout);
        let publisher = NatsPublisher::start(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(publisher))
    }

    async fn consumer(&self, dest: &str) -> Box<dyn Consumer> {
        let config = NatsConfig::new(&self.url).subject_prefix(dest);
        let consumer = NatsConsumer::start(&config, dest)
            .await
            .expect("the consumer starts and creates its stream");
        Box::new(TestConsumer(Some(consumer)))
    }

    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials {
        let (server, port) = private_server("right-secret-4711").await;
        let secret = format!("wrong-secret-{}", std::process::id());
        let config = NatsConfig::new(format!("nats://127.0.0.1:{port}"))
            .subject_prefix(dest)
            .credentials(Credentials::user_password("outbox", secret.as_str()));
        let error = NatsPublisher::start(config)
            .await
            .err()
            .map(|e| e.to_string());
        server.stop().await;
        WrongCredentials {
            error,
            setting: ENV_PASSWORD.to_owned(),
            secret,
        }
    }

    fn oversized_payload_bytes(&self) -> usize {
        // Above the server's default max_payload of 1 MiB.
        1024 * 1024 * 3 / 2
    }
}

/// The suite's consumer: a [`NatsConsumer`] whose stream is deleted when the case drops it.
struct TestConsumer(Option<NatsConsumer>);

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
                key: m.biz_no.clone().unwrap_or_default(),
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
        // The suite's runtime has worker threads: block one of them for the deletion.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            tokio::task::block_in_place(|| {
                handle.block_on(async {
                    let stream = consumer.stream().to_owned();
                    match tokio::time::timeout(Duration::from_secs(10), consumer.delete_stream())
                        .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => eprintln!("stream {stream} not deleted: {e}"),
                        Err(_) => eprintln!("stream {stream} not deleted: no answer in 10 s"),
                    }
                })
            });
        }
    }
}

/// A `nats-server` with user `outbox` and `password` on a loopback port below 32768, and its
/// port; killed by [`Server::stop`] (or when dropped).
///
/// # Panics
/// When the `nats-server` binary (`NATS_SERVER_BIN`, else on the `PATH`, else
/// `/usr/sbin/nats-server`) is missing or the server does not come up in 10 s.
async fn private_server(password: &str) -> (Server, u16) {
    let bin = server_bin("NATS_SERVER_BIN", "nats-server", "/usr/sbin/nats-server");
    let port = sea_orm_outbox_conformance::free_port().await;
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(["--user", "outbox", "--pass", password]);
    let server = Server::spawn(command, port, Duration::from_secs(10), "NATS_SERVER_BIN").await;
    (server, port)
}

sea_orm_outbox_conformance::suite!(crate::Nats);
