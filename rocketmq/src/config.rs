//! Where and how the publisher sends: [`RocketMqConfig`], its defaults and environment
//! variables, and the checks on addresses, names and the send timeout.
use std::collections::BTreeMap;
use std::time::Duration;

use super::credentials::{Credentials, Secret, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use sea_orm_outbox::OutboxError;

mod checks;
mod failover;

pub(crate) use checks::{check_name, GROUP_MAX_LEN};
pub use failover::Failover;

/// Default topic: `OUTBOX_EVENT_TOPIC`, where an event goes when neither
/// [`RocketMqConfig::topic`] nor `OUTBOX_TOPIC` names one. A service normally names its own
/// (e.g. `ORDER_EVENT_TOPIC`).
pub const DEFAULT_TOPIC: &str = "OUTBOX_EVENT_TOPIC";
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
/// The environment variable that turns the start-up check of the credentials off (`false`) or
/// on (`true`, the default): [`RocketMqConfig::verify_credentials`].
pub const ENV_VERIFY_CREDENTIALS: &str = "ROCKETMQ_VERIFY_CREDENTIALS";
/// The environment variable with the default topic.
pub const ENV_TOPIC: &str = "OUTBOX_TOPIC";
/// The environment variable with the topic of each event type:
/// `EVENT_TYPE=TOPIC[,EVENT_TYPE=TOPIC...]`, e.g. `ORDER_PAID=PAYMENT_TOPIC,ORDER_SHIPPED=SHIPPING_TOPIC`.
pub const ENV_TOPICS: &str = "OUTBOX_TOPICS";
/// The environment variable with the failover mode: `outbox`, `client` or `off` ([`Failover`]).
pub const ENV_FAILOVER: &str = "ROCKETMQ_FAILOVER";
/// Environment variable of [`RocketMqConfig::max_message_bytes`] (bytes).
pub const ENV_MAX_MESSAGE_BYTES: &str = "ROCKETMQ_MAX_MESSAGE_BYTES";
/// Environment variable of [`RocketMqConfig::max_batch_bytes`] (bytes).
pub const ENV_MAX_BATCH_BYTES: &str = "ROCKETMQ_MAX_BATCH_BYTES";
/// Default time a broker is avoided after a failed send ([`RocketMqConfig::broker_avoidance`]):
/// 30 s, which outlasts a broker that hangs for 20 s and is still short next to the 120 s the
/// name server keeps listing a hung broker.
pub const DEFAULT_BROKER_AVOIDANCE: Duration = Duration::from_secs(30);
pub use crate::limits::DEFAULT_MAX_MESSAGE_BYTES;
/// Default largest batch, in bytes of encoded messages: 1 MiB, the split size of RocketMQ's
/// own batch example (`ListSplitter`, "Batch Example" in the RocketMQ docs), well inside
/// the 4 MiB a batch as a whole may have.
pub const DEFAULT_MAX_BATCH_BYTES: u32 = 1024 * 1024;

/// Where and how [`RocketMqPublisher`](crate::RocketMqPublisher) sends.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_rocketmq::RocketMqConfig;
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
    /// The default topic: where an event goes when [`RocketMqConfig::topics`] has no entry for
    /// its type (default [`DEFAULT_TOPIC`]).
    pub topic: String,
    /// The topic of each event type (`event_type` → topic); types not listed go to
    /// [`RocketMqConfig::topic`]. Set with [`RocketMqConfig::topic_for`].
    pub topics: BTreeMap<String, String>,
    /// Longest one send may take, the client's internal retries included (default 3 s). Keep it
    /// at most the worker's `send_timeout` and well below its lease
    /// ([`RocketMqConfig::validate_for`]). It also bounds each attempt: a send that timed out
    /// is never sent again within the same call (the broker may have stored it); the outbox's
    /// retry sends it again later. The publisher enforces it itself as well: a send the client
    /// has not answered 500 milliseconds after it (a route lookup through unreachable name
    /// servers can outlast the client's own timeout) fails with a retryable `RocketMQ send
    /// timed out` error.
    pub send_timeout: Duration,
    /// Access key and secret key for a broker with authentication (default none: requests
    /// are not signed). `Debug` shows the access key only.
    pub credentials: Option<Credentials>,
    /// Whether [`RocketMqPublisher::start`](crate::RocketMqPublisher::start) asks a broker
    /// whether it accepts the credentials (or their absence) before it returns (default
    /// `true`): see its documentation.
    pub verify_credentials: bool,
    /// How sends move off a broker that fails (default [`Failover::Outbox`]).
    pub failover: Failover,
    /// With [`Failover::Outbox`]: how long a broker is avoided after a send to it failed
    /// (default [`DEFAULT_BROKER_AVOIDANCE`], 30 s); at least 1 ms.
    pub broker_avoidance: Duration,
    /// Largest message body the client sends, in bytes (default [`DEFAULT_MAX_MESSAGE_BYTES`],
    /// 4 MiB; keep it at most the broker's `maxMessageSize`). A larger event fails alone and
    /// for good (a dead letter), also when it came in a batch.
    pub max_message_bytes: u32,
    /// Largest batch message, in bytes of the encoded messages it carries (default
    /// [`DEFAULT_MAX_BATCH_BYTES`], 1 MiB; at most `max_message_bytes`). A relay's batch is
    /// cut into as many RocketMQ batches as this needs; an event larger than this on its own
    /// is sent alone.
    pub max_batch_bytes: u32,
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
            topics: BTreeMap::new(),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            credentials: None,
            verify_credentials: true,
            failover: Failover::default(),
            broker_avoidance: DEFAULT_BROKER_AVOIDANCE,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
        }
    }

    /// Reads `ROCKETMQ_NAMESRV_ADDR` (required), `ROCKETMQ_PRODUCER_GROUP`, `OUTBOX_TOPIC` and
    /// `OUTBOX_TOPICS` (optional; empty means the default; see [`ENV_TOPICS`] and
    /// [`RocketMqConfig::topics_from_spec`]), `ROCKETMQ_ACCESS_KEY` and `ROCKETMQ_SECRET_KEY`
    /// (both or neither; empty means unset), `ROCKETMQ_FAILOVER` (optional; empty means the
    /// default), `ROCKETMQ_MAX_MESSAGE_BYTES` and `ROCKETMQ_MAX_BATCH_BYTES` (optional, bytes)
    /// and validates the result. Values are trimmed.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `ROCKETMQ_NAMESRV_ADDR` is unset, empty or only
    /// spaces, only one of `ROCKETMQ_ACCESS_KEY` and `ROCKETMQ_SECRET_KEY` is set (the
    /// message never shows the secret), `ROCKETMQ_FAILOVER` is not `outbox`, `client` or `off`,
    /// `ROCKETMQ_VERIFY_CREDENTIALS` (optional: `false` turns the start-up check of the
    /// credentials off, see [`RocketMqConfig::verify_credentials`]) is not `true` or `false`,
    /// a byte limit is not a number, or a value fails [`RocketMqConfig::validate`] (an address
    /// that is not `host:port`, for example). A well-formed name that resolves nowhere passes
    /// here and fails in [`RocketMqPublisher::start`](crate::RocketMqPublisher::start).
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
        if let Some(spec) = var(ENV_TOPICS) {
            config = config
                .topics_from_spec(&spec)
                .map_err(|e| OutboxError::InvalidConfig(format!("{ENV_TOPICS}: {e}")))?;
        }
        config.credentials =
            Credentials::from_parts(var(ENV_ACCESS_KEY), var(ENV_SECRET_KEY).map(Secret::from))?;
        for (name, set) in [
            (ENV_MAX_MESSAGE_BYTES, &mut config.max_message_bytes),
            (ENV_MAX_BATCH_BYTES, &mut config.max_batch_bytes),
        ] {
            if let Some(v) = var(name) {
                *set = v.parse().map_err(|_| {
                    OutboxError::InvalidConfig(format!(
                        "{name} must be a number of bytes, not `{v}`"
                    ))
                })?;
            }
        }
        if let Some(failover) = var(ENV_FAILOVER) {
            config.failover = failover.parse()?;
        }
        if let Some(verify) = var(ENV_VERIFY_CREDENTIALS) {
            config.verify_credentials = match verify.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    return Err(OutboxError::InvalidConfig(format!(
                        "{ENV_VERIFY_CREDENTIALS} must be true or false, not `{verify}`"
                    )))
                }
            };
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets the producer group.
    pub fn producer_group(mut self, group: impl Into<String>) -> Self {
        self.producer_group = group.into();
        self
    }

    /// Sets the default topic (for event types without a [`RocketMqConfig::topic_for`]).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into();
        self
    }

    /// Sends events of type `event_type` to `topic` instead of the default topic.
    ///
    /// ```
    /// use sea_orm_outbox_rocketmq::RocketMqConfig;
    /// let config = RocketMqConfig::new("127.0.0.1:9876")
    ///     .topic("ORDER_EVENT_TOPIC")
    ///     .topic_for("ORDER_PAID", "PAYMENT_EVENT_TOPIC");
    /// assert_eq!(config.topic_of("ORDER_PAID"), "PAYMENT_EVENT_TOPIC");
    /// assert_eq!(config.topic_of("ORDER_CREATED"), "ORDER_EVENT_TOPIC");
    /// ```
    pub fn topic_for(mut self, event_type: impl Into<String>, topic: impl Into<String>) -> Self {
        self.topics.insert(event_type.into(), topic.into());
        self
    }

    /// Adds the topics of `spec`, `EVENT_TYPE=TOPIC` pairs separated by `,` (spaces around
    /// them are ignored; an empty spec adds nothing), as by [`RocketMqConfig::topic_for`]. The
    /// format of [`ENV_TOPICS`] and of the tool's `--topic-map`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a pair without `=`, an empty event type or topic, or
    /// an event type given twice. Topic names are checked by [`RocketMqConfig::validate`].
    pub fn topics_from_spec(mut self, spec: &str) -> Result<Self, OutboxError> {
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((event_type, topic)) = pair.split_once('=') else {
                return Err(OutboxError::InvalidConfig(format!(
                    "topic map entry `{pair}` is not EVENT_TYPE=TOPIC"
                )));
            };
            let (event_type, topic) = (event_type.trim(), topic.trim());
            if event_type.is_empty() || topic.is_empty() {
                return Err(OutboxError::InvalidConfig(format!(
                    "topic map entry `{pair}` needs both an event type and a topic"
                )));
            }
            if self.topics.contains_key(event_type) {
                return Err(OutboxError::InvalidConfig(format!(
                    "topic map names event type `{event_type}` twice"
                )));
            }
            self.topics.insert(event_type.to_owned(), topic.to_owned());
        }
        Ok(self)
    }

    /// The topic events of `event_type` go to: its [`RocketMqConfig::topic_for`] entry, else
    /// the default topic.
    pub fn topic_of(&self, event_type: &str) -> &str {
        self.topics
            .get(event_type)
            .map_or(self.topic.as_str(), String::as_str)
    }

    /// Every topic this configuration sends to: the default one and those of the map, each
    /// once, sorted.
    pub fn all_topics(&self) -> Vec<&str> {
        let mut all: Vec<&str> = std::iter::once(self.topic.as_str())
            .chain(self.topics.values().map(String::as_str))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Sets the send timeout.
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// Signs every broker request with `access_key` and `secret_key` (RocketMQ
    /// authentication / ACL). The secret is never shown: not by `Debug`, logs or errors.
    pub fn credentials(
        mut self,
        access_key: impl Into<String>,
        secret_key: impl Into<Secret>,
    ) -> Self {
        self.credentials = Some(Credentials::new(access_key, secret_key));
        self
    }

    /// Whether [`RocketMqPublisher::start`](crate::RocketMqPublisher::start) checks the
    /// credentials with a broker before it returns (default `true`). Turn it off for a user
    /// that may publish to the topic but not read its offsets (an ACL with `Pub` only and
    /// authorization on): a rejection is then found by the first send, and the events stay
    /// `WAIT` uncounted ([`sea_orm_outbox::PublishErrorKind::Configuration`]).
    pub fn verify_credentials(mut self, verify: bool) -> Self {
        self.verify_credentials = verify;
        self
    }

    /// Sets the failover mode ([`Failover`]).
    pub fn failover(mut self, failover: Failover) -> Self {
        self.failover = failover;
        self
    }

    /// Sets how long a broker is avoided after a failed send ([`Failover::Outbox`]).
    pub fn broker_avoidance(mut self, avoidance: Duration) -> Self {
        self.broker_avoidance = avoidance;
        self
    }

    /// Sets the largest message body in bytes ([`RocketMqConfig::max_message_bytes`]).
    pub fn max_message_bytes(mut self, bytes: u32) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the largest batch in bytes ([`RocketMqConfig::max_batch_bytes`]).
    pub fn max_batch_bytes(mut self, bytes: u32) -> Self {
        self.max_batch_bytes = bytes;
        self
    }

    /// RocketMQ's rules for an event under this configuration: [`crate::EVENT_LIMITS`] with the
    /// largest payload [`RocketMqConfig::max_message_bytes`]. Give them to the core's
    /// `Outbox::limits` so that an event this publisher can never send is refused at write
    /// time.
    ///
    /// ```
    /// use sea_orm_outbox_rocketmq::RocketMqConfig;
    /// let limits = RocketMqConfig::new("127.0.0.1:9876").max_message_bytes(1024).event_limits();
    /// assert_eq!(limits.max_payload_bytes, 1024);
    /// ```
    pub fn event_limits(&self) -> sea_orm_outbox::EventLimits {
        crate::limits::limits_for(self.max_message_bytes as usize)
    }

    /// The name server addresses, one per `;`-separated entry.
    pub fn namesrv_addrs(&self) -> Vec<&str> {
        self.namesrv_addr
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// The send timeout in the client's unit, milliseconds (saturating; [`Self::validate`]
    /// refuses more than `u32::MAX`).
    pub(super) fn send_timeout_ms(&self) -> u32 {
        u32::try_from(self.send_timeout.as_millis()).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests;
