//! Where and how the publisher sends: [`NatsConfig`], its defaults and environment variables,
//! and the checks on the server address, the subject prefix and the timeouts.
use std::path::PathBuf;
use std::time::Duration;

use async_nats::ServerAddr;
use sea_orm_outbox::OutboxError;

use crate::credentials::{
    Credentials, Secret, ENV_CREDS_FILE, ENV_NKEY_SEED, ENV_PASSWORD, ENV_TOKEN, ENV_USER,
};
use crate::message::check_subject;

/// Default server address: `nats://127.0.0.1:4222`.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// Default subject prefix: `outbox` (events go to `outbox.<event_type>`).
pub const DEFAULT_SUBJECT_PREFIX: &str = "outbox";
/// Default send timeout: 3 s.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// Default connect timeout: 5 s (one attempt at start).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The environment variable with the server address(es): `nats://host:port`, several
/// separated by `,`.
pub const ENV_URL: &str = "NATS_URL";
/// The environment variable with the subject prefix ([`NatsConfig::subject_prefix`]).
pub const ENV_SUBJECT_PREFIX: &str = "OUTBOX_NATS_SUBJECT_PREFIX";
/// The environment variable with the send timeout, in milliseconds ([`NatsConfig::send_timeout`]).
pub const ENV_SEND_TIMEOUT_MS: &str = "OUTBOX_NATS_SEND_TIMEOUT_MS";
/// The environment variable with the prefix of each message's `Nats-Msg-Id`
/// ([`NatsConfig::msg_id_prefix`]).
pub const ENV_MSG_ID_PREFIX: &str = "OUTBOX_NATS_MSG_ID_PREFIX";

/// Where and how [`NatsPublisher`](crate::NatsPublisher) sends.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox_nats::{Credentials, NatsConfig};
/// let config = NatsConfig::new("nats://127.0.0.1:4222")
///     .subject_prefix("order")
///     .send_timeout(Duration::from_secs(3))
///     .credentials(Credentials::user_password("order-svc", "s3cret"));
/// config.validate()?;
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
///
/// `Debug` shows the URL without its user and password, and no secret of the login.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsConfig {
    /// Server address(es): `nats://host:port` (or `host:port`), several separated by `,`
    /// (default [`DEFAULT_URL`]). User and password may be given in the URL
    /// (`nats://user:pass@host:4222`); messages never show them.
    pub url: String,
    /// Subject prefix: an event of type `T` goes to subject `<subject_prefix>.T` (default
    /// [`DEFAULT_SUBJECT_PREFIX`]). One or more subject tokens separated by `.`, without
    /// wildcards or spaces. A JetStream stream must capture `<subject_prefix>.>` (or every
    /// subject the events go to).
    pub subject_prefix: String,
    /// Longest one `publish` or `publish_batch` call may take, the wait for the server's acks
    /// included (default [`DEFAULT_SEND_TIMEOUT`], 3 s). Keep it at most the worker's
    /// `send_timeout`. Also bounds JetStream API requests at start.
    pub send_timeout: Duration,
    /// Longest the connection at start may take (default [`DEFAULT_CONNECT_TIMEOUT`], 5 s).
    pub connect_timeout: Duration,
    /// The login, for a server that requires one (default none).
    pub credentials: Option<Credentials>,
    /// Put before the event id in the `Nats-Msg-Id` header (default empty: the header is the
    /// event id). JetStream drops a message whose id it saw within the stream's duplicate
    /// window (2 min by default), so services with their own outbox tables that publish into
    /// one stream must each set a distinct prefix (e.g. `order-`), or their equal event ids
    /// collide.
    pub msg_id_prefix: String,
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &self.redacted_url())
            .field("subject_prefix", &self.subject_prefix)
            .field("send_timeout", &self.send_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("credentials", &self.credentials)
            .field("msg_id_prefix", &self.msg_id_prefix)
            .finish()
    }
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig::new(DEFAULT_URL)
    }
}

impl NatsConfig {
    /// A configuration for the server(s) at `url` with the default prefix and timeouts and no
    /// login.
    pub fn new(url: impl Into<String>) -> Self {
        NatsConfig {
            url: url.into(),
            subject_prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            credentials: None,
            msg_id_prefix: String::new(),
        }
    }

    /// Reads `NATS_URL` (default [`DEFAULT_URL`]), `OUTBOX_NATS_SUBJECT_PREFIX` (default
    /// [`DEFAULT_SUBJECT_PREFIX`]), `OUTBOX_NATS_SEND_TIMEOUT_MS` (milliseconds, default
    /// 3000), `OUTBOX_NATS_MSG_ID_PREFIX` (default empty) and one login: `NATS_USER` +
    /// `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_NKEY_SEED` or `NATS_CREDS_FILE`; then validates
    /// the result. Values are trimmed; an empty value counts as unset.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `OUTBOX_NATS_SEND_TIMEOUT_MS` is not a number, the
    /// login variables do not make one login ([`Credentials::from_parts`]), or the result fails
    /// [`NatsConfig::validate`]. The messages never show a secret.
    pub fn from_env() -> Result<Self, OutboxError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`NatsConfig::from_env`] over `lookup` in place of the environment.
    pub(crate) fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, OutboxError> {
        let var = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = NatsConfig::new(var(ENV_URL).unwrap_or_else(|| DEFAULT_URL.to_owned()));
        if let Some(prefix) = var(ENV_SUBJECT_PREFIX) {
            config.subject_prefix = prefix;
        }
        if let Some(ms) = var(ENV_SEND_TIMEOUT_MS) {
            let ms: u64 = ms.parse().map_err(|_| {
                OutboxError::InvalidConfig(format!(
                    "{ENV_SEND_TIMEOUT_MS} must be a number of milliseconds, got `{ms}`"
                ))
            })?;
            config.send_timeout = Duration::from_millis(ms);
        }
        if let Some(prefix) = var(ENV_MSG_ID_PREFIX) {
            config.msg_id_prefix = prefix;
        }
        config.credentials = Credentials::from_parts(
            var(ENV_USER),
            var(ENV_PASSWORD).map(Secret::from),
            var(ENV_TOKEN).map(Secret::from),
            var(ENV_NKEY_SEED).map(Secret::from),
            var(ENV_CREDS_FILE).map(PathBuf::from),
        )?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration with the subject prefix `prefix`.
    #[must_use]
    pub fn subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = prefix.into();
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

    /// The configuration with the `Nats-Msg-Id` prefix `prefix`.
    #[must_use]
    pub fn msg_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.msg_id_prefix = prefix.into();
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`], naming the setting and its variable, when the URL is
    /// empty or not a NATS server address, the subject prefix is not one or more valid subject
    /// tokens, a timeout is zero, the message id prefix holds whitespace or control
    /// characters, or the login fails [`Credentials::validate`].
    pub fn validate(&self) -> Result<(), OutboxError> {
        self.server_addrs()?;
        check_subject(&self.subject_prefix).map_err(|reason| {
            OutboxError::InvalidConfig(format!(
                "subject prefix `{}` ({ENV_SUBJECT_PREFIX}) is invalid: {reason}",
                self.subject_prefix
            ))
        })?;
        if self.send_timeout.is_zero() {
            return Err(OutboxError::InvalidConfig(format!(
                "NATS send timeout ({ENV_SEND_TIMEOUT_MS}) must be greater than zero"
            )));
        }
        if self.connect_timeout.is_zero() {
            return Err(OutboxError::InvalidConfig(
                "NATS connect_timeout must be greater than zero".into(),
            ));
        }
        if self
            .msg_id_prefix
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(OutboxError::InvalidConfig(format!(
                "Nats-Msg-Id prefix ({ENV_MSG_ID_PREFIX}) must not hold spaces or control \
                 characters: `{}`",
                self.msg_id_prefix
            )));
        }
        if let Some(c) = &self.credentials {
            c.validate()?;
        }
        Ok(())
    }

    /// The server addresses of [`NatsConfig::url`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming `NATS_URL` when one is empty or does not parse
    /// (the message shows the URL without its user and password).
    pub(crate) fn server_addrs(&self) -> Result<Vec<ServerAddr>, OutboxError> {
        let parts: Vec<&str> = self.url.split(',').map(str::trim).collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(OutboxError::InvalidConfig(format!(
                "NATS server address ({ENV_URL}) is empty or has an empty entry: `{}`; \
                 give e.g. {DEFAULT_URL}",
                self.redacted_url()
            )));
        }
        parts
            .into_iter()
            .map(|p| {
                p.parse::<ServerAddr>().map_err(|e| {
                    OutboxError::InvalidConfig(format!(
                        "NATS server address ({ENV_URL}) `{}` is invalid: {e}; give e.g. \
                         {DEFAULT_URL}",
                        redact_url(p)
                    ))
                })
            })
            .collect()
    }

    /// [`NatsConfig::url`] with any user and password replaced by `<redacted>`.
    pub fn redacted_url(&self) -> String {
        self.url
            .split(',')
            .map(redact_url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the URL carries a user and password or a token (`nats://user:pass@host`).
    pub(crate) fn url_has_login(&self) -> bool {
        self.url.split(',').any(|u| redact_url(u) != u.trim())
    }

    /// The subject of events of type `event_type`: `<subject_prefix>.<event_type>`.
    pub fn subject_of(&self, event_type: &str) -> String {
        format!("{}.{event_type}", self.subject_prefix)
    }
}

/// `url` with everything between the scheme and the last `@` replaced by `<redacted>`.
///
/// The last `@` of the whole address, not of its authority: a password written without
/// percent-encoding may hold `/`, `?` or `#`, which would otherwise end the authority early
/// and leave the password in the text. A NATS address has no path that could hold an `@`.
fn redact_url(url: &str) -> String {
    let url = url.trim();
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}<redacted>{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests;
