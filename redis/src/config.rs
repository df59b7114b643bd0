//! Where and how the publisher sends: [`RedisConfig`], its defaults, environment variables and
//! checks.
use std::fmt;
use std::time::Duration;

use redis::IntoConnectionInfo;
use sea_orm_outbox::{EventLimits, OutboxError};

use crate::credentials::{redact_url, scrub, Secret, ENV_PASSWORD, ENV_USERNAME};

/// Default server URL: `redis://127.0.0.1:6379`.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// Default stream prefix: `outbox` (an `OrderCreated` event goes to stream
/// `outbox:OrderCreated`).
pub const DEFAULT_STREAM_PREFIX: &str = "outbox";
/// Default largest stream entry, in bytes: 1 MiB.
///
/// Redis itself takes values up to `proto-max-bulk-len` (512 MB), but a stream lives in the
/// server's memory and every entry is copied to each replica and to each consumer's output
/// buffer (whose default hard limits are 256 MB for replicas). 1 MiB keeps one event far from
/// those limits and is the default message limit of Kafka (`message.max.bytes`) and NATS
/// (`max_payload`), so an event that fits one of those brokers fits here too.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// The largest [`RedisConfig::max_message_bytes`] accepted: 512 MiB, Redis's default
/// `proto-max-bulk-len` (the largest single value a client may send).
pub const MAX_MESSAGE_BYTES_LIMIT: usize = 512 * 1024 * 1024;
/// Default send timeout: 3 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest [`RedisConfig::send_timeout`] accepted: 5 minutes.
pub const MAX_SEND_TIMEOUT: Duration = Duration::from_secs(300);
/// The environment variable with the server URL (`redis://[user[:password]@]host[:port][/db]`,
/// `rediss://` for TLS with the `tls` feature).
pub const ENV_URL: &str = "REDIS_URL";
/// The environment variable with the stream prefix ([`RedisConfig::stream_prefix`]).
pub const ENV_STREAM_PREFIX: &str = "OUTBOX_REDIS_STREAM_PREFIX";
/// The environment variable with the approximate stream length cap
/// ([`RedisConfig::max_len`], entries).
pub const ENV_MAX_LEN: &str = "OUTBOX_REDIS_MAXLEN";
/// The environment variable with [`RedisConfig::max_message_bytes`] (bytes).
pub const ENV_MAX_MESSAGE_BYTES: &str = "OUTBOX_REDIS_MAX_MESSAGE_BYTES";
/// The environment variable with [`RedisConfig::send_timeout`] (milliseconds).
pub const ENV_SEND_TIMEOUT_MS: &str = "OUTBOX_REDIS_SEND_TIMEOUT_MS";

/// Where and how [`RedisPublisher`](crate::RedisPublisher) sends. `Debug` shows the URL without
/// its password and the password as `<redacted>`.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_redis::RedisConfig;
/// let config = RedisConfig::new("redis://127.0.0.1:6379")
///     .stream_prefix("orders")
///     .max_len(100_000)
///     .send_timeout(Duration::from_secs(3));
/// config.validate()?;
/// assert_eq!(config.stream_of("OrderPaid"), "orders:OrderPaid");
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// Server URL (default [`DEFAULT_URL`]); it may carry the user and password, which
    /// [`RedisConfig::username`] and [`RedisConfig::password`] override.
    pub url: String,
    /// ACL user name (default none: the URL's, else Redis's `default` user).
    pub username: Option<String>,
    /// Password of the user (default none: the URL's, else no `AUTH`).
    pub password: Option<Secret>,
    /// Stream key prefix: an event goes to stream `<stream_prefix>:<event_type>` (default
    /// [`DEFAULT_STREAM_PREFIX`]).
    pub stream_prefix: String,
    /// Approximate cap on each stream's length in entries, sent as `XADD ... MAXLEN ~ N`
    /// (default none: streams grow until trimmed otherwise). Redis trims whole macro nodes, so a
    /// stream may hold somewhat more than N entries.
    pub max_len: Option<u64>,
    /// Largest stream entry in bytes: the field names and values together (default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`], 1 MiB). A larger event is not sent: it fails alone and
    /// for good (a dead letter), also when it came in a batch.
    pub max_message_bytes: usize,
    /// Longest one `publish` or `publish_batch` call may take (default 3 s): a call still
    /// waiting for Redis then fails with a retryable error (the entries may have been added;
    /// consumers deduplicate on `eventId`). It also bounds each connection attempt and each
    /// reply. Keep it at most the worker's `send_timeout`.
    pub send_timeout: Duration,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("username", &self.username)
            .field("password", &self.password)
            .field("stream_prefix", &self.stream_prefix)
            .field("max_len", &self.max_len)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("send_timeout", &self.send_timeout)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig::new(DEFAULT_URL)
    }
}

impl RedisConfig {
    /// A configuration for the server at `url` with the defaults for everything else.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            username: None,
            password: None,
            stream_prefix: DEFAULT_STREAM_PREFIX.to_owned(),
            max_len: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            send_timeout: DEFAULT_SEND_TIMEOUT,
        }
    }

    /// Reads `REDIS_URL` (default [`DEFAULT_URL`]), `REDIS_USERNAME`, `REDIS_PASSWORD`,
    /// `OUTBOX_REDIS_STREAM_PREFIX`, `OUTBOX_REDIS_MAXLEN` (entries),
    /// `OUTBOX_REDIS_MAX_MESSAGE_BYTES` (bytes) and `OUTBOX_REDIS_SEND_TIMEOUT_MS`
    /// (milliseconds, default 3000), all optional (unset or empty means the
    /// default; values are trimmed, except the password), and validates the result.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when a number does not parse, or the result fails
    /// [`RedisConfig::validate`]; the message names the variable and never shows a password.
    pub fn from_env() -> Result<Self, OutboxError> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = RedisConfig::new(var(ENV_URL).unwrap_or_else(|| DEFAULT_URL.to_owned()));
        config.username = var(ENV_USERNAME);
        config.password = std::env::var(ENV_PASSWORD)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Secret::from);
        if let Some(prefix) = var(ENV_STREAM_PREFIX) {
            config.stream_prefix = prefix;
        }
        if let Some(n) = var(ENV_MAX_LEN) {
            config.max_len = Some(parse_number(ENV_MAX_LEN, &n)?);
        }
        if let Some(n) = var(ENV_MAX_MESSAGE_BYTES) {
            config.max_message_bytes = parse_number(ENV_MAX_MESSAGE_BYTES, &n)?;
        }
        if let Some(ms) = var(ENV_SEND_TIMEOUT_MS) {
            config.send_timeout = Duration::from_millis(parse_number(ENV_SEND_TIMEOUT_MS, &ms)?);
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`], naming the setting and its variable, when the URL is not
    /// a Redis URL (`rediss://` needs the crate's `tls` feature), a user name is given without a
    /// password (in neither the settings nor the URL), the password is empty, the stream prefix
    /// is empty or holds whitespace or control characters, `max_len` is 0, `max_message_bytes`
    /// is 0 or above [`MAX_MESSAGE_BYTES_LIMIT`], or the send timeout is zero or above
    /// [`MAX_SEND_TIMEOUT`]. No message shows a password.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let invalid = |m: String| Err(OutboxError::InvalidConfig(m));
        let info = self.connection_info()?;
        let settings = info.redis_settings();
        if settings.username().is_some() && settings.password().is_none() {
            return invalid(format!(
                "a Redis user name is set ({ENV_USERNAME} or the user of {ENV_URL}) but no \
                 password: set {ENV_PASSWORD} (or the password in {ENV_URL})"
            ));
        }
        if self.password.as_ref().is_some_and(Secret::is_empty) {
            return invalid(format!("{ENV_PASSWORD} (password) is set but empty"));
        }
        let prefix = &self.stream_prefix;
        if prefix.is_empty() || prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return invalid(format!(
                "{ENV_STREAM_PREFIX} (stream_prefix) `{}` must not be empty or hold spaces or \
                 control characters",
                prefix.escape_debug()
            ));
        }
        if self.max_len == Some(0) {
            return invalid(format!(
                "{ENV_MAX_LEN} (max_len) must be at least 1 entry; leave it unset for no cap"
            ));
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > MAX_MESSAGE_BYTES_LIMIT {
            return invalid(format!(
                "{ENV_MAX_MESSAGE_BYTES} (max_message_bytes) is {} bytes; it must be 1 to \
                 {MAX_MESSAGE_BYTES_LIMIT} (Redis's proto-max-bulk-len)",
                self.max_message_bytes
            ));
        }
        if self.send_timeout.is_zero() || self.send_timeout > MAX_SEND_TIMEOUT {
            return invalid(format!(
                "send_timeout is {:?}; it must be above zero and at most {MAX_SEND_TIMEOUT:?}",
                self.send_timeout
            ));
        }
        Ok(())
    }

    /// Sets the ACL user name ([`RedisConfig::username`]).
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Sets the password ([`RedisConfig::password`]).
    pub fn password(mut self, password: impl Into<Secret>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Sets the stream prefix ([`RedisConfig::stream_prefix`]).
    pub fn stream_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.stream_prefix = prefix.into();
        self
    }

    /// Caps each stream at about `entries` entries ([`RedisConfig::max_len`]).
    pub fn max_len(mut self, entries: u64) -> Self {
        self.max_len = Some(entries);
        self
    }

    /// Sets the largest stream entry in bytes ([`RedisConfig::max_message_bytes`]).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the send timeout ([`RedisConfig::send_timeout`]).
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// The stream an event of `event_type` goes to: `<stream_prefix>:<event_type>`.
    pub fn stream_of(&self, event_type: &str) -> String {
        format!("{}:{event_type}", self.stream_prefix)
    }

    /// The core's rules for an event under this configuration: a payload of at most
    /// [`RedisConfig::max_message_bytes`]. Give them to the core's `Outbox::limits` so that an
    /// event this publisher can never send is refused at write time (an event whose payload
    /// fits can still exceed the limit with its headers and key, and then fails when sent).
    pub fn event_limits(&self) -> EventLimits {
        EventLimits::new(self.max_message_bytes)
    }

    /// The URL shown without its password.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// What the client connects with: the URL's settings, the user name and password of the
    /// configuration over the URL's.
    pub(crate) fn connection_info(&self) -> Result<redis::ConnectionInfo, OutboxError> {
        let info = self.url.as_str().into_connection_info().map_err(|e| {
            let hint = if self.url.starts_with("rediss") {
                "; `rediss://` needs the `tls` feature of sea-orm-outbox-redis"
            } else {
                ""
            };
            OutboxError::InvalidConfig(format!(
                "{ENV_URL} (url) `{}` is not a Redis URL: {}{hint}",
                self.redacted_url(),
                scrub(&e.to_string(), self.password.as_ref())
            ))
        })?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password.expose());
        }
        Ok(info.set_redis_settings(settings))
    }
}

/// `value` of variable `name` as a number.
fn parse_number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, OutboxError> {
    value.parse().map_err(|_| {
        OutboxError::InvalidConfig(format!("{name} is `{value}`: not a non-negative integer"))
    })
}

#[cfg(test)]
mod tests;
