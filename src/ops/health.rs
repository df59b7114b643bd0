//! A health verdict on an outbox table: are relays alive, is delivery keeping up, are events
//! dying, is a long transaction slowing everything down ([`health`]).
use std::time::Duration;

use sea_orm::ConnectionTrait;
use serde::Serialize;

use crate::driver::health::{self as driver_health, SnapshotHolder};
use crate::error::OutboxError;
use crate::outbox::Outbox;

/// How healthy an outbox is, in the order of worsening (`Healthy < Degraded < Failing`).
/// Serialized as `healthy`, `degraded`, `failing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Nothing to report.
    Healthy,
    /// Events are still delivered, but something needs a look soon.
    Degraded,
    /// Events are not delivered, or not in time: page someone.
    Failing,
}

impl HealthStatus {
    /// `healthy`, `degraded` or `failing`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Degraded => "degraded",
            HealthStatus::Failing => "failing",
        }
    }
}

/// What a [`HealthReason`] is about; serialized in snake case (`no_relay_alive`). docs/operating.md
/// says what to do about each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HealthCode {
    /// No relay instance of the table has a live heartbeat ([`HealthStatus::Failing`]).
    NoRelayAlive,
    /// The oldest undelivered event is older than [`HealthThresholds::undelivered_age`]
    /// ([`HealthStatus::Failing`]).
    UndeliveredTooOld,
    /// Events became dead letters within [`HealthThresholds::dead_letter_window`]
    /// ([`HealthStatus::Degraded`]).
    RecentDeadLetters,
    /// Another connection has held a snapshot longer than
    /// [`HealthThresholds::transaction_age`] ([`HealthStatus::Degraded`]).
    LongTransaction,
    /// This worker's wake-on-commit `LISTEN` is down; it polls ([`HealthStatus::Degraded`];
    /// [`crate::Worker::health`] only).
    ListenDown,
    /// This worker's publisher refused sends for its own configuration or credentials since its
    /// last successful publish ([`HealthStatus::Failing`]; [`crate::Worker::health`] only).
    PublisherMisconfigured,
}

impl HealthCode {
    /// The code in snake case, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthCode::NoRelayAlive => "no_relay_alive",
            HealthCode::UndeliveredTooOld => "undelivered_too_old",
            HealthCode::RecentDeadLetters => "recent_dead_letters",
            HealthCode::LongTransaction => "long_transaction",
            HealthCode::ListenDown => "listen_down",
            HealthCode::PublisherMisconfigured => "publisher_misconfigured",
        }
    }
}

/// One finding of a health check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HealthReason {
    /// How bad it is.
    pub status: HealthStatus,
    /// What it is about.
    pub code: HealthCode,
    /// What was found, with the figures (instance ids, pids, ages in seconds); never a
    /// password or a query's text.
    pub message: String,
}

/// The verdict of [`health`] (or [`crate::Worker::health`]): the worst status of its reasons,
/// [`HealthStatus::Healthy`] without any.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Health {
    /// The worst status among `reasons`.
    pub status: HealthStatus,
    /// Every finding, worst first.
    pub reasons: Vec<HealthReason>,
}

impl Health {
    /// A verdict of `reasons`, sorted worst first.
    pub(crate) fn of(mut reasons: Vec<HealthReason>) -> Health {
        reasons.sort_by_key(|r| std::cmp::Reverse(r.status));
        let status = reasons.first().map_or(HealthStatus::Healthy, |r| r.status);
        Health { status, reasons }
    }
}

/// Where [`health`] draws its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthThresholds {
    /// The oldest undelivered event may be this old before the outbox is failing (default
    /// 60 s).
    pub undelivered_age: Duration,
    /// Another connection may hold a snapshot this long before the outbox is degraded (default
    /// 5 min).
    pub transaction_age: Duration,
    /// Dead letters made within this window make the outbox degraded (default 5 min).
    pub dead_letter_window: Duration,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        HealthThresholds {
            undelivered_age: Duration::from_secs(60),
            transaction_age: Duration::from_secs(5 * 60),
            dead_letter_window: Duration::from_secs(5 * 60),
        }
    }
}

impl HealthThresholds {
    /// Sets [`HealthThresholds::undelivered_age`].
    pub fn undelivered_age(mut self, d: Duration) -> Self {
        self.undelivered_age = d;
        self
    }

    /// Sets [`HealthThresholds::transaction_age`].
    pub fn transaction_age(mut self, d: Duration) -> Self {
        self.transaction_age = d;
        self
    }

    /// Sets [`HealthThresholds::dead_letter_window`].
    pub fn dead_letter_window(mut self, d: Duration) -> Self {
        self.dead_letter_window = d;
        self
    }
}

/// Judges `outbox`'s table by the database alone, so any process can ask (the `outbox health`
/// command does). Reasons:
///
/// - [`HealthCode::NoRelayAlive`] (failing): no heartbeat row of the table is unexpired; the
///   message names the instance heard from last and how long ago.
/// - [`HealthCode::UndeliveredTooOld`] (failing): the oldest `WAIT` or `SENDING` event is
///   older than `undelivered_age` (by `create_time`).
/// - [`HealthCode::RecentDeadLetters`] (degraded): events became `FAIL` within
///   `dead_letter_window`; the message counts them.
/// - [`HealthCode::LongTransaction`] (degraded): another connection to this database has held
///   a transaction (a snapshot) open longer than `transaction_age` (Postgres
///   `pg_stat_activity`, needing `pg_read_all_stats` to see other roles; MySQL/MariaDB
///   `information_schema.innodb_trx` of the connections whose default database is this one,
///   needing `PROCESS`, without which none is seen; never on SQLite); the message names up to five, oldest first, by
///   connection id, age, state, user and client, not by their query, whose literals may be
///   secret.
///
/// SQL (reads only, by the database clock): the read of [`super::backlog`], the one of
/// [`super::relays`], `SELECT COUNT(id) FROM t_event_record WHERE status = 'FAIL' AND
/// update_time > now - :window`, and the five oldest transactions of other connections.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the outbox table, [`OutboxError::SchemaOutdated`]
/// without the heartbeat table; [`OutboxError::Db`] otherwise.
pub async fn health<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    thresholds: &HealthThresholds,
) -> Result<Health, OutboxError> {
    let driver = outbox.driver(db)?;
    let table = driver.table().label();
    let mut reasons = Vec::new();
    // The outbox table first: without it the heartbeats mean nothing.
    let b = super::backlog(outbox, db).await?;
    let (relays, _) = super::relays_at(outbox, db).await?;
    if super::alive(&relays) == 0 {
        let message = match relays.first() {
            Some(last) => format!(
                "no relay of {table} is alive: the last heartbeat came from {} {:.1} s ago",
                last.instance_id, last.heartbeat_age_seconds
            ),
            None => format!(
                "no relay of {table} is alive: none has a heartbeat (a relay that stops cleanly \
                 deletes its own; relays name the table as they were given it, with or without \
                 its schema)"
            ),
        };
        reasons.push(reason(
            HealthStatus::Failing,
            HealthCode::NoRelayAlive,
            message,
        ));
    }
    let limit = thresholds.undelivered_age.as_secs_f64();
    if b.oldest_undelivered_age_seconds > limit {
        let message = format!(
            "the oldest undelivered event of {table} is {:.1} s old (threshold {limit} s); {} \
             WAIT ({} backing off after failed sends), {} SENDING",
            b.oldest_undelivered_age_seconds, b.wait, b.backing_off, b.sending
        );
        reasons.push(reason(
            HealthStatus::Failing,
            HealthCode::UndeliveredTooOld,
            message,
        ));
    }
    let window = thresholds.dead_letter_window;
    let dead = driver_health::dead_letters_since(db, driver, window).await?;
    if dead > 0 {
        let message = format!(
            "{dead} event(s) of {table} became dead letters (FAIL) in the last {} s: `outbox \
             dead list`",
            window.as_secs_f64()
        );
        reasons.push(reason(
            HealthStatus::Degraded,
            HealthCode::RecentDeadLetters,
            message,
        ));
    }
    let limit = thresholds.transaction_age.as_secs_f64();
    let mut holders = driver_health::snapshot_holders(db, driver, LONG_TRANSACTIONS_NAMED).await?;
    holders.retain(|h| h.age_seconds > limit);
    if !holders.is_empty() {
        let message = long_transactions(&holders, limit);
        reasons.push(reason(
            HealthStatus::Degraded,
            HealthCode::LongTransaction,
            message,
        ));
    }
    Ok(Health::of(reasons))
}

/// A reason.
pub(crate) fn reason(status: HealthStatus, code: HealthCode, message: String) -> HealthReason {
    HealthReason {
        status,
        code,
        message,
    }
}

/// Most transactions a [`HealthCode::LongTransaction`] reason names, oldest first.
const LONG_TRANSACTIONS_NAMED: u64 = 5;

/// The message about the snapshots `holders` hold (each over `limit` seconds).
fn long_transactions(holders: &[SnapshotHolder], limit: f64) -> String {
    let or_dash = |v: &Option<String>| v.clone().filter(|v| !v.is_empty()).unwrap_or("-".into());
    let named: Vec<String> = holders
        .iter()
        .map(|h| {
            format!(
                "connection {} (user {}, client {}, state {}) open for {:.1} s",
                h.pid,
                or_dash(&h.user),
                or_dash(&h.client),
                or_dash(&h.state),
                h.age_seconds
            )
        })
        .collect();
    format!(
        "transactions held open longer than {limit} s keep the database from cleaning up the \
         rows the relay finished with, which slows every claim: {}; end them, or find their \
         owners by these ids (Postgres: pg_stat_activity.pid; MySQL/MariaDB: SHOW PROCESSLIST)",
        named.join("; ")
    )
}
