//! [`RedisPublisher`]: `XADD`s in pipelines over one reconnecting connection.
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, RedisResult, Value};
use sea_orm_outbox::{OutboxError, OutboxMessage, PublishError, Publisher};
use tokio::time::Instant;

use crate::config::{RedisConfig, ENV_URL};
use crate::credentials::scrub;
use crate::entry;
use crate::errors::{
    classify, is_missing_credentials, is_rejected_credentials, missing_credentials_text,
    rejected_credentials_text,
};

/// Longest pause between two reconnection attempts of the connection manager.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Publishes outbox events to Redis streams: each event is one `XADD` to stream
/// `<stream_prefix>:<event_type>` with an id Redis assigns (`*`), a batch one pipeline of
/// them (one per key and event in ordered mode, see [`RedisPublisher::start`]).
///
/// Sends take `&self` over one multiplexed connection: wrap the publisher in an `Arc` and hand
/// it to every worker. The connection is a [`ConnectionManager`], which reconnects by itself
/// after the server or the network went away (a send on the broken connection fails
/// retryably and starts the reconnection); a send that times out also replaces the connection,
/// in case it was silently lost.
pub struct RedisPublisher {
    config: RedisConfig,
    client: Client,
    connection: Mutex<Connection>,
}

/// The current connection and how many times it was replaced.
struct Connection {
    generation: u64,
    manager: ConnectionManager,
}

impl std::fmt::Debug for RedisPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisPublisher {
    /// Validates `config`, connects to the server once (with `AUTH` when credentials are
    /// given) and sends `PING`, then sets up the reconnecting connection the sends use.
    ///
    /// Batches ([`Publisher::publish_batch`]) go as one non-atomic pipeline of `XADD`s with a
    /// result per command, so one refused entry does not fail the others. In ordered mode
    /// ([`OutboxMessage::ordered`]) a pipeline carries at most one event per key and the next
    /// one of the key waits for its result: a key's later event after a failed one in the same
    /// batch is not sent and gets a retryable error. A stream keeps the order entries were
    /// added in, so a key's events reach a stream's readers in order.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RedisConfig::validate`], credentials the server rejects ("Redis rejected the
    /// credentials of user .. : check REDIS_PASSWORD ...") or a server that requires them
    /// ("Redis requires a password (NOAUTH): set REDIS_PASSWORD ..."); [`OutboxError::Broker`]
    /// when the server does not answer within the send timeout or the connection fails. No
    /// message shows a password (the URL is shown without it).
    pub async fn start(config: RedisConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        let info = config.connection_info()?;
        let username = info.redis_settings().username().map(str::to_owned);
        let client = Client::open(info).map_err(|e| {
            OutboxError::InvalidConfig(format!(
                "{ENV_URL} (url) `{}`: {}",
                config.redacted_url(),
                scrub(&e.to_string(), config.password.as_ref())
            ))
        })?;
        probe(&client, &config, username.as_deref()).await?;
        let manager = new_manager(&client, &config)
            .map_err(|e| OutboxError::Broker(format!("Redis connection: {e}")))?;
        tracing::info!(url = %config.redacted_url(), user = username.as_deref().unwrap_or("-"),
            stream_prefix = %config.stream_prefix, max_len = ?config.max_len,
            "Redis publisher started");
        Ok(RedisPublisher {
            config,
            client,
            connection: Mutex::new(Connection {
                generation: 0,
                manager,
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Closes the connection. Every send has had its reply by the time it returns (nothing is
    /// buffered), so there is nothing to flush; call it after the workers have stopped.
    pub async fn shutdown(self) {
        drop(self.connection);
        tracing::info!("Redis publisher stopped");
    }

    /// The current connection and its generation.
    fn connection(&self) -> (u64, ConnectionManager) {
        let c = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        (c.generation, c.manager.clone())
    }

    /// Replaces connection `generation` (unless it was already replaced) by a new one that
    /// connects on its first use: a reply that never came may mean a connection lost without
    /// a reset, which the connection manager would keep.
    fn replace_connection(&self, generation: u64) {
        let mut c = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        if c.generation != generation {
            return;
        }
        match new_manager(&self.client, &self.config) {
            Ok(manager) => {
                c.manager = manager;
                c.generation += 1;
                tracing::warn!(url = %self.config.redacted_url(),
                    "Redis did not answer in time; reconnecting");
            }
            Err(e) => tracing::warn!(error = %e, "Redis reconnection could not be set up"),
        }
    }

    /// `e` as the [`PublishError`] of a send, without the password.
    fn classify(&self, e: &RedisError) -> PublishError {
        let mut p = classify(e);
        if is_rejected_credentials(e) {
            p.message = format!("{} ({e})", rejected_credentials_text(self.username()));
        }
        p.message = scrub(&p.message, self.config.password.as_ref());
        p
    }

    /// The user the publisher authenticates as, if any.
    fn username(&self) -> Option<&str> {
        self.client
            .get_connection_info()
            .redis_settings()
            .username()
    }

    /// Sends one `XADD` per message as one non-atomic pipeline; one result per message. A
    /// message whose entry cannot be built gets that error and is not sent; the whole pipeline
    /// fails alike when the connection fails or `deadline` passes.
    async fn send_round(
        &self,
        round: &[&OutboxMessage],
        deadline: Instant,
    ) -> Vec<Result<(), PublishError>> {
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; round.len()];
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (i, m) in round.iter().enumerate() {
            match entry::xadd(&self.config, m) {
                Ok(cmd) => {
                    pipe.add_command(cmd);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let refused = results.iter().flatten().count();
        let mut sent = self
            .send_pipeline(&pipe, round.len() - refused, deadline)
            .await
            .into_iter();
        let unsent = || Err(PublishError::retryable("not sent"));
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| sent.next().unwrap_or_else(unsent)))
            .collect()
    }

    /// Sends `pipe` of `n` commands; one result per command.
    async fn send_pipeline(
        &self,
        pipe: &redis::Pipeline,
        n: usize,
        deadline: Instant,
    ) -> Vec<Result<(), PublishError>> {
        if n == 0 {
            return Vec::new();
        }
        let (generation, mut conn) = self.connection();
        let sent = tokio::time::timeout_at(
            deadline,
            pipe.query_async::<Vec<RedisResult<Value>>>(&mut conn),
        )
        .await;
        let replies = match sent {
            Ok(Ok(replies)) => replies,
            Ok(Err(e)) => {
                if e.is_timeout() {
                    self.replace_connection(generation);
                }
                return vec![Err(self.classify(&e)); n];
            }
            Err(_) => {
                self.replace_connection(generation);
                let e = PublishError::retryable(format!(
                    "Redis did not answer within the send timeout ({:?}); the entries may have \
                     been added (consumers deduplicate on eventId)",
                    self.config.send_timeout
                ));
                return vec![Err(e); n];
            }
        };
        let mut replies = replies.into_iter();
        (0..n)
            .map(|_| match replies.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(self.classify(&e)),
                None => Err(PublishError::retryable(
                    "Redis sent fewer replies than the pipeline had commands",
                )),
            })
            .collect()
    }
}

#[async_trait]
impl Publisher for RedisPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.publish_batch(std::slice::from_ref(message))
            .await
            .pop()
            .unwrap_or_else(|| Err(PublishError::retryable("no result")))
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let deadline = Instant::now() + self.config.send_timeout;
        sea_orm_outbox::send_in_key_rounds(messages, deadline, |round| async move {
            self.send_round(&round, deadline).await
        })
        .await
    }

    fn batches(&self) -> bool {
        true
    }
}

/// The settings of every connection: connect and reply timeouts of `send_timeout`.
fn connection_config(config: &RedisConfig) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.send_timeout))
        .set_response_timeout(Some(config.send_timeout))
}

/// A connection manager that connects on its first use and reconnects by itself, at most
/// [`MAX_RECONNECT_DELAY`] between attempts.
fn new_manager(client: &Client, config: &RedisConfig) -> RedisResult<ConnectionManager> {
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.send_timeout))
        .set_response_timeout(Some(config.send_timeout))
        .set_max_delay(MAX_RECONNECT_DELAY);
    ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
}

/// Connects once and sends `PING`: the server answers and takes the credentials.
async fn probe(
    client: &Client,
    config: &RedisConfig,
    username: Option<&str>,
) -> Result<(), OutboxError> {
    let url = config.redacted_url();
    let attempt = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&connection_config(config))
            .await?;
        redis::cmd("PING").query_async::<Value>(&mut conn).await
    };
    let limit = config.send_timeout * 2;
    let e = match tokio::time::timeout(limit, attempt).await {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(OutboxError::Broker(format!(
                "Redis at {url} ({ENV_URL}) did not answer within {limit:?}"
            )))
        }
    };
    let text = scrub(&e.to_string(), config.password.as_ref());
    Err(if is_rejected_credentials(&e) {
        OutboxError::InvalidConfig(format!("{} ({text})", rejected_credentials_text(username)))
    } else if is_missing_credentials(&e) {
        OutboxError::InvalidConfig(format!("{} ({text})", missing_credentials_text()))
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        OutboxError::InvalidConfig(format!("Redis at {url} ({ENV_URL}): {text}"))
    } else {
        OutboxError::Broker(format!("cannot reach Redis at {url} ({ENV_URL}): {text}"))
    })
}
