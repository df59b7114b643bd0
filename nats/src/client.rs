//! The connection the publisher and the consumer share the setup of: [`connect`] (login,
//! timeouts, reconnection, connection events in the log) and [`find_stream`] (the JetStream
//! stream that captures the events' subjects).
use std::time::Duration;

use async_nats::jetstream::context::GetStreamByNameErrorKind;
use async_nats::{Client, ConnectOptions, Event};
use sea_orm_outbox::OutboxError;

use crate::config::{NatsConfig, ENV_SUBJECT_PREFIX, ENV_URL};
use crate::errors::{connect_error, error_text};

/// Longest wait between two reconnection attempts: 1 s, so that the relay delivers again soon
/// after the server comes back.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Connects to the server(s) of `config` as `name` (the connection name the server shows).
/// After the connection is made, the client reconnects by itself whenever it breaks (without
/// limit, at most [`MAX_RECONNECT_DELAY`] apart), and requests and publishes made meanwhile
/// wait for it (bounded by their own timeouts).
///
/// # Errors
/// See [`connect_error`]: [`OutboxError::InvalidConfig`] for an address that does not parse, a
/// creds file that cannot be read, or a login the server refuses (naming its variable);
/// [`OutboxError::Broker`] when no server accepts the connection within
/// [`NatsConfig::connect_timeout`].
pub(crate) async fn connect(config: &NatsConfig, name: &str) -> Result<Client, OutboxError> {
    let addrs = config.server_addrs()?;
    let url = config.redacted_url();
    let log_url = url.clone();
    let mut options = ConnectOptions::new()
        .name(name)
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.send_timeout))
        .reconnect_delay_callback(|attempts| {
            let exp = u32::try_from(attempts).unwrap_or(u32::MAX).min(16);
            (Duration::from_millis(10) * 2u32.saturating_pow(exp)).min(MAX_RECONNECT_DELAY)
        })
        .event_callback(move |event| {
            let url = log_url.clone();
            async move {
                match event {
                    Event::Connected => tracing::info!(%url, "NATS connection (re)established"),
                    Event::Disconnected => {
                        tracing::warn!(%url, "NATS connection lost; reconnecting")
                    }
                    // A drain and close follow the publisher's own shutdown.
                    Event::Draining | Event::Closed => {
                        tracing::debug!(%url, event = %event, "NATS connection event")
                    }
                    other => tracing::warn!(%url, event = %other, "NATS connection event"),
                }
            }
        });
    if let Some(c) = &config.credentials {
        options = c.apply(options).await?;
    }
    // A bound on the whole start-up connection, above the client's per-attempt timeout.
    let bound = config.connect_timeout * u32::try_from(addrs.len()).unwrap_or(u32::MAX)
        + Duration::from_secs(1);
    match tokio::time::timeout(bound, options.connect(addrs)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(connect_error(&e, config)),
        Err(_) => Err(OutboxError::Broker(format!(
            "cannot connect to the NATS server at {url} ({ENV_URL}): no answer within {bound:?}"
        ))),
    }
}

/// The name of a JetStream stream that captures `<subject_prefix>.>` (all of it or some of
/// it, e.g. one event type's subject).
///
/// # Errors
/// [`OutboxError::InvalidConfig`] when no stream does (the message says how to create one);
/// [`OutboxError::Broker`] when JetStream does not answer (not enabled on the server, or the
/// account has none).
pub(crate) async fn find_stream(
    js: &async_nats::jetstream::Context,
    config: &NatsConfig,
) -> Result<String, OutboxError> {
    let subjects = format!("{}.>", config.subject_prefix);
    match js.stream_by_subject(subjects.clone()).await {
        Ok(stream) => Ok(stream),
        Err(e) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => {
            Err(OutboxError::InvalidConfig(format!(
                "no JetStream stream captures the subjects `{subjects}` on the NATS server at \
                 {}: create one (e.g. `nats stream add OUTBOX --subjects '{subjects}'`), or set \
                 {ENV_SUBJECT_PREFIX} to the prefix of a stream's subjects",
                config.redacted_url()
            )))
        }
        Err(e) => Err(OutboxError::Broker(format!(
            "JetStream did not answer on the NATS server at {} (is it started with JetStream, \
             `nats-server -js`, and does the account have it?): {}",
            config.redacted_url(),
            error_text(&e)
        ))),
    }
}
