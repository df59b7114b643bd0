//! The broker the demo and the bench publish to, chosen by `OUTBOX_PUBLISHER`
//! (`rocketmq`, `kafka`, `nats`, `rabbitmq`, `redis`; unset: RocketMQ when `ROCKETMQ_NAMESRV_ADDR` is set, else none), each
//! configured from its own crate's variables, with a consumer of that broker that reads back
//! what arrived.
use std::sync::Arc;
use std::time::Duration;

use sea_orm_outbox::{OutboxError, Publisher};
use sea_orm_outbox_kafka::{KafkaConfig, KafkaConsumer, KafkaPublisher};
use sea_orm_outbox_nats::{NatsConfig, NatsConsumer, NatsPublisher};
use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqConsumer, RabbitMqPublisher};
use sea_orm_outbox_redis::{RedisConfig, RedisPublisher, RedisStreamConsumer};
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqConsumer, RocketMqPublisher};

/// The variable that names the broker.
pub const ENV_PUBLISHER: &str = "OUTBOX_PUBLISHER";

/// The brokers `OUTBOX_PUBLISHER` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RocketMq,
    Kafka,
    Nats,
    RabbitMq,
    Redis,
}

impl Kind {
    /// The broker `OUTBOX_PUBLISHER` names; unset or empty: RocketMQ when
    /// `ROCKETMQ_NAMESRV_ADDR` is set, else `None`.
    pub fn from_env() -> Result<Option<Kind>, OutboxError> {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        match std::env::var(ENV_PUBLISHER).unwrap_or_default().trim() {
            "" if set("ROCKETMQ_NAMESRV_ADDR") => Ok(Some(Kind::RocketMq)),
            "" => Ok(None),
            name => Kind::parse(name).map(Some),
        }
    }

    /// The broker called `name` (`rocketmq`, `nats`, `rabbitmq`, `redis`).
    pub fn parse(name: &str) -> Result<Kind, OutboxError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "rocketmq" => Ok(Kind::RocketMq),
            "kafka" => Ok(Kind::Kafka),
            "nats" => Ok(Kind::Nats),
            "rabbitmq" => Ok(Kind::RabbitMq),
            "redis" => Ok(Kind::Redis),
            other => Err(OutboxError::InvalidConfig(format!(
                "{ENV_PUBLISHER}={other}: expected rocketmq, kafka, nats, rabbitmq or redis"
            ))),
        }
    }

    /// The name `OUTBOX_PUBLISHER` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::RocketMq => "rocketmq",
            Kind::Kafka => "kafka",
            Kind::Nats => "nats",
            Kind::RabbitMq => "rabbitmq",
            Kind::Redis => "redis",
        }
    }
}

/// One message as the consumer read it: the event id and the business key it carried.
pub struct Arrival {
    pub event_id: Option<i64>,
    pub key: Option<String>,
}

/// A started publisher, kept typed so that it can be shut down.
enum Sender {
    RocketMq(Arc<RocketMqPublisher>),
    Kafka(Arc<KafkaPublisher>),
    Nats(Arc<NatsPublisher>),
    RabbitMq(Arc<RabbitMqPublisher>),
    Redis(Arc<RedisPublisher>),
}

/// A started consumer.
enum Reader {
    RocketMq(RocketMqConsumer),
    Kafka(Box<KafkaConsumer>),
    Nats(Box<NatsConsumer>),
    RabbitMq(RabbitMqConsumer),
    Redis(RedisStreamConsumer),
}

/// A publisher and a consumer of one broker, both started before any relay sends, so that the
/// consumer reads everything the publisher sends.
pub struct Link {
    pub kind: Kind,
    sender: Sender,
    reader: Reader,
}

impl Link {
    /// Starts `kind`'s publisher and consumer (NATS's consumer first: it creates the stream the
    /// publisher's start looks for) from the broker's variables, with the
    /// send timeout `send_timeout`. `dest`, when given, replaces the destination the variables
    /// name: RocketMQ's topic, NATS's subject prefix (its stream is `<dest>` upper-cased),
    /// RabbitMQ's exchange, Redis's stream prefix, Kafka's topic prefix (the consumer creates
    /// the topic of `event_type` with 3 partitions when it does not exist).
    pub async fn start(
        kind: Kind,
        send_timeout: Duration,
        dest: Option<&str>,
        event_type: &str,
    ) -> Result<Link, OutboxError> {
        let (sender, reader) = match kind {
            Kind::RocketMq => {
                let mut config = RocketMqConfig::from_env()?.send_timeout(send_timeout);
                if let Some(topic) = dest {
                    config = config.topic(topic);
                }
                let group = format!(
                    "outbox_demo_{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..8]
                );
                let consumer = RocketMqConsumer::start_with_credentials(
                    &config.namesrv_addr,
                    &group,
                    &config.topic,
                    config.credentials.clone(),
                )
                .await?;
                let publisher = RocketMqPublisher::start(config).await?;
                (
                    Sender::RocketMq(Arc::new(publisher)),
                    Reader::RocketMq(consumer),
                )
            }
            Kind::Kafka => {
                let mut config = KafkaConfig::from_env()?.send_timeout(send_timeout);
                if let Some(prefix) = dest {
                    config = config.topic_prefix(prefix);
                }
                let consumer = KafkaConsumer::start(&config, &[event_type], 3).await?;
                let publisher = KafkaPublisher::start(config).await?;
                (
                    Sender::Kafka(Arc::new(publisher)),
                    Reader::Kafka(Box::new(consumer)),
                )
            }
            Kind::Nats => {
                let mut config = NatsConfig::from_env()?.send_timeout(send_timeout);
                if let Some(prefix) = dest {
                    config = config.subject_prefix(prefix);
                }
                let stream = config.subject_prefix.to_uppercase();
                let consumer = NatsConsumer::start(&config, &stream).await?;
                let publisher = NatsPublisher::start(config).await?;
                (
                    Sender::Nats(Arc::new(publisher)),
                    Reader::Nats(Box::new(consumer)),
                )
            }
            Kind::RabbitMq => {
                let mut config = RabbitMqConfig::from_env()?.send_timeout(send_timeout);
                if let Some(exchange) = dest {
                    config = config.exchange(exchange);
                }
                // The publisher first: its start names the setting of a refused login.
                let publisher = RabbitMqPublisher::start(config.clone()).await?;
                let consumer = match RabbitMqConsumer::start(&config, "#").await {
                    Ok(consumer) => consumer,
                    Err(e) => {
                        publisher.shutdown().await;
                        return Err(e);
                    }
                };
                (
                    Sender::RabbitMq(Arc::new(publisher)),
                    Reader::RabbitMq(consumer),
                )
            }
            Kind::Redis => {
                let mut config = RedisConfig::from_env()?.send_timeout(send_timeout);
                if let Some(prefix) = dest {
                    config = config.stream_prefix(prefix);
                }
                // The publisher first: its start names the setting of a refused login.
                let publisher = RedisPublisher::start(config.clone()).await?;
                let consumer = RedisStreamConsumer::start(&config).await?;
                (Sender::Redis(Arc::new(publisher)), Reader::Redis(consumer))
            }
        };
        Ok(Link {
            kind,
            sender,
            reader,
        })
    }

    /// The publisher, for the relays.
    pub fn publisher(&self) -> Arc<dyn Publisher> {
        match &self.sender {
            Sender::RocketMq(p) => p.clone(),
            Sender::Kafka(p) => p.clone(),
            Sender::Nats(p) => p.clone(),
            Sender::RabbitMq(p) => p.clone(),
            Sender::Redis(p) => p.clone(),
        }
    }

    /// What arrived since the last call, waiting up to `wait` for the first message.
    pub async fn poll(&mut self, wait: Duration) -> Result<Vec<Arrival>, OutboxError> {
        Ok(match &mut self.reader {
            Reader::RocketMq(c) => c
                .poll(wait)
                .await
                .into_iter()
                .map(|m| Arrival {
                    event_id: m.event_id,
                    key: m.keys,
                })
                .collect(),
            Reader::Kafka(c) => c
                .poll(wait)
                .await
                .into_iter()
                .map(|m| Arrival {
                    event_id: m.event_id,
                    key: m.key,
                })
                .collect(),
            Reader::Nats(c) => c
                .poll(wait)
                .await
                .into_iter()
                .map(|m| Arrival {
                    event_id: m.event_id,
                    key: m.biz_no,
                })
                .collect(),
            Reader::RabbitMq(c) => c
                .poll(wait)
                .await
                .into_iter()
                .map(|m| Arrival {
                    event_id: m.event_id,
                    key: Some(m.biz_no),
                })
                .collect(),
            Reader::Redis(c) => c
                .poll(wait)
                .await?
                .into_iter()
                .map(|e| Arrival {
                    event_id: e.event_id,
                    key: Some(e.biz_no),
                })
                .collect(),
        })
    }

    /// Stops the consumer and the publisher (once the relays have let go of it).
    pub async fn shutdown(self) {
        match self.reader {
            Reader::RocketMq(c) => c.shutdown().await,
            Reader::Nats(c) => c.shutdown().await,
            Reader::RabbitMq(c) => c.close(false).await,
            Reader::Kafka(_) | Reader::Redis(_) => {}
        }
        match self.sender {
            Sender::RocketMq(p) => {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.shutdown().await;
                }
            }
            Sender::Kafka(p) => {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.shutdown().await;
                }
            }
            Sender::Nats(p) => {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.shutdown().await;
                }
            }
            Sender::RabbitMq(p) => {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.shutdown().await;
                }
            }
            Sender::Redis(p) => {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.shutdown().await;
                }
            }
        }
    }
}
