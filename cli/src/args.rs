//! The tool's command line: sub-commands, their flags and environment variables (clap).
// clap prints these doc comments as the `--help` text, where `<pid>` is a placeholder, not HTML.
#![allow(rustdoc::invalid_html_tags)]
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sea_orm_outbox::Secret;

use relay_config::{retention, Keep};

/// A secret from the command line or the environment, kept redacted.
fn secret(value: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(value))
}

/// A table name as [`sea_orm_outbox::Outbox::table`] accepts it; clap refuses any other as a
/// usage error (exit status 2) before anything connects.
fn table_name(value: &str) -> Result<String, String> {
    sea_orm_outbox::Outbox::new()
        .table(value)
        .map(|_| value.to_owned())
        .map_err(|e| e.to_string())
}

/// A schema name as [`sea_orm_outbox::Outbox::schema`] accepts it (the rule of table names);
/// clap refuses any other as a usage error (exit status 2).
fn schema_name(value: &str) -> Result<String, String> {
    sea_orm_outbox::migration::check_table_name(value)
        .map(|()| value.to_owned())
        .map_err(|_| {
            format!(
                "schema name {value:?}: 1 to 40 ASCII letters, digits and underscores, not \
                 starting with a digit"
            )
        })
}

/// The `outbox` command line.
#[derive(Parser, Debug)]
#[command(
    name = "outbox",
    version,
    about = "Operate a sea-orm-outbox table: migrations, backlog, dead letters, retention, relay, health"
)]
pub(crate) struct Cli {
    /// Database URL (postgres://, mysql://, sqlite://). Never printed with its password.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// The outbox table every command works on (1 to 40 ASCII letters, digits and
    /// underscores, not starting with a digit).
    #[arg(
        long,
        env = "OUTBOX_TABLE",
        global = true,
        default_value = "t_event_record",
        value_parser = table_name
    )]
    pub(crate) table: String,
    /// The outbox table's schema (Postgres; on MySQL/MariaDB its database). Default: the
    /// connection's.
    #[arg(long, env = "OUTBOX_SCHEMA", global = true, value_parser = schema_name)]
    pub(crate) schema: Option<String>,
    /// The sub-command to run.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The sub-commands.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Apply, roll back or list the outbox migrations.
    Migrate {
        /// What to do with the migrations.
        #[command(subcommand)]
        action: MigrateAction,
    },
    /// Rows per status, age of the oldest waiting event, leases older than the lease.
    Stats {
        /// The workers' lease: SENDING rows claimed longer ago than this are counted as stuck.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        lease: Duration,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters (FAIL rows): list, retry, discard.
    Dead {
        /// What to do with the dead letters.
        #[command(subcommand)]
        action: DeadAction,
    },
    /// Delete delivered (SUCCESS) events older than a duration, in batches. WAIT, SENDING and
    /// FAIL rows are never touched.
    Purge {
        /// Age of the last update beyond which a delivered event is deleted, e.g. 30s, 15m, 7d.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Rows deleted per statement.
        #[arg(long, default_value_t = 1000)]
        batch: u64,
    },
    /// The outbox's health: relays alive, oldest undelivered event, recent dead letters, long
    /// transactions. Exit status 0 healthy, 4 degraded, 5 failing.
    Health {
        /// Failing when the oldest undelivered event is older than this.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
        undelivered_age: Duration,
        /// Degraded when another connection holds a snapshot longer than this.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
        transaction_age: Duration,
        /// Degraded when events became dead letters within this window.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
        dead_letter_window: Duration,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The relay instances of the table, from their heartbeats: alive, or stopped within a day.
    Relays {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a relay worker until Ctrl-C or SIGTERM. It publishes to the broker `--publisher`
    /// names: RocketMQ (the default) at the name server given (`--rocketmq-namesrv` or
    /// `ROCKETMQ_NAMESRV_ADDR`; without one it refuses to start, unless `--dry-run`), or NATS,
    /// RabbitMQ or Redis as their crate's variables say. At start it waits for the database
    /// (see `--connect-timeout`).
    Relay(Box<RelayArgs>),
    /// Serve the web console (overview and trend, dead letters by error with retry and discard,
    /// search by biz_no or id) until Ctrl-C or SIGTERM. Without a token it is read-only.
    Console(ConsoleArgs),
}

/// Relay settings; each unset one takes the library's default (`WorkerConfig::default()`).
#[derive(Args, Debug)]
pub(crate) struct RelayArgs {
    /// Wait after each round [default: 5s].
    #[arg(long, env = "OUTBOX_POLL_DELAY", value_parser = humantime::parse_duration)]
    pub(crate) poll_delay: Option<Duration>,
    /// Candidates per round [default: 20].
    #[arg(long, env = "OUTBOX_BATCH")]
    pub(crate) batch: Option<u64>,
    /// Lease of a claimed event [default: 10m]; renewed every third of it while the send runs,
    /// and expired leases are reclaimed every tenth of it (at most every 60 s).
    #[arg(long, env = "OUTBOX_LEASE", value_parser = humantime::parse_duration)]
    pub(crate) lease: Option<Duration>,
    /// Longest a single send may take [default: 3s]; at most a third of the lease (the broker's
    /// client uses it as its own timeout, over the crate's send-timeout variable).
    #[arg(long, env = "OUTBOX_SEND_TIMEOUT", value_parser = humantime::parse_duration)]
    pub(crate) send_timeout: Option<Duration>,
    /// How rounds claim: batch (one statement, SKIP LOCKED) or per-row (the seed's)
    /// [default: batch].
    #[arg(long, env = "OUTBOX_CLAIM_STRATEGY", value_enum)]
    pub(crate) claim_strategy: Option<Strategy>,
    /// Publish calls in flight at once, each up to --batch events (RocketMQ batch messages)
    /// [default: 16].
    #[arg(long, env = "OUTBOX_SEND_CONCURRENCY")]
    pub(crate) send_concurrency: Option<usize>,
    /// Postgres: also wait on `LISTEN sea_orm_outbox` between rounds, so that a committed
    /// event starts a round at once instead of after the poll delay [default: true].
    #[arg(long, env = "OUTBOX_WAKE_ON_COMMIT")]
    pub(crate) wake_on_commit: Option<bool>,
    /// Failed sends retried before an event becomes a dead letter [default: 12; with the
    /// default back-off the retries span 52 minutes].
    #[arg(long, env = "OUTBOX_MAX_RETRIES")]
    pub(crate) max_retries: Option<u32>,
    /// Instance id written into claim_owner [default: <service-name>-<pid>-<random>].
    #[arg(long, env = "OUTBOX_INSTANCE_ID")]
    pub(crate) instance_id: Option<String>,
    /// Service name used in a generated instance id [default: outbox].
    #[arg(long, env = "OUTBOX_SERVICE_NAME")]
    pub(crate) service_name: Option<String>,
    /// Back-off unit: the n-th failed attempt waits n² × this [default: 5s].
    #[arg(long, env = "OUTBOX_RETRY_BACKOFF", value_parser = humantime::parse_duration)]
    pub(crate) retry_backoff: Option<Duration>,
    /// Longest single back-off [default: 10m].
    #[arg(long, env = "OUTBOX_RETRY_MAX_BACKOFF", value_parser = humantime::parse_duration)]
    pub(crate) retry_max_backoff: Option<Duration>,
    /// Ordered delivery per business key (biz_no): `off` (any order, the fastest), `block` (a
    /// key whose earliest unfinished event is a dead letter sends nothing more until `outbox
    /// dead retry` or `discard`) or `skip` (the dead letter stays FAIL, the key goes on)
    /// [default: off]. Needs the index of migration m20261202_000004_add_biz_no_status_index.
    #[arg(long, env = "OUTBOX_ORDERED", value_enum)]
    pub(crate) ordered: Option<Ordered>,
    /// How the relay's statements reach Postgres: extended (prepared statements) or simple
    /// (one simple-protocol query per statement, values inlined), for a transaction-mode pooler
    /// such as PgBouncer < 1.21 that breaks prepared statements; Postgres only
    /// [default: extended].
    #[arg(long, env = "OUTBOX_STATEMENT_PROTOCOL", value_enum)]
    pub(crate) statement_protocol: Option<Protocol>,
    /// Between heartbeats into t_outbox_relay (and gauge refreshes); the relay counts as
    /// stopped three intervals after its last one [default: 10s].
    #[arg(long, env = "OUTBOX_HEARTBEAT_INTERVAL", value_parser = humantime::parse_duration)]
    pub(crate) heartbeat_interval: Option<Duration>,
    /// How long delivered events are kept before the relay deletes them (at its start and
    /// every 10 min), or `off` to keep them until `outbox purge` [default: 7d].
    #[arg(long, env = "OUTBOX_RETENTION", value_parser = retention)]
    pub(crate) retention: Option<Keep>,
    /// What a delivered event's row becomes: `delete` deletes it, `update` marks it SUCCESS
    /// and keeps it for the retention [default: delete].
    #[arg(long, env = "OUTBOX_COMPLETION", value_enum)]
    pub(crate) completion: Option<CompletionArg>,
    /// Healing of dead letters.
    #[command(flatten)]
    pub(crate) heal: HealArgs,
    /// The broker to publish to: rocketmq (the `--rocketmq-*`, `--topic`, `--topic-map` and
    /// `--producer-group` flags), or kafka, nats, rabbitmq, redis (each configured by its
    /// crate's environment variables: `KAFKA_BROKERS`..., `NATS_URL`..., `RABBITMQ_URL`...,
    /// `REDIS_URL`...; a RocketMQ
    /// flag or variable given with them is an error) [default: rocketmq].
    #[arg(
        long,
        env = "OUTBOX_PUBLISHER",
        value_enum,
        ignore_case = true,
        default_value = "rocketmq"
    )]
    pub(crate) publisher: PublisherKind,
    /// RocketMQ name server(s), `host:port[;host:port]`, where the relay publishes. Required
    /// (unset or empty is an error) with `--publisher rocketmq` unless --dry-run.
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR")]
    pub(crate) rocketmq_namesrv: Option<String>,
    /// RocketMQ default topic: where events go whose type `--topic-map` does not list
    /// [default: OUTBOX_EVENT_TOPIC].
    #[arg(long, env = "OUTBOX_TOPIC")]
    pub(crate) topic: Option<String>,
    /// The topic of each event type, `EVENT_TYPE=TOPIC[,EVENT_TYPE=TOPIC...]`, e.g.
    /// `ORDER_PAID=PAYMENT_TOPIC,ORDER_SHIPPED=SHIPPING_TOPIC`; other types go to `--topic`.
    #[arg(long, env = "OUTBOX_TOPICS")]
    pub(crate) topic_map: Option<String>,
    /// RocketMQ producer group [default: outbox_producer_group].
    #[arg(long, env = "ROCKETMQ_PRODUCER_GROUP")]
    pub(crate) producer_group: Option<String>,
    /// RocketMQ access key (user) for a broker with authentication; needs the secret key too.
    #[arg(long, env = "ROCKETMQ_ACCESS_KEY")]
    pub(crate) rocketmq_access_key: Option<String>,
    /// RocketMQ secret key of the access key. Prefer the environment variable (a flag shows
    /// in the process list); never printed.
    #[arg(long, env = "ROCKETMQ_SECRET_KEY", hide_env_values = true, value_parser = secret)]
    pub(crate) rocketmq_secret_key: Option<Secret>,
    /// Whether the RocketMQ publisher checks the credentials at start with a signed read of a
    /// queue's offset (needs the `Get` permission when the broker runs authorization): `false`
    /// for a user that may only publish [default: true].
    #[arg(long, env = "ROCKETMQ_VERIFY_CREDENTIALS")]
    pub(crate) rocketmq_verify_credentials: Option<bool>,
    /// How RocketMQ sends move off a broker that fails: `outbox` (the relay avoids it for 30 s),
    /// `client` (the client's latency fault tolerance only) or `off` [default: outbox].
    #[arg(long, env = "ROCKETMQ_FAILOVER")]
    pub(crate) rocketmq_failover: Option<String>,
    /// Largest RocketMQ batch message in bytes; a larger event goes alone [default: 1048576].
    #[arg(long, env = "ROCKETMQ_MAX_BATCH_BYTES")]
    pub(crate) rocketmq_max_batch_bytes: Option<u32>,
    /// Largest message body in bytes, at most the broker's maxMessageSize; a larger event is a
    /// dead letter [default: 4194304].
    #[arg(long, env = "ROCKETMQ_MAX_MESSAGE_BYTES")]
    pub(crate) rocketmq_max_message_bytes: Option<u32>,
    /// Send nothing: check the settings (a broker's too, without contacting it), connect, check
    /// the table, then log every poll delay how many events wait, until stopped. Nothing is
    /// claimed or marked.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// How long to keep trying to reach the database at start, e.g. 30s or 5m; `0s` tries once
    /// [default: no limit]. Only connection failures are retried (with back-off from 200 ms to
    /// 5 s); a malformed URL, a refused login or a missing table fail at once.
    #[arg(long, env = "OUTBOX_CONNECT_TIMEOUT", value_parser = humantime::parse_duration)]
    pub(crate) connect_timeout: Option<Duration>,
    /// Fault injection (`--chaos-send-stall`), only in a build with the `chaos-testing` feature.
    #[cfg(feature = "chaos-testing")]
    #[command(flatten)]
    pub(crate) chaos: crate::chaos::ChaosArgs,
}

/// `--publisher` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PublisherKind {
    /// RocketMQ (sea-orm-outbox-rocketmq), set by the tool's RocketMQ flags.
    #[value(name = "rocketmq")]
    RocketMq,
    /// Kafka (sea-orm-outbox-kafka), set by `KAFKA_BROKERS`, `KAFKA_*` and `OUTBOX_KAFKA_*`.
    Kafka,
    /// NATS JetStream (sea-orm-outbox-nats), set by `NATS_URL` and `OUTBOX_NATS_*`.
    Nats,
    /// RabbitMQ (sea-orm-outbox-rabbitmq), set by `RABBITMQ_URL` and `OUTBOX_RABBITMQ_*`.
    #[value(name = "rabbitmq")]
    RabbitMq,
    /// Redis Streams (sea-orm-outbox-redis), set by `REDIS_URL` and `OUTBOX_REDIS_*`.
    Redis,
}

impl PublisherKind {
    /// The name `--publisher` gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PublisherKind::RocketMq => "rocketmq",
            PublisherKind::Kafka => "kafka",
            PublisherKind::Nats => "nats",
            PublisherKind::RabbitMq => "rabbitmq",
            PublisherKind::Redis => "redis",
        }
    }
}

/// `--claim-strategy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum Strategy {
    /// One conditional UPDATE per candidate.
    PerRow,
    /// One statement claims the whole batch.
    Batch,
}

/// `--ordered` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ordered {
    /// Unordered (the library's default).
    Off,
    /// Ordered; a dead letter blocks its key.
    Block,
    /// Ordered; a key goes on past its dead letter.
    Skip,
}

/// `--statement-protocol` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum Protocol {
    /// Prepared statements with bound parameters.
    Extended,
    /// Simple-protocol queries with inlined values (transaction-mode poolers).
    Simple,
}

/// `--completion` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum CompletionArg {
    /// Delete the row.
    Delete,
    /// Mark the row SUCCESS.
    Update,
}

mod actions;
mod console;
mod heal;
mod relay_config;
#[cfg(test)]
mod tests;

pub(crate) use actions::{DeadAction, MigrateAction};
pub(crate) use console::ConsoleArgs;
use heal::HealArgs;
