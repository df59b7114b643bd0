//! Where and how the publisher sends: [`RocketMqConfig`], its defaults and environment
//! variables, and the checks on addresses, names and the send timeout.
use std::collections::BTreeMap;
use std::time::Duration;

use super::credentials::{Credentials, SecretKey, ENV_ACCESS_KEY, ENV_SECRET_KEY};
use sea_orm_outbox::config::WorkerConfig;
use sea_orm_outbox::error::OutboxError;

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
/// Default largest message body, in bytes: 4 MiB, the broker's default `maxMessageSize` and
/// the client's default (`DefaultMQProducer::max_message_size`).
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 4 * 1024 * 1024;
/// Default largest batch, in bytes of encoded messages: 1 MiB, the split size of RocketMQ's
/// own batch example (`ListSplitter`, "Batch Example" in the RocketMQ docs), well inside
/// the 4 MiB a batch as a whole may have.
pub const DEFAULT_MAX_BATCH_BYTES: u32 = 1024 * 1024;

/// How [`RocketMqPublisher`](super::RocketMqPublisher) moves sends off a broker that fails, in
/// a cluster of several broker masters (one broker: all three behave alike).
///
/// What the rocketmq-rust 1.0 client does by itself (observed: RELIABILITY.md): it sends round
/// robin over every queue of its cached route (refreshed from the name server every 30 s). A
/// killed broker is handled: the name server drops it at once and a send that cannot connect is
/// sent again to another broker within the call. A hung broker (SIGSTOP, a frozen host) stays
/// listed for 120 s, and every send that picks one of its queues waits the whole send timeout;
/// the client's latency fault tolerance (off by default) isolates it, but only after some kinds
/// of failure.
///
/// Parsed from `outbox`, `client` or `off` ([`ENV_FAILOVER`]).
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_rocketmq::Failover;
/// use sea_orm_outbox_rocketmq::RocketMqConfig;
/// let config = RocketMqConfig::new("10.0.0.1:9876;10.0.0.2:9876")
///     .failover(Failover::Outbox) // the default
///     .broker_avoidance(Duration::from_secs(30));
/// config.validate()?;
/// assert_eq!("client".parse::<Failover>()?, Failover::Client);
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Failover {
    /// The publisher chooses each send's queue from the client's route itself, round robin
    /// over the brokers that have not failed lately: a broker whose send failed (refused,
    /// timed out, closed, an error response) is avoided for
    /// [`RocketMqConfig::broker_avoidance`]; then one send tries it again (the others still
    /// avoid it) and a success brings it back. When every broker is avoided, sends go to the
    /// one whose avoidance ends first. The client's latency fault tolerance is on as well. The
    /// default.
    #[default]
    Outbox,
    /// The client chooses the queue with its latency fault tolerance and fault detector on
    /// (`set_send_latency_fault_enable`, `set_start_detector_enable`).
    Client,
    /// The client as it comes (round robin, no fault tolerance): for comparison only.
    Off,
}

impl Failover {
    /// The mode's name as [`Failover::from_str`](std::str::FromStr) reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Failover::Outbox => "outbox",
            Failover::Client => "client",
            Failover::Off => "off",
        }
    }
}

impl std::fmt::Display for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Failover {
    type Err = OutboxError;

    /// `outbox`, `client` or `off` (ASCII case and surrounding spaces ignored).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the three values for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "outbox" => Ok(Failover::Outbox),
            "client" => Ok(Failover::Client),
            "off" => Ok(Failover::Off),
            other => Err(OutboxError::InvalidConfig(format!(
                "RocketMQ failover `{other}` is unknown: give outbox, client or off"
            ))),
        }
    }
}

/// Longest topic name RocketMQ accepts.
const TOPIC_MAX_LEN: usize = 127;
/// Longest group name RocketMQ accepts.
pub(super) const GROUP_MAX_LEN: usize = 255;

/// Where and how [`RocketMqPublisher`](super::RocketMqPublisher) sends.
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
    /// Whether [`RocketMqPublisher::start`](super::RocketMqPublisher::start) asks a broker
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
    /// here and fails in [`RocketMqPublisher::start`](super::RocketMqPublisher::start).
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
        config.credentials = Credentials::from_parts(
            var(ENV_ACCESS_KEY),
            var(ENV_SECRET_KEY).map(SecretKey::from),
        )?;
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
        secret_key: impl Into<SecretKey>,
    ) -> Self {
        self.credentials = Some(Credentials::new(access_key, secret_key));
        self
    }

    /// Whether [`RocketMqPublisher::start`](super::RocketMqPublisher::start) checks the
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
    /// largest payload [`RocketMqConfig::max_message_bytes`]. Pass them to the core's
    /// `with_event_limited` or `transactional_publish_limited` so that an event this publisher
    /// can never send is refused at write time.
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

    /// Checks that the configuration can work.
    ///
    /// Only the form of the addresses is checked here; whether a name resolves is found out by
    /// [`RocketMqPublisher::start`](super::RocketMqPublisher::start), which fails with
    /// [`OutboxError::Broker`] when none answers.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when there is no name server address or one is not
    /// `host:port` (host: a name or IPv4 address of letters, digits, `.`, `-`, `_`, or an IPv6
    /// address in brackets; port: 1 to 65535; no scheme, path or spaces), the group or topic is
    /// empty, too long or has characters RocketMQ refuses (allowed: letters, digits, `%`, `|`,
    /// `_`, `-`; the default topic and every topic of the map; no RocketMQ system topic such as
    /// `TBW102` or `rmq_sys_*`), the send timeout is zero or longer than `u32::MAX`
    /// milliseconds, the broker avoidance is shorter than 1 ms,
    /// `max_message_bytes` or `max_batch_bytes` is zero or `max_batch_bytes` exceeds
    /// `max_message_bytes`, or the credentials fail [`Credentials::validate`].
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
        check_topic("topic", &self.topic)?;
        for (event_type, topic) in &self.topics {
            check_topic(&format!("topic of `{event_type}`"), topic)?;
        }
        if self.send_timeout.is_zero() || u32::try_from(self.send_timeout.as_millis()).is_err() {
            return bad(format!(
                "RocketMQ send_timeout must be between 1 ms and {} ms",
                u32::MAX
            ));
        }
        if let Some(c) = &self.credentials {
            c.validate()?;
        }
        if self.broker_avoidance < Duration::from_millis(1) {
            return bad("RocketMQ broker_avoidance must be at least 1 ms".into());
        }
        if self.max_message_bytes == 0 || self.max_batch_bytes == 0 {
            return bad("RocketMQ max_message_bytes and max_batch_bytes must be at least 1".into());
        }
        if self.max_batch_bytes > self.max_message_bytes {
            return bad(format!(
                "RocketMQ max_batch_bytes ({}) must be at most max_message_bytes ({}): a batch is \
                 one message to the broker",
                self.max_batch_bytes, self.max_message_bytes
            ));
        }
        Ok(())
    }

    /// [`RocketMqConfig::validate`], and checks that the send timeout fits the worker that will
    /// call this publisher, by the one send-timeout rule
    /// ([`WorkerConfig::check_publisher_send_timeout`]): at most a third of its lease (a send
    /// still running when the lease ends would be sent again by another instance) and at most
    /// its `send_timeout` (else the worker gives up before the client does and a late success
    /// is recorded as a failure).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when either check fails.
    pub fn validate_for(&self, worker: &WorkerConfig) -> Result<(), OutboxError> {
        self.validate()?;
        worker.check_publisher_send_timeout("RocketMQ send_timeout", self.send_timeout)
    }

    /// The send timeout in the client's unit, milliseconds (saturating; [`Self::validate`]
    /// refuses more than `u32::MAX`).
    pub(super) fn send_timeout_ms(&self) -> u32 {
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

/// A topic events may be sent to: a valid name ([`check_name`]) that is not one of RocketMQ's
/// system topics (`TBW102`, `SCHEDULE_TOPIC_XXXX`, `rmq_sys_*`, ...) nor one the broker refuses
/// sends to (`%RETRY%`/`%DLQ%` topics): the client's `TopicValidator` rules, which would refuse
/// every send for good and make every event of the topic a dead letter.
fn check_topic(what: &str, topic: &str) -> Result<(), OutboxError> {
    use rocketmq_model::common::topic::TopicValidator;
    check_name(what, topic, TOPIC_MAX_LEN)?;
    if TopicValidator::is_system_topic(topic) || TopicValidator::is_not_allowed_send_topic(topic) {
        return Err(OutboxError::InvalidConfig(format!(
            "RocketMQ {what} `{topic}` is a system topic of RocketMQ, which takes no events"
        )));
    }
    Ok(())
}

/// Topic and group names: 1..=max characters out of `[%|a-zA-Z0-9_-]`.
pub(super) fn check_name(what: &str, value: &str, max: usize) -> Result<(), OutboxError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ok.topic, "OUTBOX_EVENT_TOPIC");
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
            RocketMqConfig::default().topic_for("ORDER_PAID", "bad topic"),
            RocketMqConfig::default().topic("TBW102"),
            RocketMqConfig::default().topic_for("ORDER_PAID", "SCHEDULE_TOPIC_XXXX"),
            RocketMqConfig::default().send_timeout(Duration::ZERO),
            RocketMqConfig::default().broker_avoidance(Duration::ZERO),
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
        std::env::set_var(ENV_TOPICS, "ORDER_PAID=PAY_T");
        let c = RocketMqConfig::from_env().expect("valid");
        assert_eq!(c.topic_of("ORDER_PAID"), "PAY_T");
        std::env::set_var(ENV_TOPICS, "ORDER_PAID");
        let err = RocketMqConfig::from_env().expect_err("no =");
        assert!(err.to_string().contains(ENV_TOPICS), "{err}");
        std::env::set_var(ENV_TOPICS, "ORDER_PAID=bad.topic");
        assert!(RocketMqConfig::from_env().is_err());
        std::env::remove_var(ENV_TOPICS);
        std::env::set_var(ENV_TOPIC, "bad topic");
        assert!(RocketMqConfig::from_env().is_err());
        std::env::remove_var(ENV_TOPIC);
        assert_eq!(RocketMqConfig::from_env().expect("valid").credentials, None);
        // Credentials: both or neither; the secret is never in an error or in Debug.
        std::env::set_var(ENV_SECRET_KEY, "env-secret-4711");
        let err = RocketMqConfig::from_env().expect_err("secret alone");
        assert!(
            err.to_string().contains(ENV_ACCESS_KEY) && !err.to_string().contains("4711"),
            "{err}"
        );
        std::env::set_var(ENV_ACCESS_KEY, " order-svc ");
        let c = RocketMqConfig::from_env().expect("both");
        let creds = c.credentials.as_ref().expect("credentials");
        assert_eq!(
            (creds.access_key(), creds.secret_key().expose()),
            ("order-svc", "env-secret-4711")
        );
        assert!(!format!("{c:?}").contains("4711"), "{c:?}");
        std::env::remove_var(ENV_SECRET_KEY);
        let err = RocketMqConfig::from_env().expect_err("access key alone");
        assert!(err.to_string().contains(ENV_SECRET_KEY), "{err}");
        std::env::remove_var(ENV_ACCESS_KEY);
        assert_eq!(c.failover, Failover::Outbox);
        std::env::set_var(ENV_FAILOVER, " Client ");
        assert_eq!(
            RocketMqConfig::from_env().expect("valid").failover,
            Failover::Client
        );
        std::env::set_var(ENV_FAILOVER, "sometimes");
        let err = RocketMqConfig::from_env().expect_err("unknown failover");
        assert!(err.to_string().contains("outbox, client or off"), "{err}");
        std::env::remove_var(ENV_FAILOVER);
        std::env::set_var(ENV_TOPIC, "bad topic");
        assert!(RocketMqConfig::from_env().is_err());
        for v in [
            ENV_NAMESRV_ADDR,
            ENV_PRODUCER_GROUP,
            ENV_TOPIC,
            ENV_TOPICS,
            ENV_ACCESS_KEY,
            ENV_SECRET_KEY,
            ENV_FAILOVER,
        ] {
            std::env::remove_var(v);
        }
    }

    #[test]
    fn topic_map() {
        let c = RocketMqConfig::default()
            .topics_from_spec(" ORDER_PAID = PAY_T , ORDER_SHIPPED=SHIP_T,")
            .expect("spec");
        assert_eq!(c.topic_of("ORDER_PAID"), "PAY_T");
        assert_eq!(c.topic_of("ORDER_SHIPPED"), "SHIP_T");
        assert_eq!(c.topic_of("ORDER_CREATED"), DEFAULT_TOPIC);
        assert_eq!(c.all_topics(), vec![DEFAULT_TOPIC, "PAY_T", "SHIP_T"]);
        assert!(c.validate().is_ok());
        for bad in ["ORDER_PAID", "=T", "ORDER_PAID=", "A=T,A=U"] {
            let err = RocketMqConfig::default()
                .topics_from_spec(bad)
                .expect_err(bad);
            assert!(matches!(err, OutboxError::InvalidConfig(_)), "{bad}: {err}");
        }
        assert!(RocketMqConfig::default().topics_from_spec("").is_ok());
    }

    #[test]
    fn failover_names() {
        for f in [Failover::Outbox, Failover::Client, Failover::Off] {
            assert_eq!(f.as_str().parse::<Failover>().expect("own name"), f);
            assert_eq!(f.to_string(), f.as_str());
        }
        assert_eq!(Failover::default(), Failover::Outbox);
        assert!("".parse::<Failover>().is_err());
    }

    #[test]
    fn send_timeout_must_fit_the_worker() {
        let worker = WorkerConfig::default(); // send timeout 3 s, lease 10 min
        assert!(RocketMqConfig::default().validate_for(&worker).is_ok());
        let slow = RocketMqConfig::default().send_timeout(Duration::from_secs(4));
        assert!(matches!(
            slow.validate_for(&worker),
            Err(OutboxError::InvalidConfig(_))
        ));
        let short_lease = WorkerConfig::default()
            .lease_renewal(false)
            .lease(Duration::from_secs(6))
            .send_timeout(Duration::from_secs(3));
        let err = RocketMqConfig::default()
            .validate_for(&short_lease)
            .expect_err("3 s is more than a third of a 6 s lease");
        assert!(err.to_string().contains("RocketMQ send_timeout"), "{err}");
        // Invalid on its own: `validate` runs first.
        assert!(RocketMqConfig::new("").validate_for(&worker).is_err());
    }
}
