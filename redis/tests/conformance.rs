//! The conformance suite of sea-orm-outbox against the Redis server of `REDIS_URL` (default
//! `redis://127.0.0.1:6379`).
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;
use sea_orm_outbox_conformance::{Broker, Consumer, Received, WrongCredentials};
use sea_orm_outbox_redis::{
    RedisConfig, RedisPublisher, RedisStreamConsumer, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_URL,
    ENV_PASSWORD, ENV_URL,
};

/// The Redis server of the run.
struct Redis {
    url: url::Url,
}

impl Redis {
    /// The configuration for the server at `addr` (`host:port`) and streams `<dest>:*`, with
    /// the base URL's credentials and database.
    fn config(&self, addr: &str, dest: &str) -> RedisConfig {
        let mut url = self.url.clone();
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        url.set_host(Some(host)).expect("host");
        url.set_port(Some(port.parse().expect("port")))
            .expect("port");
        RedisConfig::new(url.to_string()).stream_prefix(dest)
    }

    /// A synchronous connection to the server (for set-up and clean-up).
    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .expect("REDIS_URL")
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("Redis answers")
    }
}

#[async_trait]
impl Broker for Redis {
    const NAME: &'static str = "redis";

    fn from_env() -> Self {
        let url = std::env::var(ENV_URL).unwrap_or_else(|_| DEFAULT_URL.to_owned());
        Redis {
            url: url::Url::parse(&url).expect("REDIS_URL is a URL"),
        }
    }

    fn addr(&self) -> String {
        format!(
            "{}:{}",
            self.url.host_str().expect("REDIS_URL has a host"),
            self.url.port().unwrap_or(6379)
        )
    }

    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String> {
        let config = self.config(addr, dest).send_timeout(send_timeout);
        let publisher = RedisPublisher::start(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(publisher))
    }

    async fn consumer(&self, dest: &str) -> Box<dyn Consumer> {
        let config = self.config(&self.addr(), dest);
        let consumer = RedisStreamConsumer::start(&config)
            .await
            .expect("consumer starts");
        Box::new(StreamsConsumer {
            consumer,
            connection: self.connection(),
        })
    }

    /// An ACL user made for the attempt (deleted afterwards), with a wrong password.
    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let user = format!("outbox_test_{suffix}");
        let secret = format!("wrong-secret-{suffix}");
        let mut admin = self.connection();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("on")
            .arg(format!(">right-secret-{suffix}"))
            .arg("~*")
            .arg("+@all")
            .query(&mut admin)
            .expect("ACL SETUSER");
        let config = self
            .config(&self.addr(), dest)
            .username(&user)
            .password(secret.as_str());
        let error = RedisPublisher::start(config)
            .await
            .err()
            .map(|e| e.to_string());
        let _: i64 = redis::cmd("ACL")
            .arg("DELUSER")
            .arg(&user)
            .query(&mut admin)
            .expect("ACL DELUSER");
        WrongCredentials {
            error,
            setting: ENV_PASSWORD.to_owned(),
            secret,
        }
    }

    /// The kit's publisher keeps the default limit of 1 MiB.
    fn oversized_payload_bytes(&self) -> usize {
        DEFAULT_MAX_MESSAGE_BYTES + 1024
    }
}

/// The kit's consumer: the crate's consumer, and a connection that deletes the streams it
/// read when the case ends.
struct StreamsConsumer {
    consumer: RedisStreamConsumer,
    connection: redis::Connection,
}

#[async_trait]
impl Consumer for StreamsConsumer {
    async fn poll(&mut self, wait: Duration) -> Vec<Received> {
        self.consumer
            .poll(wait)
            .await
            .expect("XREAD")
            .into_iter()
            .map(|e| Received {
                event_id: e.event_id.expect("eventId field"),
                event_type: e.event_type,
                key: e.biz_no,
                headers: e.headers,
                payload: e.payload,
            })
            .collect()
    }
}

impl Drop for StreamsConsumer {
    fn drop(&mut self) {
        let keys: Vec<&str> = self.consumer.streams().collect();
        if !keys.is_empty() {
            let _ = redis::cmd("DEL")
                .arg(keys)
                .query::<i64>(&mut self.connection);
        }
    }
}

sea_orm_outbox_conformance::suite!(crate::Redis);
