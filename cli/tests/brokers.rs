//! `outbox relay --publisher kafka|nats|rabbitmq|redis` (through `OUTBOX_PUBLISHER`): the binary
//! relays 200 events to the broker, each configured by its crate's variables with a
//! destination of the test's own, the broker's consumer reads every one back, and SIGTERM
//! stops the relay cleanly. The startup log names the broker without a password. An unknown
//! `--publisher` and a RocketMQ flag given with another broker are refused at start. Runs on
//! Postgres (see the core's `tests/common`); needs Kafka (or Tansu), NATS (JetStream), RabbitMQ
//! and Redis at their crates' default addresses or `KAFKA_BROKERS`, `NATS_URL`,
//! `RABBITMQ_URL`, `REDIS_URL`.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{count, insert_many, TestContext};
use sea_orm_outbox::EventStatus;
use sea_orm_outbox_kafka::{KafkaConfig, KafkaConsumer};
use sea_orm_outbox_nats::{NatsConfig, NatsConsumer};
use sea_orm_outbox_rabbitmq::{RabbitMqConfig, RabbitMqConsumer};
use sea_orm_outbox_redis::{RedisConfig, RedisStreamConsumer};

backend_test!(
    /// Kafka: every event reaches the test's topic; SIGTERM stops the relay cleanly.
    relay_publishes_to_kafka: Postgres, "cli_relay_kafka" => relay_publishes_to_kafka_on;
    /// NATS: every event reaches the test's stream; SIGTERM stops the relay cleanly.
    relay_publishes_to_nats: Postgres, "cli_relay_nats" => relay_publishes_to_nats_on;
    /// RabbitMQ: every event reaches the test's exchange; SIGTERM stops the relay cleanly.
    relay_publishes_to_rabbitmq: Postgres, "cli_relay_rabbitmq" => relay_publishes_to_rabbitmq_on;
    /// Redis: every event reaches the test's streams; SIGTERM stops the relay cleanly.
    relay_publishes_to_redis: Postgres, "cli_relay_redis" => relay_publishes_to_redis_on;
    /// A RocketMQ flag with another broker: exit 1 naming the flag, the events stay `WAIT`.
    relay_refuses_rocketmq_flags_with_another_broker:
        Postgres, "cli_relay_rmq_flag_other" => relay_refuses_rocketmq_flags_with_another_broker_on;
);

/// Events each broker test writes.
const EVENTS: usize = 200;
/// How long the consumer may take to see every event.
const DEADLINE: Duration = Duration::from_secs(90);

/// An eight-character suffix of the test's own.
fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// The broker's consumer, one per test.
enum Reader {
    Kafka(Box<KafkaConsumer>),
    Nats(Box<NatsConsumer>),
    RabbitMq(RabbitMqConsumer),
    Redis(RedisStreamConsumer),
}

impl Reader {
    /// The event ids that arrived since the last call (waiting up to 500 ms for one).
    async fn poll(&mut self) -> Vec<i64> {
        let wait = Duration::from_millis(500);
        match self {
            Reader::Kafka(c) => c.poll(wait).await.into_iter().map(|m| m.event_id).collect(),
            Reader::Nats(c) => c.poll(wait).await.into_iter().map(|m| m.event_id).collect(),
            Reader::RabbitMq(c) => c.poll(wait).await.into_iter().map(|m| m.event_id).collect(),
            Reader::Redis(c) => c
                .poll(wait)
                .await
                .expect("read the streams")
                .into_iter()
                .map(|e| e.event_id)
                .collect::<Vec<_>>(),
        }
        .into_iter()
        .map(|id| id.expect("every message carries its event id"))
        .collect()
    }

    /// Removes what the test made on the broker.
    async fn cleanup(self) {
        match self {
            Reader::Kafka(c) => c.delete_topics().await.expect("delete the topics"),
            Reader::Nats(c) => c.delete_stream().await.expect("delete the stream"),
            Reader::RabbitMq(c) => c.close(true).await,
            Reader::Redis(mut c) => {
                c.delete_streams().await.expect("delete the streams");
            }
        }
    }
}

/// A running `outbox relay`, its log (stderr) and stdout in files.
struct Relay {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Relay {
    /// Starts `outbox relay` on `url` with `env` (and no RocketMQ variable).
    fn start(url: &str, env: &[(&str, &str)], args: &[&str]) -> Relay {
        let dir = std::env::temp_dir();
        let id = unique();
        let (stdout, stderr) = (
            dir.join(format!("outbox-relay-{id}.out")),
            dir.join(format!("outbox-relay-{id}.err")),
        );
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
        cmd.env("OUTBOX_COMPLETION", common::completion().as_str())
            .args(["relay", "--poll-delay", "50ms"])
            .args(args)
            .env("DATABASE_URL", url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for var in [
            "OUTBOX_PUBLISHER",
            "ROCKETMQ_NAMESRV_ADDR",
            "OUTBOX_TOPIC",
            "OUTBOX_TOPICS",
            "ROCKETMQ_PRODUCER_GROUP",
            "ROCKETMQ_ACCESS_KEY",
            "ROCKETMQ_SECRET_KEY",
            "ROCKETMQ_VERIFY_CREDENTIALS",
            "ROCKETMQ_FAILOVER",
            "ROCKETMQ_MAX_BATCH_BYTES",
            "ROCKETMQ_MAX_MESSAGE_BYTES",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        Relay {
            child: cmd.spawn().expect("spawn outbox relay"),
            stdout,
            stderr,
        }
    }

    /// Its log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (30 s at most) for the exit; its status code, stdout and log.
    async fn exit(mut self) -> (Option<i32>, String, String) {
        let end = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > end {
                self.child.kill().ok();
                self.child.wait().ok();
                panic!("outbox relay still runs after 30 s: {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let out = std::fs::read_to_string(&self.stdout).unwrap_or_default();
        let log = self.log();
        std::fs::remove_file(&self.stdout).ok();
        std::fs::remove_file(&self.stderr).ok();
        (status.code(), out, log)
    }

    /// Sends SIGTERM, then [`Relay::exit`].
    async fn stop(self) -> (Option<i32>, String, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        self.exit().await
    }
}

/// Writes the events, runs the relay with `env` until `reader` has seen every one, stops it
/// with SIGTERM; checks a clean exit, a startup line naming `broker` and `dest`, no `secret`
/// in the output, and every event delivered.
async fn relay_to(
    ctx: &TestContext,
    mut reader: Reader,
    env: &[(&str, &str)],
    (broker, dest, secret): (&str, &str, Option<&str>),
) {
    let ids: BTreeSet<i64> = insert_many(&ctx.db, broker, EVENTS)
        .await
        .into_iter()
        .collect();
    let mut relay = Relay::start(&ctx.url, env, &[]);
    let mut seen = BTreeSet::new();
    let end = Instant::now() + DEADLINE;
    while seen.len() < ids.len() && Instant::now() < end {
        seen.extend(reader.poll().await);
        if let Ok(Some(_)) = relay.child.try_wait() {
            let (code, _, log) = relay.exit().await;
            reader.cleanup().await;
            panic!("outbox relay exited ({code:?}) before delivering: {log}");
        }
    }
    let (code, out, log) = relay.stop().await;
    reader.cleanup().await;
    let missing: Vec<_> = ids.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{} never arrived: {missing:?}\n{log}",
        missing.len()
    );
    assert!(seen.is_subset(&ids), "only the test's events: {seen:?}");
    assert_eq!(code, Some(0), "a clean exit on SIGTERM: {log}");
    assert!(out.contains("relay stopped"), "{out}\n{log}");
    let started = log
        .lines()
        .find(|l| l.contains("relay started"))
        .unwrap_or_else(|| panic!("no startup line: {log}"));
    assert!(
        started.contains(&format!("publisher={broker} ")) && started.contains(dest),
        "{started}"
    );
    if let Some(secret) = secret {
        assert!(!log.contains(secret) && !out.contains(secret), "{log}");
    }
    assert_eq!(count(&ctx.db, EventStatus::Success).await, EVENTS as u64);
}

async fn relay_publishes_to_kafka_on(ctx: &TestContext) {
    let prefix = format!("cli_relay_{}", unique());
    let config = KafkaConfig::from_env()
        .expect("Kafka settings")
        .topic_prefix(&prefix);
    let consumer = KafkaConsumer::start(&config, &["ORDER_CREATED"], 3)
        .await
        .expect("Kafka (KAFKA_BROKERS)");
    let env = [
        ("OUTBOX_PUBLISHER", "kafka"),
        ("OUTBOX_KAFKA_TOPIC_PREFIX", prefix.as_str()),
    ];
    let reader = Reader::Kafka(Box::new(consumer));
    relay_to(ctx, reader, &env, ("kafka", &prefix, None)).await;
}

async fn relay_publishes_to_nats_on(ctx: &TestContext) {
    let prefix = format!("cli_relay_{}", unique());
    let config = NatsConfig::from_env()
        .expect("NATS settings")
        .subject_prefix(&prefix);
    let stream = prefix.to_uppercase();
    let consumer = NatsConsumer::start(&config, &stream)
        .await
        .expect("NATS with JetStream (NATS_URL)");
    let env = [
        ("OUTBOX_PUBLISHER", "nats"),
        ("OUTBOX_NATS_SUBJECT_PREFIX", prefix.as_str()),
    ];
    relay_to(
        ctx,
        Reader::Nats(Box::new(consumer)),
        &env,
        ("nats", &prefix, None),
    )
    .await;
}

async fn relay_publishes_to_rabbitmq_on(ctx: &TestContext) {
    let exchange = format!("cli_relay_{}", unique());
    let config = RabbitMqConfig::from_env()
        .expect("RabbitMQ settings")
        .exchange(&exchange);
    let consumer = RabbitMqConsumer::start(&config, "#")
        .await
        .expect("RabbitMQ (RABBITMQ_URL)");
    let password = config
        .credentials
        .as_ref()
        .map(|c| format!(":{}@", c.password().expose()));
    // The default URL carries `guest:guest`: the log must show neither.
    let secret = password.unwrap_or_else(|| ":guest@".into());
    let env = [
        ("OUTBOX_PUBLISHER", "rabbitmq"),
        ("OUTBOX_RABBITMQ_EXCHANGE", exchange.as_str()),
    ];
    let reader = Reader::RabbitMq(consumer);
    relay_to(ctx, reader, &env, ("rabbitmq", &exchange, Some(&secret))).await;
}

async fn relay_publishes_to_redis_on(ctx: &TestContext) {
    let prefix = format!("cli_relay_{}", unique());
    let config = RedisConfig::from_env()
        .expect("Redis settings")
        .stream_prefix(&prefix);
    let consumer = RedisStreamConsumer::start(&config)
        .await
        .expect("Redis (REDIS_URL)");
    let env = [
        ("OUTBOX_PUBLISHER", "redis"),
        ("OUTBOX_REDIS_STREAM_PREFIX", prefix.as_str()),
    ];
    relay_to(ctx, Reader::Redis(consumer), &env, ("redis", &prefix, None)).await;
}

async fn relay_refuses_rocketmq_flags_with_another_broker_on(ctx: &TestContext) {
    let ids = insert_many(&ctx.db, "RMQ-FLAG", 3).await;
    let relay = Relay::start(
        &ctx.url,
        &[("OUTBOX_PUBLISHER", "redis")],
        &["--topic", "ORDERS", "--rocketmq-secret-key", "s3cret-key"],
    );
    let (code, _, log) = relay.exit().await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("--topic (OUTBOX_TOPIC), --rocketmq-secret-key (ROCKETMQ_SECRET_KEY) apply only to --publisher rocketmq, not redis"),
        "{log}"
    );
    assert!(!log.contains("s3cret-key"), "{log}");
    for id in ids {
        let e = common::event(&ctx.db, id).await;
        assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 0), "{e:?}");
    }
}

/// `--publisher pulsar` is a usage error (exit 2) naming the brokers it takes, before anything
/// connects.
#[test]
fn relay_refuses_an_unknown_publisher() {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["relay", "--publisher", "pulsar"])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run outbox relay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'pulsar' for '--publisher <PUBLISHER>'")
            && err.contains("[possible values: rocketmq, kafka, nats, rabbitmq, redis]"),
        "{err}"
    );
}
