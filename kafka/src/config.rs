//! Where and how the publisher sends: [`KafkaConfig`], its defaults and environment variables,
//! the checks on the brokers, the topic prefix and the timeouts, and the librdkafka settings
//! they become.
use std::path::PathBuf;
use std::time::Duration;

use rdkafka::ClientConfig;
use sea_orm_outbox::OutboxError;

use crate::credentials::{Credentials, Secret, ENV_PASSWORD, ENV_SASL_MECHANISM, ENV_USERNAME};
use crate::message::{check_topic_part, DEFAULT_MAX_MESSAGE_BYTES};

/// Default bootstrap brokers: `127.0.0.1:9092`.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// Default topic prefix: `outbox` (events go to topic `outbox.<event_type>`).
pub const DEFAULT_TOPIC_PREFIX: &str = "outbox";
/// Default send timeout: 3 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// Default connect timeout: 5 s (the metadata request at start).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The environment variable with the bootstrap brokers: `host:port`, several separated by `,`.
pub const ENV_BROKERS: &str = "KAFKA_BROKERS";
/// The environment variable with the topic prefix ([`KafkaConfig::topic_prefix`]).
pub const ENV_TOPIC_PREFIX: &str = "OUTBOX_KAFKA_TOPIC_PREFIX";
/// The environment variable with the send timeout, in milliseconds
/// ([`KafkaConfig::send_timeout`]).
pub const ENV_SEND_TIMEOUT_MS: &str = "OUTBOX_KAFKA_SEND_TIMEOUT_MS";
/// The environment variable with the largest message in bytes
/// ([`KafkaConfig::max_message_bytes`]).
pub const ENV_MAX_MESSAGE_BYTES: &str = "OUTBOX_KAFKA_MAX_MESSAGE_BYTES";
/// The environment variable that turns TLS on (`true`/`false`, default `false`; a CA file
/// turns it on as well).
pub const ENV_TLS: &str = "KAFKA_TLS";
/// The environment variable with the path of a PEM file of the CA certificates that sign the
/// brokers' certificates (turns TLS on).
pub const ENV_TLS_CA_FILE: &str = "KAFKA_TLS_CA_FILE";

/// Longest wait between two reconnection attempts to a broker (`reconnect.backoff.max.ms`):
/// 1 s, so that the relay delivers again soon after a broker comes back.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Where and how [`KafkaPublisher`](crate::KafkaPublisher) sends.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_kafka::{Credentials, KafkaConfig};
/// let config = KafkaConfig::new("127.0.0.1:9092")
///     .topic_prefix("order")
///     .send_timeout(Duration::from_secs(3))
///     .credentials(Credentials::new("order-svc", "s3cret"));
/// config.validate()?;
/// assert_eq!(config.topic_of("Paid"), "order.Paid");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
///
/// `Debug` shows no secret of the login.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct KafkaConfig {
    /// Bootstrap brokers: `host:port`, several separated by `,` (default [`DEFAULT_BROKERS`]).
    /// The client then talks to the brokers the cluster advertises.
    pub brokers: String,
    /// Topic prefix: an event of type `T` goes to topic `<topic_prefix>.T` (default
    /// [`DEFAULT_TOPIC_PREFIX`]). Letters, digits, `.`, `_` and `-`. The topics must exist
    /// (or the cluster must create them on first use).
    pub topic_prefix: String,
    /// Longest one `publish` or `publish_batch` call may take, the wait for the brokers' acks
    /// included (default [`DEFAULT_SEND_TIMEOUT`], 3 s); also librdkafka's
    /// `message.timeout.ms`. Keep it at most the worker's `send_timeout`.
    pub send_timeout: Duration,
    /// Longest the metadata request at start may take (default [`DEFAULT_CONNECT_TIMEOUT`],
    /// 5 s).
    pub connect_timeout: Duration,
    /// The SASL login, for a cluster that requires one (default none).
    pub credentials: Option<Credentials>,
    /// Whether to talk TLS to the brokers (default `false`; set by a CA file too).
    pub tls: bool,
    /// PEM file of the CA certificates that sign the brokers' certificates (default none: the
    /// system's CA store). Setting it turns TLS on.
    pub tls_ca_file: Option<PathBuf>,
    /// Largest message the producer sends, in bytes, key, headers and overhead included
    /// (librdkafka's `message.max.bytes`; default [`DEFAULT_MAX_MESSAGE_BYTES`]). A larger
    /// event fails for good. Keep it at most the topics' `max.message.bytes`.
    pub max_message_bytes: usize,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig::new(DEFAULT_BROKERS)
    }
}

impl KafkaConfig {
    /// A configuration for the bootstrap brokers `brokers` with the default prefix, timeouts
    /// and message size, no login and no TLS.
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaConfig {
            brokers: brokers.into(),
            topic_prefix: DEFAULT_TOPIC_PREFIX.to_owned(),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            credentials: None,
            tls: false,
            tls_ca_file: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Reads `KAFKA_BROKERS` (default [`DEFAULT_BROKERS`]), `OUTBOX_KAFKA_TOPIC_PREFIX`
    /// (default [`DEFAULT_TOPIC_PREFIX`]), `OUTBOX_KAFKA_SEND_TIMEOUT_MS` (milliseconds,
    /// default 3000), `OUTBOX_KAFKA_MAX_MESSAGE_BYTES` (default 1000000), `KAFKA_TLS`,
    /// `KAFKA_TLS_CA_FILE`, and a login: `KAFKA_USERNAME` + `KAFKA_PASSWORD` with
    /// `KAFKA_SASL_MECHANISM` (default `SCRAM-SHA-512`); then validates the result. Values are
    /// trimmed (the password is not); an empty value counts as unset.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when a number or boolean does not parse, the login
    /// variables do not make one login ([`Credentials::from_parts`]), or the result fails
    /// [`KafkaConfig::validate`]. The messages name the variable and never show a secret.
    pub fn from_env() -> Result<Self, OutboxError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`KafkaConfig::from_env`] over `lookup` in place of the environment.
    pub(crate) fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, OutboxError> {
        let var = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let number = |name: &str, what: &str| -> Result<Option<u64>, OutboxError> {
            var(name)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        OutboxError::InvalidConfig(format!("{name} must be {what}, got `{v}`"))
                    })
                })
                .transpose()
        };
        let mut config =
            KafkaConfig::new(var(ENV_BROKERS).unwrap_or_else(|| DEFAULT_BROKERS.to_owned()));
        if let Some(prefix) = var(ENV_TOPIC_PREFIX) {
            config.topic_prefix = prefix;
        }
        if let Some(ms) = number(ENV_SEND_TIMEOUT_MS, "a number of milliseconds")? {
            config.send_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = number(ENV_MAX_MESSAGE_BYTES, "a number of bytes")? {
            config.max_message_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(tls) = var(ENV_TLS) {
            config.tls = match tls.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => {
                    return Err(OutboxError::InvalidConfig(format!(
                        "{ENV_TLS} must be true or false, got `{tls}`"
                    )))
                }
            };
        }
        config.tls_ca_file = var(ENV_TLS_CA_FILE).map(PathBuf::from);
        // The password as given: spaces may be part of it.
        let password = lookup(ENV_PASSWORD).filter(|p| !p.is_empty());
        config.credentials = Credentials::from_parts(
            var(ENV_USERNAME),
            password.map(Secret::from),
            var(ENV_SASL_MECHANISM).as_deref(),
        )?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration with the topic prefix `prefix`.
    #[must_use]
    pub fn topic_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.topic_prefix = prefix.into();
        self
    }

    /// The configuration with the send timeout `timeout`.
    #[must_use]
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// The configuration with the connect timeout `timeout`.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The configuration with the login `credentials`.
    #[must_use]
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The configuration with TLS on, checking the brokers' certificates against the CA
    /// certificates in PEM file `ca_file` (`None`: the system's CA store).
    #[must_use]
    pub fn tls(mut self, ca_file: Option<PathBuf>) -> Self {
        self.tls = true;
        self.tls_ca_file = ca_file;
        self
    }

    /// The configuration with the largest message `bytes`.
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`], naming the setting's variable, when the brokers are
    /// empty or an entry is not `host:port` or holds a login (`user:password@`; the message
    /// does not repeat it), the topic prefix holds a character Kafka does not
    /// allow in a topic name, a timeout is zero, the largest message is below 1,000 bytes or
    /// above 1,000,000,000 (librdkafka's range), or the login fails [`Credentials::validate`].
    pub fn validate(&self) -> Result<(), OutboxError> {
        for entry in self.brokers.split(',').map(str::trim) {
            // A login in an address would show wherever the brokers are logged: refuse it
            // without echoing the entry.
            if entry.contains('@') {
                return Err(OutboxError::InvalidConfig(format!(
                    "a Kafka broker address ({ENV_BROKERS}) holds `@`: give host:port only, and \
                     the login in {ENV_USERNAME} and {ENV_PASSWORD}"
                )));
            }
            let addr = entry.split_once("://").map_or(entry, |(_, a)| a);
            let ok = addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(OutboxError::InvalidConfig(format!(
                    "Kafka broker address ({ENV_BROKERS}) `{entry}` is not host:port; give e.g. \
                     {DEFAULT_BROKERS} (several separated by `,`)"
                )));
            }
        }
        check_topic_part(&self.topic_prefix).map_err(|reason| {
            OutboxError::InvalidConfig(format!(
                "topic prefix `{}` ({ENV_TOPIC_PREFIX}) is invalid: {reason}",
                self.topic_prefix
            ))
        })?;
        if self.send_timeout.is_zero() {
            return Err(OutboxError::InvalidConfig(format!(
                "Kafka send timeout ({ENV_SEND_TIMEOUT_MS}) must be greater than zero"
            )));
        }
        if self.connect_timeout.is_zero() {
            return Err(OutboxError::InvalidConfig(
                "Kafka connect_timeout must be greater than zero".into(),
            ));
        }
        if !(1_000..=1_000_000_000).contains(&self.max_message_bytes) {
            return Err(OutboxError::InvalidConfig(format!(
                "largest Kafka message ({ENV_MAX_MESSAGE_BYTES}) must be 1000 to 1000000000 \
                 bytes, got {}",
                self.max_message_bytes
            )));
        }
        if let Some(c) = &self.credentials {
            c.validate()?;
        }
        Ok(())
    }

    /// The topic of events of type `event_type`: `<topic_prefix>.<event_type>`.
    pub fn topic_of(&self, event_type: &str) -> String {
        format!("{}.{event_type}", self.topic_prefix)
    }

    /// Whether the client talks TLS: [`KafkaConfig::tls`] or a CA file.
    pub fn uses_tls(&self) -> bool {
        self.tls || self.tls_ca_file.is_some()
    }

    /// The librdkafka settings every client of this crate shares: brokers, client id,
    /// security protocol, login, CA file, largest message, reconnection back-off.
    pub(crate) fn client_config(&self, client_id: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        let protocol = match (self.credentials.is_some(), self.uses_tls()) {
            (false, false) => "plaintext",
            (false, true) => "ssl",
            (true, false) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        c.set("bootstrap.servers", self.brokers.as_str())
            .set("client.id", client_id)
            .set("security.protocol", protocol)
            .set("message.max.bytes", self.max_message_bytes.to_string())
            .set("reconnect.backoff.max.ms", millis(MAX_RECONNECT_DELAY))
            .set(
                "socket.connection.setup.timeout.ms",
                millis(self.connect_timeout.max(Duration::from_secs(1))),
            );
        if let Some(login) = &self.credentials {
            c.set("sasl.mechanism", login.mechanism.as_str())
                .set("sasl.username", login.username.as_str())
                .set("sasl.password", login.password.expose());
        }
        if let Some(ca) = &self.tls_ca_file {
            c.set("ssl.ca.location", ca.display().to_string());
        }
        c
    }
}

/// `d` in whole milliseconds (at least 1), as librdkafka's settings take it.
pub(crate) fn millis(d: Duration) -> String {
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}

#[cfg(test)]
mod tests;
