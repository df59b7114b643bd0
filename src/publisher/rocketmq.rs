//! The RocketMQ publisher (cargo feature `rocketmq`, on by default), built on the rocketmq-rust
//! 1.0 client (`rocketmq-client-rust`).
//!
//! Each [`OutboxMessage`] becomes one message on the configured topic: body = payload,
//! keys = `biz_no`, tag = `event_type`, user properties `eventId`, `eventType`, `bizNo`. Only a
//! `SEND_OK` result counts as delivered. Failures are classified by the client error's code
//! (its `Display` is redacted): transport errors, time-outs, other send statuses and broker
//! errors are retryable; a message the broker can never accept (too large, empty, illegal topic)
//! is permanent and the event goes straight to `FAIL` with the reason.
//!
//! ```no_run
//! # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
//! use std::sync::Arc;
//! use sea_orm_outbox::{CancellationToken, RocketMqConfig, RocketMqPublisher, Worker, WorkerConfig};
//!
//! let config = RocketMqConfig::from_env()?; // ROCKETMQ_NAMESRV_ADDR, ROCKETMQ_PRODUCER_GROUP, OUTBOX_TOPIC
//! let publisher = Arc::new(RocketMqPublisher::start(config).await?);
//! let worker = Worker::new(db, publisher.clone(), WorkerConfig::default().service_name("order"))?;
//! let cancel = CancellationToken::new();
//! let summary = worker.run(cancel).await; // until cancelled
//! drop(worker);
//! if let Ok(publisher) = Arc::try_unwrap(publisher) {
//!     publisher.shutdown().await;
//! }
//! # let _ = summary; Ok(()) }
//! ```
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rocketmq_client_rust::{
    ClientConfig, ClientError, ClientOptions, ClientResult, ClientRuntime, ClientRuntimeConfig,
    DefaultLitePullConsumer, DefaultMQProducer, MQClientException, SendResult, SendStatus,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::common::topic::TopicValidator;
use rocketmq_observability::TelemetryRuntimeGuard;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::{OutboxMessage, Publisher};
use crate::config::{WorkerConfig, MAX_SEND_TIMEOUT_SHARE_OF_LEASE};
use crate::error::{OutboxError, PublishError};

/// Default topic: `ORDER_EVENT_TOPIC`.
pub const DEFAULT_TOPIC: &str = "ORDER_EVENT_TOPIC";
/// Default producer group: `outbox_producer_group`.
pub const DEFAULT_PRODUCER_GROUP: &str = "outbox_producer_group";
/// Default name server address: `127.0.0.1:9876`.
pub const DEFAULT_NAMESRV_ADDR: &str = "127.0.0.1:9876";
/// Default send timeout: 3 s (the seed design's).
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// The environment variable with the name server address(es), `host:port[;host:port...]`.
pub const ENV_NAMESRV_ADDR: &str = "ROCKETMQ_NAMESRV_ADDR";
/// The environment variable with the producer group.
pub const ENV_PRODUCER_GROUP: &str = "ROCKETMQ_PRODUCER_GROUP";
/// The environment variable with the topic.
pub const ENV_TOPIC: &str = "OUTBOX_TOPIC";

/// Longest topic name RocketMQ accepts.
const TOPIC_MAX_LEN: usize = 127;
/// Longest group name RocketMQ accepts.
const GROUP_MAX_LEN: usize = 255;
/// RocketMQ's `MESSAGE_ILLEGAL` response code (too large, empty body, bad property).
const RESPONSE_MESSAGE_ILLEGAL: i32 = 13;
/// How long [`RocketMqPublisher::start`] waits for a name server to accept a connection.
const NAMESRV_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how [`RocketMqPublisher`] sends.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox::RocketMqConfig;
/// let config = RocketMqConfig::new("127.0.0.1:9876")
///     .producer_group("order_service")
///     .topic("ORDER_EVENT_TOPIC")
///     .send_timeout(Duration::from_secs(3));
/// config.validate()?;
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RocketMqConfig {
    /// Name server address(es): `host:port`, several separated by `;`.
    pub namesrv_addr: String,
    /// Producer group (default [`DEFAULT_PRODUCER_GROUP`]).
    pub producer_group: String,
    /// Topic every event goes to (default [`DEFAULT_TOPIC`]).
    pub topic: String,
    /// Longest one send may take, the client's internal retries included (default 3 s). Keep it
    /// at most the worker's `send_timeout` and well below its lease
    /// ([`RocketMqConfig::validate_for`]).
    pub send_timeout: Duration,
}

impl Default for RocketMqConfig {
    fn default() -> Self {
        RocketMqConfig::new(DEFAULT_NAMESRV_ADDR)
    }
}

impl RocketMqConfig {
    /// A configuration for the name server(s) at `namesrv_addr` with the default group, topic and
    /// send timeout.
    pub fn new(namesrv_addr: impl Into<String>) -> Self {
        RocketMqConfig {
            namesrv_addr: namesrv_addr.into(),
            producer_group: DEFAULT_PRODUCER_GROUP.to_owned(),
            topic: DEFAULT_TOPIC.to_owned(),
            send_timeout: DEFAULT_SEND_TIMEOUT,
        }
    }

    /// Reads `ROCKETMQ_NAMESRV_ADDR` (required), `ROCKETMQ_PRODUCER_GROUP` and `OUTBOX_TOPIC`
    /// (optional; empty means the default) and validates the result.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `ROCKETMQ_NAMESRV_ADDR` is unset, empty or only
    /// spaces, or a value fails [`RocketMqConfig::validate`] (an address that is not
    /// `host:port`, for example). A well-formed name that resolves nowhere passes here and fails
    /// in [`RocketMqPublisher::start`].
    pub fn from_env() -> Result<Self, OutboxError> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let addr = var(ENV_NAMESRV_ADDR).ok_or_else(|| {
            OutboxError::InvalidConfig(format!(
                "{ENV_NAMESRV_ADDR} is not set: give the RocketMQ name server address, \
                 e.g. {DEFAULT_NAMESRV_ADDR}"
            ))
        })?;
        let mut config = RocketMqConfig::new(addr);
        if let Some(group) = var(ENV_PRODUCER_GROUP) {
            config.producer_group = group;
        }
        if let Some(topic) = var(ENV_TOPIC) {
            config.topic = topic;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets the producer group.
    pub fn producer_group(mut self, group: impl Into<String>) -> Self {
        self.producer_group = group.into();
        self
    }

    /// Sets the topic.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// Sets the send timeout.
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// The name server addresses, one per `;`-separated entry.
    pub fn namesrv_addrs(&self) -> Vec<&str> {
        self.namesrv_addr
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// Checks that the configuration can work.
    ///
    /// Only the form of the addresses is checked here; whether a name resolves is found out by
    /// [`RocketMqPublisher::start`], which fails with [`OutboxError::Broker`] when none answers.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when there is no name server address or one is not
    /// `host:port` (host: a name or IPv4 address of letters, digits, `.`, `-`, `_`, or an IPv6
    /// address in brackets; port: 1 to 65535; no scheme, path or spaces), the group or topic is
    /// empty, too long or has characters RocketMQ refuses (allowed: letters, digits, `%`, `|`,
    /// `_`, `-`), or the send timeout is zero or longer than `u32::MAX` milliseconds.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |m: String| Err(OutboxError::InvalidConfig(m));
        let addrs = self.namesrv_addrs();
        if addrs.is_empty() {
            return bad("RocketMQ namesrv_addr is empty".into());
        }
        for addr in addrs {
            let ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
                is_host(host) && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !ok {
                return bad(format!(
                    "RocketMQ name server address `{addr}` is not host:port \
                     (e.g. 127.0.0.1:9876, namesrv.example:9876 or [::1]:9876)"
                ));
            }
        }
        check_name("producer_group", &self.producer_group, GROUP_MAX_LEN)?;
        check_name("topic", &self.topic, TOPIC_MAX_LEN)?;
        if self.send_timeout.is_zero() || u32::try_from(self.send_timeout.as_millis()).is_err() {
            return bad(format!(
                "RocketMQ send_timeout must be between 1 ms and {} ms",
                u32::MAX
            ));
        }
        Ok(())
    }

    /// [`RocketMqConfig::validate`], and checks that the send timeout fits the worker that will
    /// call this publisher: at most a third of its lease (a send still running when the lease
    /// ends would be sent again by another instance) and at most its `send_timeout` (else the
    /// worker gives up before the client does and a late success is recorded as a failure).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when either check fails.
    pub fn validate_for(&self, worker: &WorkerConfig) -> Result<(), OutboxError> {
        self.validate()?;
        if self.send_timeout * MAX_SEND_TIMEOUT_SHARE_OF_LEASE > worker.lease {
            return Err(OutboxError::InvalidConfig(format!(
                "RocketMQ send_timeout ({} ms) must be at most a third of the worker's lease ({} ms)",
                self.send_timeout.as_millis(),
                worker.lease.as_millis()
            )));
        }
        if self.send_timeout > worker.send_timeout {
            return Err(OutboxError::InvalidConfig(format!(
                "RocketMQ send_timeout ({} ms) must not exceed the worker's send_timeout ({} ms)",
                self.send_timeout.as_millis(),
                worker.send_timeout.as_millis()
            )));
        }
        Ok(())
    }

    fn send_timeout_ms(&self) -> u32 {
        u32::try_from(self.send_timeout.as_millis()).unwrap_or(u32::MAX)
    }
}

/// A host name or IPv4 address (letters, digits, `.`, `-`, `_`) or an IPv6 address in brackets.
fn is_host(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    }
}

/// Topic and group names: 1..=max characters out of `[%|a-zA-Z0-9_-]`.
fn check_name(what: &str, value: &str, max: usize) -> Result<(), OutboxError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(OutboxError::InvalidConfig(format!(
            "RocketMQ {what} `{value}` is invalid: 1 to {max} characters out of letters, digits, \
             `%`, `|`, `_` and `-`"
        )))
    }
}

/// The runtime pieces every rocketmq-rust client needs: a runtime owner (its own Tokio runtime),
/// a no-op telemetry guard (the library installs no global subscriber) and a client runtime.
struct ClientHost {
    owner: RuntimeOwner,
    telemetry: TelemetryRuntimeGuard,
    runtime: Arc<ClientRuntime>,
}

impl ClientHost {
    fn new(scope: &str) -> Result<Self, OutboxError> {
        let err =
            |what: &str, e: String| OutboxError::Broker(format!("RocketMQ client {what}: {e}"));
        let config = RuntimeConfig::for_parallelism(format!("outbox-rmq-{scope}"), 2);
        let owner = RuntimeOwner::plan(config)
            .map_err(|e| err("runtime configuration", format!("{e:?}")))?
            .build()
            .map_err(|e| {
                err(
                    "runtime",
                    format!(
                        "{} ({})",
                        e.code().as_str(),
                        e.descriptor().public_message()
                    ),
                )
            })?;
        let telemetry = TelemetryRuntimeGuard::noop();
        let runtime = ClientRuntime::try_new(
            owner.root_context().component("client"),
            ClientRuntimeConfig {
                shutdown_timeout: Duration::from_secs(10),
                ..ClientRuntimeConfig::default()
            },
            telemetry.handle(),
        )
        .map_err(|e| err("runtime", client_error_text(&e)))?;
        Ok(ClientHost {
            owner,
            telemetry,
            runtime,
        })
    }

    /// Stops the client runtime, then the owner's tasks and Tokio runtime, then telemetry.
    async fn shutdown(self) {
        let report = self.runtime.shutdown().await;
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ client runtime did not shut down cleanly");
        }
        let report = self.owner.shutdown_tasks().await;
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ runtime tasks did not shut down cleanly");
        }
        let report = self.owner.shutdown_background();
        if !report.is_healthy() {
            tracing::warn!(report = %report.to_json(), "RocketMQ runtime did not shut down cleanly");
        }
        let report = self.telemetry.shutdown();
        if !report.is_healthy() {
            tracing::debug!(report = %report.to_json(), "RocketMQ telemetry did not shut down cleanly");
        }
    }
}

/// Waits until at least one name server in `config` accepts a TCP connection.
async fn probe_namesrv(config: &RocketMqConfig) -> Result<(), OutboxError> {
    let mut failures = Vec::new();
    for addr in config.namesrv_addrs() {
        match tokio::time::timeout(NAMESRV_PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => failures.push(format!("{addr}: {e}")),
            Err(_) => failures.push(format!(
                "{addr}: no answer within {} ms",
                NAMESRV_PROBE_TIMEOUT.as_millis()
            )),
        }
    }
    Err(OutboxError::Broker(format!(
        "no RocketMQ name server reachable ({}); start one (scripts/rocketmq.sh start) or set {ENV_NAMESRV_ADDR}",
        failures.join("; ")
    )))
}

/// Publishes outbox events to RocketMQ with one shared producer.
///
/// Sends take `&self` and the producer is safe to share: wrap the publisher in an `Arc` and hand
/// it to every worker. Call [`RocketMqPublisher::shutdown`] at the end (after the workers have
/// stopped) to stop the producer and the client runtime it owns; dropping it instead stops the
/// runtime in the background without flushing.
pub struct RocketMqPublisher {
    config: RocketMqConfig,
    producer: Box<dyn ProducerHandle>,
}

/// A boxed future that is `Send`.
type SendFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The producer and the runtime it runs on, behind a trait object: the client's types are so
/// deeply nested that proving `Send`/`Sync` for a struct holding them overflows the compiler's
/// recursion limit in every crate that spawns a task with the publisher; the `dyn` stops that.
trait ProducerHandle: Send + Sync {
    fn send(
        &self,
        message: Message,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<Option<SendResult>>>;
    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()>;
}

struct OwnedProducer {
    producer: DefaultMQProducer,
    host: ClientHost,
}

impl ProducerHandle for OwnedProducer {
    fn send(
        &self,
        message: Message,
        timeout_ms: u64,
    ) -> SendFuture<'_, ClientResult<Option<SendResult>>> {
        Box::pin(self.producer.send_with_timeout(message, timeout_ms))
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async move {
            let OwnedProducer { mut producer, host } = *self;
            Box::pin(producer.shutdown()).await;
            Box::pin(host.shutdown()).await;
        })
    }
}

impl std::fmt::Debug for RocketMqPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RocketMqPublisher {
    /// Validates `config`, checks that a name server answers, and starts a producer with its
    /// own client runtime.
    ///
    /// The broker itself is not contacted here: the topic's route is fetched on the first send
    /// (a new topic is created by the broker then, if it auto-creates topics).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RocketMqConfig::validate`]; [`OutboxError::Broker`] when no name server accepts a
    /// connection within 3 s or the client cannot start.
    pub async fn start(config: RocketMqConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        probe_namesrv(&config).await?;
        let host = ClientHost::new("producer")?;
        let mut producer = DefaultMQProducer::builder(host.runtime.clone())
            .producer_group(config.producer_group.clone())
            .name_server_addr(config.namesrv_addr.clone())
            .send_msg_timeout(config.send_timeout_ms())
            .build();
        // Boxed here (and below) so that callers' futures stay shallow: the client's futures are
        // deep enough to need `recursion_limit` in every crate that embeds them inline.
        if let Err(e) = Box::pin(producer.start()).await {
            Box::pin(host.shutdown()).await;
            return Err(OutboxError::Broker(format!(
                "RocketMQ producer did not start: {}",
                client_error_text(&e)
            )));
        }
        tracing::info!(namesrv = %config.namesrv_addr, group = %config.producer_group, topic = %config.topic,
            "RocketMQ publisher started");
        Ok(RocketMqPublisher {
            config,
            producer: Box::new(OwnedProducer { producer, host }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RocketMqConfig {
        &self.config
    }

    /// The message `event` becomes: topic, tag = event type, keys = business key,
    /// user properties `eventId`, `eventType`, `bizNo`, body = payload.
    ///
    /// # Errors
    /// A permanent [`PublishError`] when the message cannot be built (a property name the
    /// client reserves; cannot happen with the three fixed names).
    pub fn to_message(&self, event: &OutboxMessage) -> Result<Message, PublishError> {
        build_message(&self.config.topic, event)
    }

    /// Stops the producer, then the client runtime, then the runtime owner, in that order.
    pub async fn shutdown(self) {
        self.producer.shutdown().await;
        tracing::info!("RocketMQ publisher stopped");
    }
}

#[async_trait]
impl Publisher for RocketMqPublisher {
    async fn publish(&self, event: &OutboxMessage) -> Result<(), PublishError> {
        let message = self.to_message(event)?;
        let timeout = u64::from(self.config.send_timeout_ms());
        match self.producer.send(message, timeout).await {
            Ok(Some(result)) if result.send_status == SendStatus::SendOk => {
                tracing::debug!(
                    event_id = event.event_id,
                    msg_id = result.msg_id.as_ref().map_or("-", |m| m.as_str()),
                    offset_msg_id = result.offset_msg_id.as_deref().unwrap_or("-"),
                    queue_id = result.message_queue.as_ref().map_or(-1, |q| q.queue_id()),
                    queue_offset = result.queue_offset,
                    "RocketMQ send ok"
                );
                Ok(())
            }
            Ok(Some(result)) => Err(PublishError::retryable(format!(
                "RocketMQ send status {:?} (not SEND_OK; msgId {})",
                result.send_status,
                result.msg_id.as_ref().map_or("-", |m| m.as_str())
            ))),
            Ok(None) => Err(PublishError::retryable("RocketMQ send returned no result")),
            Err(e) => Err(classify(&e)),
        }
    }
}

/// The message for `event` on `topic` (see [`RocketMqPublisher::to_message`]).
fn build_message(topic: &str, event: &OutboxMessage) -> Result<Message, PublishError> {
    let mut builder = Message::builder()
        .topic(topic)
        .tags(event.event_type.as_str())
        .key(event.biz_no.as_str())
        .body_slice(event.payload.as_bytes());
    for (name, value) in event.properties() {
        builder = builder.raw_property(name, value).map_err(|e| {
            PublishError::permanent(format!("message property {name}: {}", error_text(&e)))
        })?;
    }
    builder.build().map_err(|e| {
        PublishError::permanent(format!("message could not be built: {}", error_text(&e)))
    })
}

/// Text of a rocketmq-rust error: its code and public message (`Display` prints `<redacted>`).
fn error_text(e: &rocketmq_error::Error) -> String {
    format!(
        "{} ({})",
        e.code().as_str(),
        e.descriptor().public_message()
    )
}

/// Text of a client error: code, public message, and the detail the client keeps in its cause.
fn client_error_text(e: &ClientError) -> String {
    let mut text = error_text(e);
    if let Some(detail) = e
        .source_ref::<MQClientException>()
        .and_then(|x| x.error_message())
    {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(code) = e.broker_response_code() {
        text.push_str(&format!("; broker response code {code}"));
    }
    if let Some(addr) = e.broker_addr() {
        text.push_str(&format!("; broker {addr}"));
    }
    text
}

/// Decides whether a failed send may succeed later.
///
/// Permanent: the client or broker refused the message itself (response code
/// `MESSAGE_ILLEGAL`: body too large or empty), the catalog says the message is too large or
/// invalid, or the topic name is illegal or forbidden. Everything else (connection refused,
/// time-outs, no route yet, broker busy, broker errors) is retryable.
pub fn classify(e: &ClientError) -> PublishError {
    let code = e.code().as_str();
    let text = client_error_text(e);
    let client = e.source_ref::<MQClientException>();
    let detail = client.and_then(|x| x.error_message()).unwrap_or_default();
    let illegal_message = client.is_some_and(|x| x.response_code() == RESPONSE_MESSAGE_ILLEGAL)
        || e.broker_response_code() == Some(RESPONSE_MESSAGE_ILLEGAL)
        || matches!(code, "broker.message.too_large" | "broker.message.invalid");
    let illegal_topic = detail.starts_with("The specified topic")
        || (detail.contains("topic[")
            && (detail.contains("forbidden") || detail.contains("conflict with system topic")));
    if illegal_message || illegal_topic {
        PublishError::permanent(format!("RocketMQ refused the message for good: {text}"))
    } else {
        PublishError::retryable(format!("RocketMQ send failed: {text}"))
    }
}

/// Creates `topic` (4 queues) when the name server has no route for it yet, and waits until
/// it has one.
async fn ensure_topic(host: &ClientHost, namesrv_addr: &str, topic: &str) -> Result<(), String> {
    const ROUTE_DEADLINE: Duration = Duration::from_secs(15);
    let group = format!(
        "outbox_topic_init_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut producer = DefaultMQProducer::builder(host.runtime.clone())
        .producer_group(group)
        .name_server_addr(namesrv_addr)
        .send_msg_timeout(3_000)
        .build();
    Box::pin(producer.start())
        .await
        .map_err(|e| client_error_text(&e))?;
    let result = Box::pin(async {
        let mut last = match Box::pin(producer.fetch_publish_message_queues(topic)).await {
            Ok(queues) if !queues.is_empty() => return Ok(()),
            Ok(_) => String::from("no queues"),
            Err(e) => client_error_text(&e),
        };
        if let Err(e) = Box::pin(producer.create_topic(
            TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC,
            topic,
            4,
            HashMap::new(),
        ))
        .await
        {
            last = client_error_text(&e);
        }
        let end = tokio::time::Instant::now() + ROUTE_DEADLINE;
        while tokio::time::Instant::now() < end {
            match Box::pin(producer.fetch_publish_message_queues(topic)).await {
                Ok(queues) if !queues.is_empty() => return Ok(()),
                Ok(_) => last = String::from("no queues"),
                Err(e) => last = client_error_text(&e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "topic {topic} has no route after {} s: {last}",
            ROUTE_DEADLINE.as_secs()
        ))
    })
    .await;
    Box::pin(producer.shutdown()).await;
    result
}

/// One message as a consumer received it, reduced to what the outbox sets (fields may be
/// added: construct it only through the consumer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedMessage {
    /// The broker's message id.
    pub msg_id: String,
    /// The `eventId` user property parsed as a number (`None` when absent or not a number).
    pub event_id: Option<i64>,
    /// Message keys (the outbox's `biz_no`).
    pub keys: Option<String>,
    /// Message tag (the outbox's `event_type`).
    pub tag: Option<String>,
    /// Body as text (lossy UTF-8).
    pub body: String,
    /// Every property of the message, system ones included.
    pub properties: HashMap<String, String>,
    /// The queue the message was read from.
    pub queue_id: i32,
    /// Its offset in that queue (the broker's consume-queue index).
    pub queue_offset: i64,
    /// Its byte offset in the broker's commit log.
    pub commit_log_offset: i64,
}

impl ReceivedMessage {
    fn from_ext(m: &MessageExt) -> Self {
        let properties: HashMap<String, String> = m
            .properties()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_str().to_owned()))
            .collect();
        ReceivedMessage {
            msg_id: m.msg_id().as_str().to_owned(),
            event_id: properties.get("eventId").and_then(|v| v.parse().ok()),
            keys: m.get_keys().map(|k| k.as_str().to_owned()),
            tag: m.get_tags().map(|t| t.as_str().to_owned()),
            body: m
                .get_body()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
            properties,
            queue_id: m.queue_id(),
            queue_offset: m.queue_offset(),
            commit_log_offset: m.commit_log_offset(),
        }
    }

    /// The user property `name`.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name).map(String::as_str)
    }
}

/// A small consumer for tests and demos: a lite pull consumer on one topic (all tags) in its own
/// consumer group, reading each queue from its first offset, with its own client runtime.
pub struct RocketMqConsumer {
    consumer: Box<dyn ConsumerHandle>,
    topic: String,
}

/// The consumer and its runtime behind a trait object (see [`ProducerHandle`]).
trait ConsumerHandle: Send + Sync {
    fn poll(&self, timeout_ms: u64) -> SendFuture<'_, Vec<ReceivedMessage>>;
    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()>;
}

struct OwnedConsumer {
    consumer: DefaultLitePullConsumer,
    host: ClientHost,
}

impl ConsumerHandle for OwnedConsumer {
    fn poll(&self, timeout_ms: u64) -> SendFuture<'_, Vec<ReceivedMessage>> {
        Box::pin(async move {
            Box::pin(self.consumer.poll_with_timeout(timeout_ms))
                .await
                .iter()
                .map(ReceivedMessage::from_ext)
                .collect()
        })
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async move {
            let OwnedConsumer { consumer, host } = *self;
            Box::pin(consumer.shutdown()).await;
            Box::pin(host.shutdown()).await;
        })
    }
}

impl std::fmt::Debug for RocketMqConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqConsumer")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl RocketMqConsumer {
    /// Subscribes `group` to `topic` through the name server(s) at `namesrv_addr` and starts.
    ///
    /// The topic is created first when missing (4 queues, through the broker's `TBW102`
    /// template), so the consumer's queues are assigned at start instead of after a later route
    /// poll (every 10 s here, 30 s by default).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for an invalid group or topic name,
    /// [`OutboxError::Broker`] when no name server answers, the topic's route does not appear
    /// within 15 s, or the consumer cannot start.
    pub async fn start(namesrv_addr: &str, group: &str, topic: &str) -> Result<Self, OutboxError> {
        check_name("consumer group", group, GROUP_MAX_LEN)?;
        let probe = RocketMqConfig::new(namesrv_addr).topic(topic);
        probe.validate()?;
        probe_namesrv(&probe).await?;
        let host = ClientHost::new("consumer")?;
        let started = Box::pin(async {
            ensure_topic(&host, namesrv_addr, topic).await?;
            let client_config = ClientConfig::builder()
                .namesrv_addr(namesrv_addr)
                // The client's minimum (default 30 s): route changes are seen sooner.
                .poll_name_server_interval(10_000)
                .build()
                .map_err(|e| client_error_text(&e))?;
            let consumer = DefaultLitePullConsumer::builder(host.runtime.clone())
                .client_options(ClientOptions::legacy(client_config))
                .consumer_group(group)
                .name_server_addr(namesrv_addr)
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .pull_batch_size(32)
                .poll_timeout_millis(500)
                // Short broker long-polls: shutdown waits for the pull in flight on each queue.
                .broker_suspend_max_time_millis(1_000)
                .consumer_timeout_millis_when_suspend(3_000)
                .topic_metadata_check_interval_millis(1_000)
                .auto_commit(true)
                .build()
                .map_err(|e| client_error_text(&e))?;
            Box::pin(consumer.subscribe_with_expression(topic, "*"))
                .await
                .map_err(|e| client_error_text(&e))?;
            Box::pin(consumer.start())
                .await
                .map_err(|e| client_error_text(&e))?;
            Ok::<_, String>(consumer)
        })
        .await;
        match started {
            Ok(consumer) => Ok(RocketMqConsumer {
                consumer: Box::new(OwnedConsumer { consumer, host }),
                topic: topic.to_owned(),
            }),
            Err(e) => {
                Box::pin(host.shutdown()).await;
                Err(OutboxError::Broker(format!(
                    "RocketMQ consumer did not start: {e}"
                )))
            }
        }
    }

    /// The messages that arrived within `timeout` (possibly none).
    pub async fn poll(&self, timeout: Duration) -> Vec<ReceivedMessage> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.consumer.poll(ms).await
    }

    /// Polls until `done` says the messages so far are enough or `deadline` passes; returns
    /// everything received, in arrival order.
    pub async fn collect_until<F>(&self, deadline: Duration, mut done: F) -> Vec<ReceivedMessage>
    where
        F: FnMut(&[ReceivedMessage]) -> bool,
    {
        let end = tokio::time::Instant::now() + deadline;
        let mut all = Vec::new();
        while !done(&all) && tokio::time::Instant::now() < end {
            all.extend(self.poll(Duration::from_millis(500)).await);
        }
        all
    }

    /// Stops the consumer, then its client runtime and runtime owner.
    pub async fn shutdown(self) {
        self.consumer.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::PublishErrorKind;

    fn kind(e: ClientError) -> (PublishErrorKind, String) {
        let p = classify(&e);
        (p.kind, p.message)
    }

    #[test]
    fn classifies_by_code_and_cause() {
        use PublishErrorKind::{Permanent, Retryable};
        // The client's own size check (MESSAGE_ILLEGAL, code 13).
        let (k, text) = kind(ClientError::from(MQClientException::new_with_code(
            RESPONSE_MESSAGE_ILLEGAL,
            "the message body size over max value, MAX: 4194304",
        )));
        assert_eq!(k, Permanent);
        assert!(
            text.contains("core.argument.invalid") && text.contains("over max value"),
            "{text}"
        );
        // The broker's size check.
        let (k, text) = kind(ClientError::broker_operation_failed(
            "SEND_MESSAGE",
            13,
            "body too large",
        ));
        assert_eq!(k, Permanent, "{text}");
        // An illegal topic.
        let (k, _) = kind(ClientError::from(MQClientException::new(
            "The specified topic[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        )));
        assert_eq!(k, Permanent);
        // No route yet: same code as the illegal message, but worth retrying.
        let (k, text) = kind(ClientError::from(MQClientException::new(
            "No route info for this topic, T",
        )));
        assert_eq!(k, Retryable);
        assert!(text.contains("No route info"), "{text}");
        // Broker busy, time-outs, connection refused.
        let (k, text) = kind(ClientError::broker_operation_failed(
            "SEND_MESSAGE",
            2,
            "system busy",
        ));
        assert_eq!(k, Retryable);
        assert!(text.contains("broker response code 2"), "{text}");
        assert_eq!(kind(ClientError::timeout("send", 3000)).0, Retryable);
        let (k, text) = kind(ClientError::from_error(rocketmq_error::Error::new(
            &rocketmq_error::TRANSPORT_CONNECTION_FAILED,
        )));
        assert_eq!(k, Retryable);
        assert!(text.contains("transport.connection.failed"), "{text}");
    }

    #[test]
    fn config_validation() {
        let ok = RocketMqConfig::new("127.0.0.1:9876;10.0.0.2:9876");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.namesrv_addrs(), vec!["127.0.0.1:9876", "10.0.0.2:9876"]);
        for addr in [
            "namesrv.example:9876",
            "nonexistent.invalid:9876",
            "rocketmq-namesrv_0:9876; [::1]:9876",
        ] {
            assert!(RocketMqConfig::new(addr).validate().is_ok(), "{addr}");
        }
        assert_eq!(ok.topic, "ORDER_EVENT_TOPIC");
        assert_eq!(ok.send_timeout, Duration::from_secs(3));
        for bad in [
            RocketMqConfig::new(" ; "),
            RocketMqConfig::new("host"),
            RocketMqConfig::new("host:0"),
            RocketMqConfig::new(":9876"),
            RocketMqConfig::new(""),
            RocketMqConfig::new("host:"),
            RocketMqConfig::new("host:65536"),
            RocketMqConfig::new("host:9876/x"),
            RocketMqConfig::new("http://host:9876"),
            RocketMqConfig::new("name server:9876"),
            RocketMqConfig::new("::1:9876"),
            RocketMqConfig::new("[not-v6]:9876"),
            RocketMqConfig::new("127.0.0.1:9876;nohost"),
            RocketMqConfig::default().topic(""),
            RocketMqConfig::default().topic("a.b"),
            RocketMqConfig::default().topic("t".repeat(128)),
            RocketMqConfig::default().producer_group("g g"),
            RocketMqConfig::default().send_timeout(Duration::ZERO),
        ] {
            assert!(
                matches!(bad.validate(), Err(OutboxError::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn config_from_env() {
        // The only test that touches these variables.
        std::env::remove_var(ENV_NAMESRV_ADDR);
        let err = RocketMqConfig::from_env().expect_err("address required");
        assert!(err.to_string().contains(ENV_NAMESRV_ADDR), "{err}");
        for garbage in ["   ", "localhost", "localhost:", "http://namesrv:9876"] {
            std::env::set_var(ENV_NAMESRV_ADDR, garbage);
            let err = RocketMqConfig::from_env().expect_err(garbage);
            assert!(
                matches!(err, OutboxError::InvalidConfig(_)),
                "{garbage}: {err}"
            );
        }
        std::env::set_var(ENV_NAMESRV_ADDR, "127.0.0.1:19876");
        std::env::set_var(ENV_PRODUCER_GROUP, "order_service");
        std::env::set_var(ENV_TOPIC, "");
        let c = RocketMqConfig::from_env().expect("valid");
        assert_eq!(
            (
                c.namesrv_addr.as_str(),
                c.producer_group.as_str(),
                c.topic.as_str()
            ),
            ("127.0.0.1:19876", "order_service", DEFAULT_TOPIC)
        );
        std::env::set_var(ENV_TOPIC, "bad topic");
        assert!(RocketMqConfig::from_env().is_err());
        for v in [ENV_NAMESRV_ADDR, ENV_PRODUCER_GROUP, ENV_TOPIC] {
            std::env::remove_var(v);
        }
    }

    #[test]
    fn message_carries_the_event() {
        let event = OutboxMessage {
            event_id: 42,
            biz_no: "ORD-42".into(),
            event_type: "ORDER_CREATED".into(),
            payload: r#"{"a":1}"#.into(),
            retry_count: 0,
        };
        let m = build_message("T", &event).expect("message");
        assert_eq!(m.topic().as_str(), "T");
        assert_eq!(
            m.get_body().map(|b| b.as_ref()),
            Some(br#"{"a":1}"#.as_ref())
        );
        assert_eq!(
            m.get_keys().map(|k| k.as_str().to_owned()).as_deref(),
            Some("ORD-42")
        );
        assert_eq!(
            m.tags().map(|t| t.to_string()).as_deref(),
            Some("ORDER_CREATED")
        );
        let props = m.get_properties();
        let get = |k: &str| {
            props
                .iter()
                .find(|(n, _)| n.as_str() == k)
                .map(|(_, v)| v.as_str().to_owned())
        };
        assert_eq!(get("eventId").as_deref(), Some("42"));
        assert_eq!(get("eventType").as_deref(), Some("ORDER_CREATED"));
        assert_eq!(get("bizNo").as_deref(), Some("ORD-42"));
    }
}
