//! Wake-on-commit, the relays' side: a [`Listener`] (`postgres/listen.rs`, with the `postgres`
//! feature; without it none can exist, and the worker polls).
use std::time::Duration;

/// Longest the set-up of a `LISTEN` connection may take (connecting, `LISTEN`, the
/// self-check's `NOTIFY`): 2 seconds, so that a database that is down holds nothing up.
pub(crate) const LISTEN_SETUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest the self-check's `NOTIFY` may take to come back: 2 seconds.
pub(crate) const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Silence after which a [`Listener`] proves its connection: when nothing arrived for 10
/// seconds, it sends a self-check `NOTIFY` through the pool (a probe).
pub(crate) const PROBE_AFTER: Duration = Duration::from_secs(10);

/// Longest a probe may take to be sent, and then to come back: 5 seconds each. A probe that
/// does not come back ends the listener (the connection is half-open or its server is gone).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The payload prefix of the self-check's `NOTIFY`: never a wake reason, whoever sent it.
pub(crate) const SELF_CHECK_PREFIX: &str = "sea_orm_outbox:self-check:";

/// Why an attempt to listen failed.
pub(crate) enum ListenFailure {
    /// The database could not be reached, or a statement failed (the error's text).
    Unreachable(String),
    /// Listening works, but the self-check's `NOTIFY` did not come back within
    /// [`SELF_CHECK_TIMEOUT`].
    NotDelivered,
    /// Two connections of the pool were served by one server backend: a pooler in transaction mode
    /// (found before any `LISTEN` was sent).
    SharedBackends,
}

/// What ended a [`Listener`]'s wait.
pub(crate) enum Heard {
    /// The deadline passed.
    Timer,
    /// A notification arrived (a committed event; a self-check's is never one).
    Notified,
}

#[cfg(feature = "postgres")]
pub(crate) use super::postgres::listen::Listener;

/// Without the `postgres` feature no listener exists.
#[cfg(not(feature = "postgres"))]
pub(crate) enum Listener {}

#[cfg(not(feature = "postgres"))]
impl Listener {
    /// Fails: built without the `postgres` feature.
    pub(crate) async fn open(_: &sea_orm::DatabaseConnection) -> Result<Listener, ListenFailure> {
        Err(ListenFailure::Unreachable(
            "built without the postgres feature".to_owned(),
        ))
    }

    /// Never called: no listener exists.
    pub(crate) async fn wait_until(&mut self, _: tokio::time::Instant) -> Result<Heard, String> {
        match *self {}
    }
}
