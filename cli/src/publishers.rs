//! The broker `outbox relay` publishes to (`--publisher` / `OUTBOX_PUBLISHER`): its settings,
//! checked before anything connects, then its publisher, started and stopped. RocketMQ takes the
//! tool's `--rocketmq-*` / `--topic*` / `--producer-group` flags; Kafka, NATS, RabbitMQ and Redis read
//! their own crate's environment variables (see each crate's README).
use std::sync::Arc;

use sea_orm_outbox::{OutboxError, Publisher, WorkerConfig};
use sea_orm_outbox_kafka::{KafkaConfig, KafkaPublisher};
use sea_orm_outbox_nats::{NatsConfig, NatsPublisher};
use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqPublisher};
use sea_orm_outbox_redis::{RedisConfig, RedisPublisher};
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};

use crate::args::{PublisherKind, RelayArgs};

mod rocketmq;

/// A broker's checked settings, ready to start its publisher.
pub(crate) enum Settings {
    RocketMq(RocketMqConfig),
    Kafka(KafkaConfig),
    Nats(NatsConfig),
    RabbitMq(RabbitMqConfig),
    Redis(RedisConfig),
}

/// The started publisher, kept typed to stop it at the end.
pub(crate) enum Handle {
    RocketMq(Arc<RocketMqPublisher>),
    Kafka(Arc<KafkaPublisher>),
    Nats(Arc<NatsPublisher>),
    RabbitMq(Arc<RabbitMqPublisher>),
    Redis(Arc<RedisPublisher>),
}

/// The settings of the broker `args` chooses, with the send timeout fitted to `worker` (at
/// most its send timeout and a third of its lease) and checked; `None` only for RocketMQ
/// without a name server in a dry run. Checked in a dry run too (which never contacts the
/// broker), so that a dry run fails where the real one would.
///
/// # Errors
/// [`OutboxError::InvalidConfig`] when a RocketMQ-only flag (or its variable) is given with
/// another broker, or the broker's settings are unusable; the messages never show a secret.
pub(crate) fn settings(
    args: &RelayArgs,
    worker: &WorkerConfig,
) -> Result<Option<Settings>, OutboxError> {
    let kind = args.publisher;
    if kind != PublisherKind::RocketMq {
        let given = rocketmq::flags_given(args);
        if !given.is_empty() {
            return Err(OutboxError::InvalidConfig(format!(
                "{} appl{} only to --publisher rocketmq, not {}: unset {} or choose rocketmq",
                given.join(", "),
                if given.len() == 1 { "ies" } else { "y" },
                kind.name(),
                if given.len() == 1 { "it" } else { "them" },
            )));
        }
    }
    let timeout = worker.publisher_send_timeout_limit();
    let settings = match kind {
        PublisherKind::RocketMq => {
            return rocketmq::settings(args, worker).map(|c| c.map(Settings::RocketMq))
        }
        PublisherKind::Kafka => {
            let config = KafkaConfig::from_env()?.send_timeout(timeout);
            config.validate()?;
            worker.check_publisher_send_timeout("Kafka send_timeout", config.send_timeout)?;
            Settings::Kafka(config)
        }
        PublisherKind::Nats => {
            let config = NatsConfig::from_env()?.send_timeout(timeout);
            config.validate()?;
            worker.check_publisher_send_timeout("NATS send_timeout", config.send_timeout)?;
            Settings::Nats(config)
        }
        PublisherKind::RabbitMq => {
            let config = RabbitMqConfig::from_env()?.send_timeout(timeout);
            config.validate()?;
            worker.check_publisher_send_timeout("RabbitMQ send_timeout", config.send_timeout)?;
            Settings::RabbitMq(config)
        }
        PublisherKind::Redis => {
            let config = RedisConfig::from_env()?.send_timeout(timeout);
            config.validate()?;
            worker.check_publisher_send_timeout("Redis send_timeout", config.send_timeout)?;
            Settings::Redis(config)
        }
    };
    Ok(Some(settings))
}

/// Starts the publisher of `settings`; returns it, its handle, and the broker and destination
/// for the log (addresses without user or password, no secret).
pub(crate) async fn start(
    settings: Settings,
) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
    Ok(match settings {
        Settings::RocketMq(config) => {
            let target = rocketmq::target(&config);
            let p = Arc::new(RocketMqPublisher::start(config).await?);
            (p.clone(), Handle::RocketMq(p), target)
        }
        Settings::Kafka(config) => {
            let target = format!(
                "kafka {} topic prefix {}",
                config.brokers, config.topic_prefix
            );
            let p = Arc::new(KafkaPublisher::start(config).await?);
            (p.clone(), Handle::Kafka(p), target)
        }
        Settings::Nats(config) => {
            let target = format!(
                "nats {} subject prefix {}",
                config.redacted_url(),
                config.subject_prefix
            );
            let p = Arc::new(NatsPublisher::start(config).await?);
            (p.clone(), Handle::Nats(p), target)
        }
        Settings::RabbitMq(config) => {
            let target = format!(
                "rabbitmq {} exchange {} routing prefix {}",
                config.redacted_url(),
                config.exchange,
                config.routing_prefix
            );
            let p = Arc::new(RabbitMqPublisher::start(config).await?);
            (p.clone(), Handle::RabbitMq(p), target)
        }
        Settings::Redis(config) => {
            let target = format!(
                "redis {} stream prefix {}",
                config.redacted_url(),
                config.stream_prefix
            );
            let p = Arc::new(RedisPublisher::start(config).await?);
            (p.clone(), Handle::Redis(p), target)
        }
    })
}

impl Handle {
    /// Stops the publisher once the worker has let go of it (flushes what it holds).
    pub(crate) async fn shutdown(self) {
        let still_shared = match self {
            Handle::RocketMq(p) => match Arc::try_unwrap(p) {
                Ok(p) => return p.shutdown().await,
                Err(_) => "RocketMQ",
            },
            Handle::Kafka(p) => match Arc::try_unwrap(p) {
                Ok(p) => return p.shutdown().await,
                Err(_) => "Kafka",
            },
            Handle::Nats(p) => match Arc::try_unwrap(p) {
                Ok(p) => return p.shutdown().await,
                Err(_) => "NATS",
            },
            Handle::RabbitMq(p) => match Arc::try_unwrap(p) {
                Ok(p) => return p.shutdown().await,
                Err(_) => "RabbitMQ",
            },
            Handle::Redis(p) => match Arc::try_unwrap(p) {
                Ok(p) => return p.shutdown().await,
                Err(_) => "Redis",
            },
        };
        tracing::warn!("{still_shared} publisher still shared at exit; not flushed");
    }
}
