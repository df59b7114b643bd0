//! What the publisher and the consumer share: [`Ctx`], the client context that sends
//! librdkafka's log to `tracing` and remembers its errors, and [`check_metadata`], the metadata
//! request at start that proves the brokers answer and accept the login.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaErrorCode;
use sea_orm_outbox::OutboxError;

use crate::config::KafkaConfig;
use crate::errors::start_error;

/// The client context: librdkafka's log lines go to `tracing` (target `librdkafka`), its
/// errors to the log at WARN, and the last error and any refused login are kept for the
/// start-up error. librdkafka's messages hold no password.
#[derive(Clone, Default)]
pub(crate) struct Ctx(Arc<Errors>);

/// What [`Ctx`] remembers of the client's errors.
#[derive(Default)]
pub(crate) struct Errors {
    /// The reason of the last `Authentication` error (a refused SASL login or TLS handshake).
    auth_error: Mutex<Option<String>>,
    /// The last error of any kind.
    last_error: Mutex<Option<String>>,
}

impl Ctx {
    fn auth_error(&self) -> Option<String> {
        self.0
            .auth_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn last_error(&self) -> Option<String> {
        self.0
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", facility = fac, "{message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            *self.0.auth_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_owned());
        }
        *self.0.last_error.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(format!("{error}: {reason}"));
        tracing::warn!(target: "librdkafka", error = %error, "{reason}");
    }
}

impl ConsumerContext for Ctx {}

/// The longest one metadata request of [`check_metadata`] waits before it looks for a
/// refused login.
const SLICE: Duration = Duration::from_millis(500);

/// Something that holds a librdkafka client with context [`Ctx`] and can be moved to a
/// blocking thread.
pub(crate) trait HasClient: Send + Sync + 'static {
    /// The metadata of `topic` (`None`: every topic), waiting at most `wait` (blocks).
    fn fetch_metadata(&self, topic: Option<&str>, wait: Duration) -> KafkaResult<Metadata>;
    /// The client's context.
    fn ctx(&self) -> &Ctx;
}

/// Requests the metadata of `topic` (`None`: every topic) within `config.connect_timeout`, on
/// a blocking thread (librdkafka's call blocks).
///
/// # Errors
/// [`OutboxError::InvalidConfig`] naming `KAFKA_PASSWORD` when the brokers refused the login;
/// [`OutboxError::Broker`] naming `KAFKA_BROKERS` when no broker answered in time.
pub(crate) async fn check_metadata<H: HasClient>(
    holder: Arc<H>,
    config: &KafkaConfig,
    topic: Option<String>,
) -> Result<Metadata, OutboxError> {
    let wait = config.connect_timeout;
    let task = tokio::task::spawn_blocking(move || {
        // In slices, so that a refused login ends the wait at once.
        let deadline = std::time::Instant::now() + wait;
        let ctx = holder.ctx();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let result = holder.fetch_metadata(topic.as_deref(), left.min(SLICE));
            let done = result.is_ok() || left <= SLICE || ctx.auth_error().is_some();
            if done {
                return (result, ctx.auth_error(), ctx.last_error());
            }
        }
    });
    let bound = wait + Duration::from_secs(1);
    match tokio::time::timeout(bound, task).await {
        Ok(Ok((Ok(metadata), None, _))) => Ok(metadata),
        Ok(Ok((Ok(_), Some(auth), last))) => Err(start_error(
            &KafkaError::MetadataFetch(RDKafkaErrorCode::Authentication),
            config,
            Some(&auth),
            last.as_deref(),
        )),
        Ok(Ok((Err(e), auth, last))) => {
            Err(start_error(&e, config, auth.as_deref(), last.as_deref()))
        }
        Ok(Err(join)) => Err(OutboxError::Broker(format!(
            "the Kafka metadata request failed: {join}"
        ))),
        Err(_) => Err(start_error(
            &KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut),
            config,
            None,
            None,
        )),
    }
}
