//! The relay instances of an outbox table, from their heartbeats (`t_outbox_relay`).
use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use serde::Serialize;

use crate::driver::relays;
use crate::error::OutboxError;
use crate::outbox::Outbox;

/// One relay instance of an outbox table, as its heartbeat row says ([`relays`]). Every time
/// is the database clock's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RelayInstance {
    /// The instance id (the worker's [`crate::Worker::owner`]).
    pub instance_id: String,
    /// The sea-orm-outbox version it runs.
    pub version: String,
    /// When it started relaying.
    pub started_at: DateTime<Utc>,
    /// Its latest heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// Three heartbeat intervals after `heartbeat_at`: past it the instance is taken for
    /// stopped (killed, hung, or cut off from the database).
    pub expires_at: DateTime<Utc>,
    /// The heartbeat after its latest completed claim round; `None` before its first.
    pub last_round_at: Option<DateTime<Utc>>,
    /// The heartbeat after its latest successful publish; `None` before its first.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Whether `expires_at` is still ahead of the database's now.
    pub alive: bool,
    /// Seconds from `heartbeat_at` to the database's now.
    pub heartbeat_age_seconds: f64,
}

/// The relay instances of `outbox`'s table that sent a heartbeat, newest heartbeat first: the
/// running ones (`alive`) and those that stopped without a clean shutdown within the last day
/// (a clean shutdown deletes the instance's row; the live relays delete rows expired for more
/// than 24 hours).
///
/// SQL (one read, no lock): `SELECT outbox_table, instance_id, version, started_at,
/// heartbeat_at, expires_at, last_round_at, last_success_at, now FROM t_outbox_relay WHERE
/// outbox_table = :table ORDER BY heartbeat_at DESC` (`:table` is `schema.table`, or `table`
/// without a schema).
///
/// # Errors
/// [`OutboxError::SchemaOutdated`] without the migration `m20261206_000005_create_t_outbox_relay`;
/// [`OutboxError::Db`] otherwise.
pub async fn relays<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<Vec<RelayInstance>, OutboxError> {
    Ok(relays_at(outbox, db).await?.0)
}

/// [`relays`] and the database's now they were judged by (`None` without any row).
pub(crate) async fn relays_at<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<(Vec<RelayInstance>, Option<DateTime<Utc>>), OutboxError> {
    let (rows, now) = relays::relays(db, outbox.driver(db)?).await?;
    let Some(now) = now else {
        return Ok((Vec::new(), None));
    };
    let relays = rows
        .into_iter()
        .map(|r| RelayInstance {
            alive: r.expires_at > now,
            heartbeat_age_seconds: super::seconds_between(r.heartbeat_at, now),
            instance_id: r.instance_id,
            version: r.version,
            started_at: r.started_at,
            heartbeat_at: r.heartbeat_at,
            expires_at: r.expires_at,
            last_round_at: r.last_round_at,
            last_success_at: r.last_success_at,
        })
        .collect();
    Ok((relays, Some(now)))
}

/// Instances of `relays` whose heartbeat has not expired.
pub(crate) fn alive(relays: &[RelayInstance]) -> u64 {
    relays.iter().filter(|r| r.alive).count() as u64
}

/// Seconds from the newest `last_success_at` of `relays` to `now`, or, when none succeeded
/// yet, from the oldest `started_at`; 0 without any relay.
pub(crate) fn last_success_age(relays: &[RelayInstance], now: DateTime<Utc>) -> f64 {
    let newest_success = relays.iter().filter_map(|r| r.last_success_at).max();
    let oldest_start = relays.iter().map(|r| r.started_at).min();
    newest_success
        .or(oldest_start)
        .map_or(0.0, |t| super::seconds_between(t, now))
}
