//! [`Link`]: one connection and its confirm-mode channel, how it is opened (login, confirms,
//! the exchange) and what its failures mean at start and on a publish.
use std::time::Duration;

use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use sea_orm_outbox::{OutboxError, PublishError};

use crate::config::{RabbitMqConfig, ENV_DECLARE_EXCHANGE, ENV_EXCHANGE, ENV_URL};
use crate::credentials::{ENV_PASSWORD, ENV_USERNAME};
use crate::errors::{classify, is_access_refused, is_not_found, is_precondition_failed};

/// The name the connection shows in the management UI.
const CONNECTION_NAME: &str = "sea-orm-outbox publisher";

/// A connection to the server and one channel on it in confirm mode.
pub(crate) struct Link {
    /// Which link this is, counting from 1: tells a broken link from its replacement.
    pub(crate) generation: u64,
    connection: Connection,
    pub(crate) channel: Channel,
}

/// Where opening a link failed.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The TCP/TLS connection or the login.
    Connect(lapin::Error),
    /// Opening the channel or turning confirms on.
    Channel(lapin::Error),
    /// Declaring the exchange, or checking that it exists.
    Exchange(lapin::Error),
}

impl Link {
    /// Connects to `uri`, logs in, opens a channel with publisher confirms and declares the
    /// exchange (or checks that it exists: [`RabbitMqConfig::declare_exchange`]).
    pub(crate) async fn open(
        config: &RabbitMqConfig,
        uri: &AMQPUri,
        generation: u64,
    ) -> Result<Link, OpenError> {
        let properties =
            ConnectionProperties::default().with_connection_name(CONNECTION_NAME.into());
        let connection = Connection::connect_uri(uri.clone(), properties)
            .await
            .map_err(OpenError::Connect)?;
        let channel = match open_channel(&connection, config).await {
            Ok(channel) => channel,
            Err(e) => {
                close_in_background(connection);
                return Err(e);
            }
        };
        Ok(Link {
            generation,
            connection,
            channel,
        })
    }

    /// Whether the connection and the channel are still open.
    pub(crate) fn is_open(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }

    /// Waits up to `wait` for the confirms still due, then closes the connection.
    pub(crate) async fn close(self, wait: Duration) {
        let _ = tokio::time::timeout(wait, self.channel.wait_for_confirms()).await;
        let _ = tokio::time::timeout(wait, self.connection.close(200, "shutdown".into())).await;
    }

    /// Closes the connection in the background (a link being replaced).
    pub(crate) fn discard(self) {
        close_in_background(self.connection);
    }
}

/// Closes `connection` in a task of its own, waiting at most 1 s.
fn close_in_background(connection: Connection) {
    tokio::spawn(async move {
        let close = connection.close(200, "reconnecting".into());
        let _ = tokio::time::timeout(Duration::from_secs(1), close).await;
    });
}

async fn open_channel(
    connection: &Connection,
    config: &RabbitMqConfig,
) -> Result<Channel, OpenError> {
    let channel = connection
        .create_channel()
        .await
        .map_err(OpenError::Channel)?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(OpenError::Channel)?;
    let options = ExchangeDeclareOptions {
        passive: !config.declare_exchange,
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(
            config.exchange.as_str().into(),
            ExchangeKind::Topic,
            options,
            FieldTable::default(),
        )
        .await
        .map_err(OpenError::Exchange)?;
    Ok(channel)
}

impl OpenError {
    /// What [`RabbitMqPublisher::start`](crate::RabbitMqPublisher::start) returns for it: a
    /// refused login or a missing or different exchange is [`OutboxError::InvalidConfig`]
    /// naming the setting; anything else [`OutboxError::Broker`]. The URL is shown redacted.
    pub(crate) fn into_start_error(self, config: &RabbitMqConfig) -> OutboxError {
        let url = config.redacted_url();
        let exchange = &config.exchange;
        match self {
            OpenError::Connect(e) if is_access_refused(&e) => {
                let check = if config.password_setting() == ENV_URL {
                    format!("check the user and password in {ENV_URL}")
                } else {
                    format!("check {ENV_USERNAME} and {ENV_PASSWORD}")
                };
                OutboxError::InvalidConfig(format!(
                    "RabbitMQ at {url} refused the login of user `{}` ({check}; and that the \
                     user may use the virtual host): {e}",
                    config.username()
                ))
            }
            OpenError::Connect(e) if is_not_found(&e) => OutboxError::InvalidConfig(format!(
                "RabbitMQ at {url} has no such virtual host (the path of {ENV_URL}; `/` is \
                 written %2f): {e}"
            )),
            OpenError::Connect(e) => OutboxError::Broker(format!(
                "cannot connect to RabbitMQ at {url} ({ENV_URL}): {e}"
            )),
            OpenError::Channel(e) => OutboxError::Broker(format!(
                "RabbitMQ at {url}: cannot open a channel with publisher confirms: {e}"
            )),
            OpenError::Exchange(e) if !config.declare_exchange && is_not_found(&e) => {
                OutboxError::InvalidConfig(format!(
                    "RabbitMQ exchange `{exchange}` ({ENV_EXCHANGE}) does not exist: declare it, \
                     or set {ENV_DECLARE_EXCHANGE}=true to let the publisher declare it: {e}"
                ))
            }
            OpenError::Exchange(e) if is_access_refused(&e) => OutboxError::InvalidConfig(format!(
                "RabbitMQ user `{}` may not {} exchange `{exchange}` ({ENV_EXCHANGE}): {e}",
                config.username(),
                if config.declare_exchange {
                    "declare"
                } else {
                    "use"
                }
            )),
            OpenError::Exchange(e) if is_precondition_failed(&e) => {
                OutboxError::InvalidConfig(format!(
                    "RabbitMQ exchange `{exchange}` ({ENV_EXCHANGE}) cannot be declared as a \
                     durable topic exchange (it exists with another type or arguments; set \
                     {ENV_DECLARE_EXCHANGE}=false to use it as it is): {e}"
                ))
            }
            OpenError::Exchange(e) => OutboxError::Broker(format!(
                "RabbitMQ at {url}: cannot check exchange `{exchange}` ({ENV_EXCHANGE}): {e}"
            )),
        }
    }

    /// What a publish that had to reconnect records: [`classify`] of the client's error.
    pub(crate) fn into_publish_error(self) -> PublishError {
        match self {
            OpenError::Connect(e) | OpenError::Channel(e) | OpenError::Exchange(e) => classify(&e),
        }
    }
}
