//! The checks on a [`RabbitMqConfig`] and the client's URL it becomes.
use std::time::Duration;

use lapin::uri::{AMQPScheme, AMQPUri};
use sea_orm_outbox::OutboxError;

use super::{
    RabbitMqConfig, ENV_APP_ID, ENV_EXCHANGE, ENV_MAX_MESSAGE_BYTES, ENV_ROUTING_PREFIX,
    ENV_SEND_TIMEOUT_MS, ENV_URL, MAX_MESSAGE_BYTES_LIMIT,
};
use crate::credentials::ENV_USERNAME;

/// Longest name or routing key AMQP carries (a short string): 255 bytes.
pub(crate) const MAX_SHORT_STRING: usize = 255;

fn invalid(message: String) -> OutboxError {
    OutboxError::InvalidConfig(message)
}

impl RabbitMqConfig {
    /// Checks the configuration without contacting the server.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`], naming the setting, when the URL is not an `amqp://` or
    /// `amqps://` URL, the user name is empty, the exchange is empty, longer than 255 bytes or
    /// holds other characters than letters, digits, `-`, `_`, `.` and `:`, an exchange to
    /// declare starts with `amq.` (names the server keeps), the routing prefix is longer than
    /// 255 bytes, the app id or content type is longer than 255 bytes, the send or connect timeout is zero or above one hour, or
    /// `max_message_bytes` is zero or above 512 MiB. No message shows a password.
    pub fn validate(&self) -> Result<(), OutboxError> {
        self.amqp_uri()?;
        if self
            .credentials
            .as_ref()
            .is_some_and(|c| c.username().is_empty())
        {
            return Err(invalid(format!(
                "RabbitMQ user name ({ENV_USERNAME}) is empty"
            )));
        }
        let exchange = &self.exchange;
        if exchange.is_empty() || exchange.len() > MAX_SHORT_STRING {
            return Err(invalid(format!(
                "RabbitMQ exchange ({ENV_EXCHANGE}) must have 1 to {MAX_SHORT_STRING} bytes, not \
                 {}",
                exchange.len()
            )));
        }
        if !exchange
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
        {
            return Err(invalid(format!(
                "RabbitMQ exchange `{exchange}` ({ENV_EXCHANGE}) may hold only letters, digits, \
                 `-`, `_`, `.` and `:`"
            )));
        }
        if self.declare_exchange && exchange.starts_with("amq.") {
            return Err(invalid(format!(
                "RabbitMQ exchange `{exchange}` ({ENV_EXCHANGE}) cannot be declared: names \
                 starting with `amq.` belong to the server; set OUTBOX_RABBITMQ_DECLARE_EXCHANGE=\
                 false to publish to an existing one"
            )));
        }
        if self.routing_prefix.len() > MAX_SHORT_STRING {
            return Err(invalid(format!(
                "RabbitMQ routing prefix ({ENV_ROUTING_PREFIX}) has {} bytes, more than a routing \
                 key may have ({MAX_SHORT_STRING})",
                self.routing_prefix.len()
            )));
        }
        for (name, value) in [
            (ENV_APP_ID, self.app_id.as_deref()),
            ("content_type", self.content_type.as_deref()),
        ] {
            if value.is_some_and(|v| v.len() > MAX_SHORT_STRING) {
                return Err(invalid(format!(
                    "RabbitMQ {name} is longer than {MAX_SHORT_STRING} bytes"
                )));
            }
        }
        let hour = Duration::from_secs(3600);
        for (name, timeout) in [
            (ENV_SEND_TIMEOUT_MS, self.send_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if timeout.is_zero() || timeout > hour {
                return Err(invalid(format!(
                    "RabbitMQ {name} must be above zero and at most one hour, not {timeout:?}"
                )));
            }
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > MAX_MESSAGE_BYTES_LIMIT {
            return Err(invalid(format!(
                "{ENV_MAX_MESSAGE_BYTES} must be 1 to {MAX_MESSAGE_BYTES_LIMIT} bytes (RabbitMQ's \
                 largest max_message_size), not {}",
                self.max_message_bytes
            )));
        }
        Ok(())
    }

    /// The client's URL: [`RabbitMqConfig::url`] with [`RabbitMqConfig::credentials`] in place
    /// of its login.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming `RABBITMQ_URL` (shown redacted) when it does not
    /// parse or its scheme is neither `amqp` nor `amqps`.
    pub(crate) fn amqp_uri(&self) -> Result<AMQPUri, OutboxError> {
        let shown = self.redacted_url();
        let bad = |reason: String| {
            // The parser may quote the input: keep only what cannot hold the password.
            let reason = reason.replace(self.url.as_str(), &shown);
            invalid(format!(
                "{ENV_URL} `{shown}` is not an AMQP URL (amqp://user:password@host:port/vhost or \
                 amqps://...): {reason}"
            ))
        };
        if !(self.url.starts_with("amqp://") || self.url.starts_with("amqps://")) {
            return Err(bad("the scheme must be amqp or amqps".into()));
        }
        let mut uri: AMQPUri = self.url.parse().map_err(bad)?;
        // The client's parser keeps only domain names and puts `localhost` for an IP address:
        // take the host from the URL itself.
        let parsed = url::Url::parse(&self.url).map_err(|e| bad(e.to_string()))?;
        uri.authority.host = match parsed.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(host) => host.to_string(),
            None => return Err(bad("no host".into())),
        };
        if let Some(c) = &self.credentials {
            uri.authority.userinfo.username = c.username().to_owned();
            uri.authority.userinfo.password = c.password().expose().to_owned();
        }
        debug_assert!(matches!(uri.scheme, AMQPScheme::AMQP | AMQPScheme::AMQPS));
        Ok(uri)
    }

    /// The user name the publisher logs in with.
    pub(crate) fn username(&self) -> String {
        match &self.credentials {
            Some(c) => c.username().to_owned(),
            None => self
                .amqp_uri()
                .map(|u| u.authority.userinfo.username)
                .unwrap_or_default(),
        }
    }
}
