//! [`RabbitMqPublisher`]: one connection and confirm-mode channel shared by every worker,
//! reopened on the first publish after it broke.
use std::fmt;

use async_trait::async_trait;
use lapin::options::BasicPublishOptions;
use lapin::uri::AMQPUri;
use lapin::{Channel, Confirmation, PublisherConfirm};
use sea_orm_outbox::{OutboxError, OutboxMessage, PublishError, Publisher};
use tokio::sync::Mutex;
use tokio::time::{timeout_at, Instant};

use crate::config::RabbitMqConfig;
use crate::errors::{self, classify};
use crate::link::Link;
use crate::message::{outgoing, Outgoing};

/// Publishes outbox events to a RabbitMQ exchange with publisher confirms.
///
/// Every event is one persistent message published with `mandatory` set; it counts as sent
/// only once the server confirmed it (`basic.ack`) without returning it. A batch is published
/// as a whole, then each message's confirm is awaited, so each event gets its own outcome:
/// a `basic.nack`, a returned (unroutable) message or a confirm that never came (connection
/// lost, send timeout) fails that event retryably; a body above
/// [`RabbitMqConfig::max_message_bytes`] fails it for good without sending it.
///
/// One connection and channel serve every worker (wrap the publisher in an `Arc`). lapin does
/// not reconnect by itself: after the connection or channel broke, the next publish opens a
/// new one (within its send timeout) and declares or checks the exchange again.
///
/// Order: one channel keeps its publish order into each queue. In ordered mode
/// ([`OutboxMessage::ordered`]) a batch goes in rounds, each with at most one message per key,
/// the next round only after the confirms of the last: a key's later event is never sent
/// after an earlier one failed (it gets a retryable error instead).
pub struct RabbitMqPublisher {
    config: RabbitMqConfig,
    /// The client's URL, with the password: never shown.
    uri: AMQPUri,
    /// The current link; `None` after [`RabbitMqPublisher::shutdown`] took it, or when it could
    /// not be reopened.
    link: Mutex<Option<Link>>,
}

impl fmt::Debug for RabbitMqPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RabbitMqPublisher {
    /// Validates `config`, connects and logs in, opens a channel with publisher confirms and
    /// declares the exchange as a durable topic exchange (with
    /// [`RabbitMqConfig::declare_exchange`] off: checks that it exists), all within
    /// [`RabbitMqConfig::connect_timeout`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for a configuration that fails
    /// [`RabbitMqConfig::validate`], a login the server refused (naming `RABBITMQ_PASSWORD` or
    /// `RABBITMQ_URL`, whichever holds the password, which is never shown), an unknown virtual
    /// host, or an exchange that is missing, of another kind, or not allowed to the user
    /// (naming `OUTBOX_RABBITMQ_EXCHANGE`); [`OutboxError::Broker`] when the server cannot be
    /// reached or does not answer in time.
    pub async fn start(config: RabbitMqConfig) -> Result<Self, OutboxError> {
        config.validate()?;
        let uri = config.amqp_uri()?;
        let link = match tokio::time::timeout(config.connect_timeout, Link::open(&config, &uri, 1))
            .await
        {
            Ok(Ok(link)) => link,
            Ok(Err(e)) => return Err(e.into_start_error(&config)),
            Err(_) => {
                return Err(OutboxError::Broker(format!(
                    "RabbitMQ at {} (RABBITMQ_URL) did not accept a connection, login and \
                     channel within {:?}",
                    config.redacted_url(),
                    config.connect_timeout
                )))
            }
        };
        Ok(RabbitMqPublisher {
            config,
            uri,
            link: Mutex::new(Some(link)),
        })
    }

    /// The configuration the publisher runs with.
    pub fn config(&self) -> &RabbitMqConfig {
        &self.config
    }

    /// Waits for the confirms still due (at most the send timeout), then closes the channel
    /// and the connection. Call it after the workers stopped.
    pub async fn shutdown(self) {
        if let Some(link) = self.link.into_inner() {
            link.close(self.config.send_timeout).await;
        }
    }

    /// The open channel, reopening the link first when it broke.
    async fn channel(&self) -> Result<(u64, Channel), PublishError> {
        let mut link = self.link.lock().await;
        let generation = match link.as_ref() {
            Some(open) if open.is_open() => return Ok((open.generation, open.channel.clone())),
            Some(broken) => broken.generation + 1,
            None => 1,
        };
        if let Some(broken) = link.take() {
            broken.discard();
        }
        let fresh = Link::open(&self.config, &self.uri, generation)
            .await
            .map_err(|e| e.into_publish_error())?;
        tracing::info!(
            url = %self.config.redacted_url(),
            generation,
            "RabbitMQ publisher reconnected"
        );
        let channel = fresh.channel.clone();
        *link = Some(fresh);
        Ok((generation, channel))
    }

    /// Drops link `generation` if it is still the current one, so that the next publish
    /// opens a new one.
    async fn discard(&self, generation: u64) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|l| l.generation == generation) {
            if let Some(broken) = link.take() {
                broken.discard();
            }
        }
    }

    /// Publishes `round` and waits for each confirm, all before `deadline`; one result per
    /// message. A message that cannot be built ([`outgoing`]) gets that error and is not sent.
    async fn send_round(
        &self,
        round: &[&OutboxMessage],
        deadline: Instant,
    ) -> Vec<Result<(), PublishError>> {
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; round.len()];
        let mut built: Vec<(usize, Outgoing)> = Vec::with_capacity(round.len());
        for (i, m) in round.iter().enumerate() {
            match outgoing(&self.config, m) {
                Ok(out) => built.push((i, out)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        if !built.is_empty() {
            self.send_built(round, built, deadline, &mut results).await;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
            .collect()
    }

    /// Publishes `built` (indexes into `round`, with their messages) and waits for each
    /// confirm, all before `deadline`; writes each outcome into `results`.
    async fn send_built(
        &self,
        round: &[&OutboxMessage],
        built: Vec<(usize, Outgoing)>,
        deadline: Instant,
        results: &mut [Option<Result<(), PublishError>>],
    ) {
        let timed_out = errors::no_confirm(self.config.send_timeout);
        let (generation, channel) = match timeout_at(deadline, self.channel()).await {
            Ok(Ok(open)) => open,
            Ok(Err(e)) => return fill(results, built.iter().map(|(i, _)| *i), &e),
            Err(_) => return fill(results, built.iter().map(|(i, _)| *i), &timed_out),
        };
        let exchange = self.config.exchange.as_str();
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let mut broken = None;
        let mut pending: Vec<(usize, String, PublisherConfirm)> = Vec::with_capacity(built.len());
        for (i, out) in built {
            if let Some(e) = &broken {
                results[i] = Some(Err(PublishError::clone(e)));
                continue;
            }
            let key = out.routing_key.as_str().to_owned();
            let publish = channel.basic_publish(
                exchange.into(),
                out.routing_key,
                options,
                round[i].payload.as_bytes(),
                out.properties,
            );
            match timeout_at(deadline, publish).await {
                Ok(Ok(confirm)) => pending.push((i, key, confirm)),
                Ok(Err(e)) => {
                    let e = classify(&e);
                    results[i] = Some(Err(e.clone()));
                    broken = Some(e);
                }
                Err(_) => {
                    results[i] = Some(Err(timed_out.clone()));
                    broken = Some(timed_out.clone());
                }
            }
        }
        let mut lost = broken.is_some();
        for (i, key, confirm) in pending {
            results[i] = Some(match timeout_at(deadline, confirm).await {
                Ok(Ok(Confirmation::Ack(None))) => Ok(()),
                Ok(Ok(Confirmation::Ack(Some(returned)))) => Err(errors::unroutable(
                    exchange,
                    &key,
                    returned.reply_code,
                    returned.reply_text.as_str(),
                )),
                Ok(Ok(Confirmation::Nack(_))) => Err(errors::nacked(exchange, &key)),
                Ok(Ok(Confirmation::NotRequested)) => Err(PublishError::retryable(
                    "RabbitMQ channel is not in confirm mode: nothing is known to be stored",
                )),
                Ok(Err(e)) => {
                    lost = true;
                    Err(classify(&e))
                }
                Err(_) => {
                    lost = true;
                    Err(timed_out.clone())
                }
            });
        }
        if lost {
            self.discard(generation).await;
        }
    }
}

/// Sets the result of each of `indexes` to `error`.
fn fill(
    results: &mut [Option<Result<(), PublishError>>],
    indexes: impl Iterator<Item = usize>,
    error: &PublishError,
) {
    for i in indexes {
        results[i] = Some(Err(error.clone()));
    }
}

#[async_trait]
impl Publisher for RabbitMqPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.publish_batch(std::slice::from_ref(message))
            .await
            .pop()
            .unwrap_or_else(|| Err(PublishError::retryable("no result")))
    }

    /// Publishes every message, then awaits each confirm: one result per message, in order.
    /// In ordered mode, rounds of at most one message per key (see [`RabbitMqPublisher`]).
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
