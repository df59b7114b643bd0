//! Wake-on-commit, the relays' side, as the driver offers it: a [`Listener`] that is opened on
//! a pool, checks itself, and waits for the writers' notifications. Postgres listens
//! (`postgres/listen.rs`, with the `postgres` feature); without that feature a [`Listener`]
//! cannot exist and opening one fails, so the worker polls.
use std::time::Duration;

/// Longest the set-up of a `LISTEN` connection may take (taking a connection from the pool and
/// running `LISTEN`; also sending the self-check's `NOTIFY`): 2 seconds. A database that is
/// down must not hold up the rounds or a shutdown for longer.
pub(crate) const LISTEN_SETUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest the self-check's own `NOTIFY` may take to come back to the new `LISTEN` connection
/// before the check fails: 2 seconds.
pub(crate) const SELF_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The payload prefix of the self-check's `NOTIFY` (followed by a random token). A
/// notification with it is never a wake reason, whichever worker sent it.
pub(crate) const SELF_CHECK_PREFIX: &str = "sea_orm_outbox:self-check:";

/// Why an attempt to listen failed.
pub(crate) enum ListenFailure {
    /// The database could not be reached, or a statement failed (the error's text).
    Unreachable(String),
    /// Listening works, but the self-check's `NOTIFY` did not come back within
    /// [`SELF_CHECK_TIMEOUT`].
    NotDelivered,
    /// Two connections of the pool shared one server session: a pooler in transaction mode
    /// (found before any `LISTEN` was sent).
    SharedSessions,
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

/// Without the `postgres` feature there is nothing to listen with: no value of this type
/// exists, and the worker polls.
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
