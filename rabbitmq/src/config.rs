//! Where and how the publisher sends: [`RabbitMqConfig`], its defaults and environment
//! variables. The checks and the URL's parsing live in `config/checks.rs`.
use std::fmt;
use std::time::Duration;

use sea_orm_outbox::OutboxError;

use crate::credentials::{redact_url, Credentials, Secret, ENV_PASSWORD, ENV_USERNAME};

mod checks;

/// Default server URL: `amqp://guest:guest@127.0.0.1:5672/%2f` (the local server's `guest`
/// user, which RabbitMQ lets log in from loopback only; virtual host `/`).
pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Default exchange: `outbox`.
pub const DEFAULT_EXCHANGE: &str = "outbox";
/// Default send timeout: 3 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// Default time [`RabbitMqPublisher::start`](crate::RabbitMqPublisher::start) waits for the
/// connection, the login and the exchange check together: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default largest message body: 4 MiB (4,194,304 bytes), the outbox's own default payload
/// limit, so that every event the outbox accepts by default can be sent; far below the
/// server's `max_message_size` (128 MiB on RabbitMQ 3.x, 16 MiB from 4.0).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// The largest body RabbitMQ accepts at all (its `max_message_size` cannot exceed 512 MiB).
pub const MAX_MESSAGE_BYTES_LIMIT: usize = 512 * 1024 * 1024;
/// Default content type of every message: `application/json`.
pub const DEFAULT_CONTENT_TYPE: &str = "application/json";

/// The environment variable with the server URL (`amqp://` or `amqps://`).
pub const ENV_URL: &str = "RABBITMQ_URL";
/// The environment variable with the exchange name.
pub const ENV_EXCHANGE: &str = "OUTBOX_RABBITMQ_EXCHANGE";
/// The environment variable of [`RabbitMqConfig::declare_exchange`] (`true` or `false`).
pub const ENV_DECLARE_EXCHANGE: &str = "OUTBOX_RABBITMQ_DECLARE_EXCHANGE";
/// The environment variable with the routing key prefix.
pub const ENV_ROUTING_PREFIX: &str = "OUTBOX_RABBITMQ_ROUTING_PREFIX";
/// The environment variable of [`RabbitMqConfig::max_message_bytes`] (bytes).
pub const ENV_MAX_MESSAGE_BYTES: &str = "OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES";
/// The environment variable of [`RabbitMqConfig::send_timeout`] (milliseconds).
pub const ENV_SEND_TIMEOUT_MS: &str = "OUTBOX_RABBITMQ_SEND_TIMEOUT_MS";
/// The environment variable with the `app_id` property of every message.
pub const ENV_APP_ID: &str = "OUTBOX_RABBITMQ_APP_ID";

/// Where and how [`RabbitMqPublisher`](crate::RabbitMqPublisher) sends.
///
/// `Debug` shows the URL with its password redacted.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_rabbitmq::RabbitMqConfig;
/// let config = RabbitMqConfig::new("amqps://orders@mq.example:5671/prod")
///     .credentials("orders", "s3cret")
///     .exchange("order-events")
///     .routing_prefix("orders.")
///     .send_timeout(Duration::from_secs(3));
/// config.validate()?;
/// assert_eq!(config.routing_key("OrderPaid"), "orders.OrderPaid");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RabbitMqConfig {
    /// Server URL, `amqp://[user[:password]@]host[:port][/vhost][?heartbeat=..]` or `amqps://`
    /// for TLS (the server's certificate is checked against the system's roots). The virtual
    /// host is percent-encoded: `/` is `%2f`. Never shown with its password.
    pub url: String,
    /// User and password that replace the URL's (default none: the URL's login, or
    /// `guest`/`guest` when it has none).
    pub credentials: Option<Credentials>,
    /// The exchange every event is published to (default [`DEFAULT_EXCHANGE`]).
    pub exchange: String,
    /// Whether [`RabbitMqPublisher::start`](crate::RabbitMqPublisher::start) declares the
    /// exchange as a durable topic exchange (default `true`; declaring is idempotent and fails
    /// only when the exchange exists with another type or other arguments). With `false` it
    /// only checks that the exchange exists (a passive declare), for an exchange the
    /// application's infrastructure owns.
    pub declare_exchange: bool,
    /// Put before the event type to make the routing key (default empty: the routing key is
    /// the event type).
    pub routing_prefix: String,
    /// Longest a publish may take, the wait for the server's confirm (and a reconnect) included
    /// (default 3 s). A message without a confirm by then fails retryably. Keep it at most the
    /// worker's `send_timeout`.
    pub send_timeout: Duration,
    /// Longest [`RabbitMqPublisher::start`](crate::RabbitMqPublisher::start) waits for the
    /// connection, the login and the exchange (default 10 s).
    pub connect_timeout: Duration,
    /// Largest message body in bytes (default [`DEFAULT_MAX_MESSAGE_BYTES`], 4 MiB; keep it at
    /// most the server's `max_message_size`). A larger event fails alone and for good, before
    /// it is sent.
    pub max_message_bytes: usize,
    /// The `app_id` property of every message (default none).
    pub app_id: Option<String>,
    /// The `content_type` property of every message (default [`DEFAULT_CONTENT_TYPE`]; `None`
    /// leaves it out).
    pub content_type: Option<String>,
}

impl fmt::Debug for RabbitMqConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqConfig")
            .field("url", &redact_url(&self.url))
            .field("credentials", &self.credentials)
            .field("exchange", &self.exchange)
            .field("declare_exchange", &self.declare_exchange)
            .field("routing_prefix", &self.routing_prefix)
            .field("send_timeout", &self.send_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("app_id", &self.app_id)
            .field("content_type", &self.content_type)
            .finish()
    }
}

impl Default for RabbitMqConfig {
    fn default() -> Self {
        RabbitMqConfig::new(DEFAULT_URL)
    }
}

impl RabbitMqConfig {
    /// A configuration for the server at `url` with the default exchange, routing and limits.
    pub fn new(url: impl Into<String>) -> Self {
        RabbitMqConfig {
            url: url.into(),
            credentials: None,
            exchange: DEFAULT_EXCHANGE.to_owned(),
            declare_exchange: true,
            routing_prefix: String::new(),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            app_id: None,
            content_type: Some(DEFAULT_CONTENT_TYPE.to_owned()),
        }
    }

    /// Reads `RABBITMQ_URL` (default [`DEFAULT_URL`]), `RABBITMQ_USERNAME` and
    /// `RABBITMQ_PASSWORD` (both or neither), `OUTBOX_RABBITMQ_EXCHANGE`,
    /// `OUTBOX_RABBITMQ_DECLARE_EXCHANGE` (`true`/`false`), `OUTBOX_RABBITMQ_ROUTING_PREFIX`,
    /// `OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES` (bytes), `OUTBOX_RABBITMQ_SEND_TIMEOUT_MS`
    /// (milliseconds) and `OUTBOX_RABBITMQ_APP_ID`, and validates the result. Values are
    /// trimmed; an unset or empty variable means the default.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the variable when only one of the user and the
    /// password is set, a number or boolean does not parse, or a value fails
    /// [`RabbitMqConfig::validate`]. No message shows a password.
    pub fn from_env() -> Result<Self, OutboxError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`RabbitMqConfig::from_env`] reading the variables through `var`.
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, OutboxError> {
        let var = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = RabbitMqConfig::new(var(ENV_URL).unwrap_or_else(|| DEFAULT_URL.into()));
        config.credentials =
            Credentials::from_parts(var(ENV_USERNAME), var(ENV_PASSWORD).map(Secret::from))?;
        if let Some(exchange) = var(ENV_EXCHANGE) {
            config.exchange = exchange;
        }
        if let Some(declare) = var(ENV_DECLARE_EXCHANGE) {
            config.declare_exchange = match declare.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(OutboxError::InvalidConfig(format!(
                        "{ENV_DECLARE_EXCHANGE} must be true or false, not `{declare}`"
                    )))
                }
            };
        }
        if let Some(prefix) = var(ENV_ROUTING_PREFIX) {
            config.routing_prefix = prefix;
        }
        if let Some(bytes) = var(ENV_MAX_MESSAGE_BYTES) {
            config.max_message_bytes = bytes.parse().map_err(|_| {
                OutboxError::InvalidConfig(format!(
                    "{ENV_MAX_MESSAGE_BYTES} must be a number of bytes, not `{bytes}`"
                ))
            })?;
        }
        if let Some(ms) = var(ENV_SEND_TIMEOUT_MS) {
            let ms: u64 = ms.parse().map_err(|_| {
                OutboxError::InvalidConfig(format!(
                    "{ENV_SEND_TIMEOUT_MS} must be a number of milliseconds, not `{ms}`"
                ))
            })?;
            config.send_timeout = Duration::from_millis(ms);
        }
        config.app_id = var(ENV_APP_ID);
        config.validate()?;
        Ok(config)
    }

    /// Sets the server URL ([`RabbitMqConfig::url`]).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// Logs in as `username` with `password` instead of the URL's user.
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<Secret>) -> Self {
        self.credentials = Some(Credentials::new(username, password));
        self
    }

    /// Sets the exchange.
    pub fn exchange(mut self, exchange: impl Into<String>) -> Self {
        self.exchange = exchange.into();
        self
    }

    /// Sets whether the exchange is declared at start ([`RabbitMqConfig::declare_exchange`]).
    pub fn declare_exchange(mut self, declare: bool) -> Self {
        self.declare_exchange = declare;
        self
    }

    /// Sets the routing key prefix ([`RabbitMqConfig::routing_prefix`]).
    pub fn routing_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.routing_prefix = prefix.into();
        self
    }

    /// Sets the send timeout ([`RabbitMqConfig::send_timeout`]).
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// Sets the start timeout ([`RabbitMqConfig::connect_timeout`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the largest message body in bytes ([`RabbitMqConfig::max_message_bytes`]).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the `app_id` property of every message.
    pub fn app_id(mut self, app_id: impl Into<String>) -> Self {
        self.app_id = Some(app_id.into());
        self
    }

    /// Sets the `content_type` property of every message (`None`: left out).
    pub fn content_type(mut self, content_type: Option<&str>) -> Self {
        self.content_type = content_type.map(str::to_owned);
        self
    }

    /// The routing key of events of `event_type`: the routing prefix, then the event type.
    pub fn routing_key(&self, event_type: &str) -> String {
        format!("{}{event_type}", self.routing_prefix)
    }

    /// The outbox's rules for an event under this configuration: the core's defaults with the
    /// largest payload [`RabbitMqConfig::max_message_bytes`]. Give them to the core's
    /// `Outbox::limits` so that an event this publisher can never send is refused at write
    /// time.
    ///
    /// ```
    /// use sea_orm_outbox_rabbitmq::RabbitMqConfig;
    /// let limits = RabbitMqConfig::default().max_message_bytes(1024).event_limits();
    /// assert_eq!(limits.max_payload_bytes, 1024);
    /// ```
    pub fn event_limits(&self) -> sea_orm_outbox::EventLimits {
        sea_orm_outbox::EventLimits::new(self.max_message_bytes)
    }

    /// The URL with its password redacted, for messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// The setting that holds the password: `RABBITMQ_PASSWORD` with credentials, else
    /// `RABBITMQ_URL`.
    pub(crate) fn password_setting(&self) -> &'static str {
        if self.credentials.is_some() {
            ENV_PASSWORD
        } else {
            ENV_URL
        }
    }
}

#[cfg(test)]
mod tests;
