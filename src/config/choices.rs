//! The choices a [`super::WorkerConfig`] makes among ways of working: how rounds claim,
//! what a delivered event's row becomes, ordered delivery, how statements reach Postgres,
//! which connections the relay uses.
use crate::error::OutboxError;

/// How a round claims its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClaimStrategy {
    /// Read up to `batch_size` candidates without locks, then one conditional
    /// `UPDATE ... WHERE id = :id AND status = 'WAIT'` per candidate; lost claims are skipped.
    PerRow,
    /// The default: claim up to `batch_size` due rows in one round trip without waiting on rows
    /// other instances hold (`FOR UPDATE SKIP LOCKED`); it loses no claims.
    #[default]
    Batch,
}

/// What the relay does with a delivered event's row ([`crate::WorkerConfig::completion`]).
///
/// Either way the row is changed by the owner-guarded statement of the design: only while
/// the event is `SENDING` under this claim, `rows_affected` deciding, so a late
/// acknowledgement changes nothing. Delivered events are counted in `t_outbox_counter`
/// ([`crate::ops::OutboxStats::delivered`], the counter `outbox_delivered_total`) in both
/// modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Completion {
    /// The default: `DELETE FROM ... WHERE id IN (:ids) AND status = 'SENDING' AND
    /// claim_owner = :owner`. The table holds only undelivered events and dead letters; the
    /// broker and the consumers keep the record of what was delivered. It writes less per
    /// event than [`Completion::Update`] on every backend measured (docs/configuration.md).
    #[default]
    Delete,
    /// `UPDATE ... SET status = 'SUCCESS', update_time = now WHERE id IN (:ids) AND status =
    /// 'SENDING' AND claim_owner = :owner`: the row stays as a record of who sent it and when
    /// (the console's search), until the retention
    /// ([`crate::WorkerConfig::retention`]) or `outbox purge` deletes it.
    Update,
}

impl Completion {
    /// `update` or `delete`, as `outbox relay --completion` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Completion::Delete => "delete",
            Completion::Update => "update",
        }
    }
}

/// Ordered delivery per business key ([`crate::WorkerConfig::ordered`]): what a dead letter
/// (`FAIL`) does to the later events of its key (`biz_no`).
///
/// In ordered mode an event of key K is claimed only while no event of K with a smaller id is
/// `WAIT` or `SENDING` (with [`OrderedPolicy::Block`], nor `FAIL`): the key's events go out in
/// id order, one key's run at a time, and a failed event backing off holds only its own key.
///
/// ```
/// use sea_orm_outbox::{OrderedPolicy, WorkerConfig};
/// let config = WorkerConfig::default().ordered(Some(OrderedPolicy::Skip));
/// config.validate()?;
/// assert_eq!(OrderedPolicy::Block.blocking_statuses().len(), 3); // WAIT, SENDING, FAIL
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OrderedPolicy {
    /// A key whose earliest unfinished event is a dead letter sends nothing more until a person
    /// runs `outbox dead retry` (or [`crate::ops::retry_dead`]) or `outbox dead discard`
    /// ([`crate::ops::discard_dead`]). The gauges `outbox_blocked_keys` and
    /// `outbox_oldest_blocked_age_seconds` and `outbox stats` show the keys held back.
    Block,
    /// The dead letter stays `FAIL` (for a person to act on) and the later events of its key go
    /// on past it. A dead letter retried later is sent after the key's later events.
    Skip,
}

impl OrderedPolicy {
    /// The statuses of an earlier event of the same key that hold an event back: `WAIT` and
    /// `SENDING`, and `FAIL` with [`OrderedPolicy::Block`].
    pub fn blocking_statuses(self) -> &'static [sea_orm_outbox_entity::EventStatus] {
        use sea_orm_outbox_entity::EventStatus::{Fail, Sending, Wait};
        match self {
            OrderedPolicy::Block => &[Wait, Sending, Fail],
            OrderedPolicy::Skip => &[Wait, Sending],
        }
    }
}

/// How the relay sends its statements to Postgres: prepared (the default), or as simple
/// queries for a pooler in transaction mode that does not track prepared statements
/// (PgBouncer before 1.21, or 1.21+ without `max_prepared_statements`), which fails them with
/// "prepared statement ... does not exist".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatementProtocol {
    /// The default: statements with bound parameters, prepared and cached per connection.
    #[default]
    Extended,
    /// Postgres only: every statement of the worker and its maintenance services (claims,
    /// outcome marks, lease renewal, reclaim, backlog gauges) as one simple-protocol query
    /// with its values inlined (sea-query's Postgres string escaping), for a transaction-mode
    /// pooler such as PgBouncer < 1.21. Costs a parse and plan per statement on the server.
    /// [`crate::Worker::new`] refuses it on MySQL/MariaDB and SQLite.
    Simple,
}

/// Fewest connections a relay pool may have: the `LISTEN` connection, its self-check's, and
/// one for statements.
pub const MIN_RELAY_POOL_CONNECTIONS: u32 = 3;

/// Most connections a relay pool may have.
const MAX_RELAY_POOL_CONNECTIONS: u32 = 1000;

/// Which connections a [`crate::Worker`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayPool {
    /// A pool of the relay's own (the default, 5 connections), opened
    /// lazily with the connect and pool options of the pool handed to [`crate::Worker::new`]
    /// and at most `max_connections` connections, each checked for a leaked transaction
    /// before it is handed out ([`crate::guarded_pool`]); on Postgres its connections carry
    /// `application_name` `sea-orm-outbox relay`. SQLite keeps the pool handed over (an
    /// in-memory database exists once per pool, and SQLite has one writer at a time anyway).
    Own {
        /// Most connections the relay opens (3 to 1,000).
        max_connections: u32,
    },
    /// The pool handed to [`crate::Worker::new`] itself, shared with the application: the
    /// relay is then exposed to the application's leaked transactions and can wait for a
    /// connection while the application holds them all (its leases may lapse meanwhile). For
    /// a pool that serves the relay alone.
    Shared,
}

impl Default for RelayPool {
    fn default() -> Self {
        RelayPool::Own { max_connections: 5 }
    }
}

impl RelayPool {
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `max_connections` is outside
    /// 3 to 1,000 (the `LISTEN` connection, its self-check's, and one for statements).
    pub fn validate(&self) -> Result<(), OutboxError> {
        match *self {
            RelayPool::Own { max_connections }
                if !(MIN_RELAY_POOL_CONNECTIONS..=MAX_RELAY_POOL_CONNECTIONS)
                    .contains(&max_connections) =>
            {
                Err(OutboxError::InvalidConfig(format!(
                    "RelayPool::Own {{ max_connections: {max_connections} }}: a relay pool needs \
                     {MIN_RELAY_POOL_CONNECTIONS} to {MAX_RELAY_POOL_CONNECTIONS} connections (the \
                     LISTEN connection, its self-check's, and one for statements)"
                )))
            }
            _ => Ok(()),
        }
    }
}
