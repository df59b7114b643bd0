//! # sea-orm-outbox-conformance
//!
//! The conformance suite a publisher of sea-orm-outbox runs against its real broker: the same
//! cases for RocketMQ, Kafka, NATS JetStream, RabbitMQ and Redis Streams (and for a publisher of
//! your own), on Postgres and MariaDB (SQLite for the fault-free case).
//!
//! A publisher crate implements [`Broker`] in one test file and expands [`suite!`] there:
//!
//! ```ignore
//! struct Nats;
//! #[async_trait::async_trait]
//! impl sea_orm_outbox_conformance::Broker for Nats { /* ... */ }
//! sea_orm_outbox_conformance::suite!(crate::Nats); // a path the generated modules can see
//! ```
//!
//! The cases ([`cases`]):
//! - `every_event_once`: 3 relays drain 5,000 events; each arrives once.
//! - `fields_arrive`: the event id, type, key, headers and payload arrive where the consumer
//!   reads them.
//! - `oversized_fails_alone`: a message the broker refuses for good goes to `FAIL` with the
//!   reason; the others of its batch arrive.
//! - `outage_loses_nothing`: the server becomes unreachable mid-run (by default a proxy between
//!   the publishers and the server drops every connection and refuses new ones; see
//!   [`Broker::outage`]); every event arrives after it comes back.
//! - `wrong_credentials_are_refused`: the publisher does not start, with an error that names
//!   the setting and never shows the secret.
//! - `ordered_keeps_key_order`: in ordered mode one key's events reach the consumer in the
//!   order they were written, where the broker keeps an order.
//! - `ordered_batch_stops_a_key` (Postgres only; it sends without the database): in one
//!   ordered batch a message the broker refuses fails as permanent, its key's later message is
//!   not sent (retryable), and the other key's messages arrive.
//!
//! The databases come from `OUTBOX_TEST_POSTGRES_URL` and `OUTBOX_TEST_MYSQL_URL` (each case
//! creates and drops a database of its own). Under `CI=true` a broker or database that does not
//! answer fails the case; elsewhere the case is skipped with a message.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::Publisher;

pub mod cases;
mod db;
mod proxy;
mod server;

pub use db::{Backend, TestDb};
pub use proxy::{free_port, Proxy};
pub use server::{server_bin, Server};

/// One message as a broker's consumer read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The outbox event id the message carried.
    pub event_id: i64,
    /// The event type the message carried.
    pub event_type: String,
    /// The business key (`biz_no`) the message carried.
    pub key: String,
    /// The message's headers or properties; the event's own headers must be among them.
    pub headers: Vec<(String, String)>,
    /// The message body.
    pub payload: String,
}

/// Reads back what publishers sent to one destination.
#[async_trait]
pub trait Consumer: Send {
    /// The messages that arrived since the last call, waiting at most `wait` for the first
    /// one; empty when none came.
    async fn poll(&mut self, wait: Duration) -> Vec<Received>;
}

/// A wrong-credentials start attempt ([`Broker::wrong_credentials`]).
#[derive(Debug, Clone)]
pub struct WrongCredentials {
    /// The error the publisher's start returned (its `Display`), or `None` when it started.
    pub error: Option<String>,
    /// The name of the setting the error must name (e.g. `NATS_PASSWORD`).
    pub setting: String,
    /// The wrong secret, which the error must not show.
    pub secret: String,
}

/// Takes a server away from its publishers and brings it back ([`Outage`]).
#[async_trait]
pub trait Switch: Send + Sync {
    /// Makes the server unreachable: open connections drop, new ones fail.
    async fn down(&self);
    /// Makes the server reachable again.
    async fn up(&self);
}

#[async_trait]
impl Switch for Proxy {
    async fn down(&self) {
        Proxy::down(self);
    }
    async fn up(&self) {
        Proxy::up(self);
    }
}

/// Where the outage case runs ([`Broker::outage`]): the address its publishers use, a
/// consumer of its destination, and the switch that takes the server away. Dropping it ends
/// whatever it started.
pub struct Outage {
    /// The address for [`Broker::publisher`].
    pub addr: String,
    /// Reads everything sent to the case's destination.
    pub consumer: Box<dyn Consumer>,
    /// Takes the server away and brings it back.
    pub switch: Box<dyn Switch>,
}

/// What a publisher crate gives the suite: its broker, reached on loopback.
#[async_trait]
pub trait Broker: Send + Sync + Sized + 'static {
    /// Short name, used in database names and messages (`nats`).
    const NAME: &'static str;

    /// The broker of this run, from the crate's address variables.
    fn from_env() -> Self;

    /// The server's address (`host:port`); the suite checks that it answers, and the default
    /// [`Broker::outage`] puts its proxy in front of it.
    fn addr(&self) -> String;

    /// Starts a publisher that sends to destination `dest` (a name unique to the case: a
    /// topic, stream, subject or exchange name, or a prefix of them) on the server at `addr`,
    /// with its send timeout at most `send_timeout`.
    async fn publisher(
        &self,
        addr: &str,
        dest: &str,
        send_timeout: Duration,
    ) -> Result<Arc<dyn Publisher>, String>;

    /// Starts a consumer of everything sent to `dest`, from the first message on; it must be
    /// ready before the first message is sent.
    async fn consumer(&self, dest: &str) -> Box<dyn Consumer>;

    /// Tries to start a publisher to `dest` with a wrong secret.
    async fn wrong_credentials(&self, dest: &str) -> WrongCredentials;

    /// The set-up of the outage case for destination `dest`. By default a [`Proxy`] in front
    /// of [`Broker::addr`], read by [`Broker::consumer`]. A broker whose clients learn the
    /// server's address from the server itself (Kafka's advertised listeners, RocketMQ's name
    /// server) starts a private server instead, one that advertises a proxy or that its
    /// switch stops and starts.
    async fn outage(&self, dest: &str) -> Outage {
        let proxy = Proxy::start(&self.addr()).await;
        Outage {
            addr: proxy.addr().to_owned(),
            consumer: self.consumer(dest).await,
            switch: Box::new(proxy),
        }
    }

    /// A payload size in bytes, below the outbox's default limit of 4 MiB, that the
    /// publisher of [`Broker::publisher`] refuses for good.
    fn oversized_payload_bytes(&self) -> usize;

    /// Whether one key's messages reach the consumer in the order they were sent.
    fn keeps_key_order(&self) -> bool {
        true
    }
}

/// Whether this runs under CI (`CI=true`), where a missing server fails the case.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// One `#[tokio::test]` per case and backend for the [`Broker`] `$broker`: modules
/// `postgres` (every case), `mariadb` (every case but `ordered_batch_stops_a_key`, which
/// sends without the database) and `sqlite` (`every_event_once`).
#[macro_export]
macro_rules! suite {
    ($broker:ty) => {
        $crate::suite!(@backend $broker, postgres, Postgres,
            every_event_once, fields_arrive, oversized_fails_alone, outage_loses_nothing,
            wrong_credentials_are_refused, ordered_keeps_key_order, ordered_batch_stops_a_key);
        $crate::suite!(@backend $broker, mariadb, MySql,
            every_event_once, fields_arrive, oversized_fails_alone, outage_loses_nothing,
            wrong_credentials_are_refused, ordered_keeps_key_order);
        $crate::suite!(@backend $broker, sqlite, Sqlite, every_event_once);
    };
    (@backend $broker:ty, $module:ident, $backend:ident, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    $crate::cases::run::<$broker, _>(
                        $crate::Backend::$backend,
                        stringify!($case),
                        $crate::cases::$case::<$broker>,
                    )
                    .await
                }
            )*
        }
    };
}
