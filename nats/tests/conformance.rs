//! The conformance suite of sea-orm-outbox on a real NATS server with JetStream: the server at
//! `NATS_URL` (default `nats://127.0.0.1:4222`), and for the wrong-credentials case a private
//! `nats-server` with a user and password that the test starts on a loopback port below 32768
//! and kills at the end (`NATS_SERVER_BIN`, default `nats-server` on the `PATH`, else
//! `/usr/sbin/nats-server`).
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;
use sea_orm_outbox_conformance::{Broker, Consumer, Received, WrongCredentials};
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
        let server = PrivateServer::start("right-secret-4711").await;
        let secret = format!("wrong-secret-{}", std::process::id());
        let config = NatsConfig::new(format!("nats://127.0.0.1:{}", server.port))
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

/// A `nats-server` with user `outbox` and a password, on a loopback port below 32768, killed
/// by [`PrivateServer::stop`] (or when dropped).
struct PrivateServer {
    child: tokio::process::Child,
    port: u16,
}

impl PrivateServer {
    /// Starts the server and waits until it accepts connections.
    ///
    /// # Panics
    /// When the `nats-server` binary is missing or the server does not come up in 10 s.
    async fn start(password: &str) -> PrivateServer {
        let bin = server_bin();
        let port = sea_orm_outbox_conformance::free_port().await;
        let child = tokio::process::Command::new(&bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["--user", "outbox", "--pass", password])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (set NATS_SERVER_BIN): {e}"));
        let server = PrivateServer { child, port };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{bin} on port {port} did not accept connections within 10 s");
    }

    /// Kills the server and waits for it.
    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The `nats-server` binary: `NATS_SERVER_BIN`, else `nats-server` on the `PATH`, else
/// `/usr/sbin/nats-server`.
fn server_bin() -> String {
    if let Some(bin) = std::env::var("NATS_SERVER_BIN")
        .ok()
        .filter(|b| !b.is_empty())
    {
        return bin;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.map_or_else(
        || "/usr/sbin/nats-server".to_owned(),
        |p| p.display().to_string(),
    )
}

sea_orm_outbox_conformance::suite!(crate::Nats);
