//! The conformance suite of sea-orm-outbox against the RabbitMQ server at `RABBITMQ_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`): each case publishes to a topic exchange
//! of its own, which its consumer (an exclusive queue bound with `#`) declares first and
//! deletes at the end.
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;
use sea_orm_outbox_conformance::{Broker, Consumer, Received, WrongCredentials};
use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqConsumer, RabbitMqPublisher, ENV_PASSWORD};

/// The suite's publishers refuse bodies above 64 KiB, so that its oversized event stays well
/// below the outbox's 4 MiB limit.
const SUITE_MAX_MESSAGE_BYTES: usize = 64 * 1024;

struct RabbitMq {
    config: RabbitMqConfig,
}

impl RabbitMq {
    /// The configuration with the server's address replaced by `addr` (`host:port`).
    fn at(&self, addr: &str) -> RabbitMqConfig {
        let mut url = url::Url::parse(&self.config.url).expect("RABBITMQ_URL parses");
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        url.set_host(Some(host)).expect("host");
        url.set_port(Some(port.parse().expect("port")))
            .expect("port");
        self.config.clone().url(url)
    }
}

#[async_trait]
impl Broker for RabbitMq {
    const NAME: &'static str = "rabbitmq";

    fn from_env() -> Self {
        RabbitMq {
            config: RabbitMqConfig::from_env().expect("RabbitMQ settings"),
        }
    }

    fn addr(&self) -> String {
        let url = url::Url::parse(&self.config.url).expect("RABBITMQ_URL parses");
        let port = url.port_or_known_default().unwrap_or(5672);
        format!("{}:{port}", url.host_str().unwrap_or("127.0.0.1"))
    }

    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String> {
        let config = self
            .at(addr)
            .exchange(dest)
            .send_timeout(send_timeout)
            .max_message_bytes(SUITE_MAX_MESSAGE_BYTES);
        let publisher = RabbitMqPublisher::start(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(publisher))
    }

    async fn consumer(&self, dest: &str) -> Box<dyn Consumer> {
        let config = self.config.clone().exchange(dest);
        let consumer = RabbitMqConsumer::start(&config, "#")
            .await
            .expect("the consumer starts");
        Box::new(SuiteConsumer(Some(consumer)))
    }

    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials {
        let secret = "not-the-password-5c1f9e".to_owned();
        let user = url::Url::parse(&self.config.url)
            .ok()
            .map(|u| u.username().to_owned())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "guest".into());
        let config = self
            .config
            .clone()
            .exchange(dest)
            .credentials(user, secret.as_str());
        let error = RabbitMqPublisher::start(config)
            .await
            .err()
            .map(|e| e.to_string());
        WrongCredentials {
            error,
            setting: ENV_PASSWORD.into(),
            secret,
        }
    }

    fn oversized_payload_bytes(&self) -> usize {
        SUITE_MAX_MESSAGE_BYTES + 1024
    }
}

/// The suite's consumer: deletes its exchange when dropped.
struct SuiteConsumer(Option<RabbitMqConsumer>);

#[async_trait]
impl Consumer for SuiteConsumer {
    async fn poll(&mut self, wait: Duration) -> Vec<Received> {
        let Some(consumer) = self.0.as_mut() else {
            return Vec::new();
        };
        consumer
            .poll(wait)
            .await
            .into_iter()
            .map(|m| Received {
                event_id: m.event_id.expect("the message carries its event id"),
                event_type: m.event_type,
                key: m.biz_no,
                headers: m.headers,
                payload: m.payload,
            })
            .collect()
    }
}

impl Drop for SuiteConsumer {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(consumer.close(true));
            }
        }
    }
}

// The macro's test modules name the type from inside themselves: give its path.
sea_orm_outbox_conformance::suite!(crate::RabbitMq);
