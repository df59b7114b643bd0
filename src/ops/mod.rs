//! Operating the outbox: backlog statistics, dead-letter handling, retention, the relays'
//! heartbeats ([`relays`]) and a health verdict ([`health`]).
//!
//! The library side of the `outbox` command-line tool. Each function works on the table of the
//! [`Outbox`] it is given first (`ops::stats(&Outbox::default(), &db, lease)` for
//! `t_event_record`) and compares times by the database's clock. Dead letters (`FAIL` rows)
//! stay until retried ([`retry_dead`]) or discarded ([`discard_dead`]), or healed by a relay
//! with [`crate::HealPolicy`]; [`dead_letter_groups`] groups them by the [`fingerprint`] of
//! their error. Delivered rows stay until a relay's retention
//! ([`crate::WorkerConfig::retention`], 7 days by default) or [`purge_delivered`] deletes them.
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;
use serde::Serialize;

use crate::driver::admin;
use crate::error::OutboxError;
use crate::outbox::Outbox;

mod dead;
mod fingerprint;
mod groups;
mod health;
mod relays;
mod search;

pub use dead::*;
pub use fingerprint::fingerprint;
pub use groups::*;
pub use health::*;
pub use relays::*;
pub use search::*;

/// A snapshot of the outbox table, from [`stats`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OutboxStats {
    /// `WAIT` rows: waiting for their first send or for a retry.
    pub wait: u64,
    /// `SENDING` rows: claimed by an instance (leased).
    pub sending: u64,
    /// `SUCCESS` rows: delivered, kept until retention or a purge deletes them (none with
    /// [`crate::Completion::Delete`]).
    pub success: u64,
    /// Events delivered since the table's first delivery, whatever became of their rows: the
    /// relays' count in `t_outbox_counter`, added at each heartbeat (it trails the deliveries
    /// by up to a heartbeat interval).
    pub delivered: u64,
    /// `FAIL` rows: dead letters.
    pub fail: u64,
    /// The dead letters needing a person: the same number as `fail`.
    pub dead_letters: u64,
    /// Age in seconds of the oldest `WAIT` row (database now − its `create_time`, both read from
    /// the database clock); `None` when nothing waits.
    pub oldest_wait_age_seconds: Option<f64>,
    /// `SENDING` rows whose lease (`claimed_at`) is older than `lease_seconds`: their sender
    /// died or hung; the next reclaim pass returns them to `WAIT`.
    pub sending_over_lease: u64,
    /// The lease the `sending_over_lease` count was judged by, in seconds.
    pub lease_seconds: f64,
    /// Keys (`biz_no`) with `WAIT` events behind a dead letter of the same key ([`blocked_keys`]).
    pub blocked_keys: u64,
    /// Age in seconds (database clock) of the oldest `WAIT` event behind a dead letter of its
    /// key (now − its `create_time`); `None` when no key is blocked.
    pub oldest_blocked_age_seconds: Option<f64>,
}

/// The keys held back behind a dead letter, from [`blocked_keys`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BlockedKeys {
    /// Keys (`biz_no`) with a `WAIT` event after a `FAIL` event of the same key (smaller id).
    pub keys: u64,
    /// Age in seconds (database now − `create_time`) of the oldest such `WAIT` event; `None`
    /// when there is none.
    pub oldest_age_seconds: Option<f64>,
}

/// Counts the keys whose `WAIT` events sit behind a dead letter (`FAIL`) of their key, and the
/// age of the oldest such event: the keys an ordered relay with
/// [`crate::OrderedPolicy::Block`] sends nothing more of until `outbox dead retry` or `discard`.
///
/// SQL (one read, no lock): `SELECT COUNT(DISTINCT w.biz_no), MIN(w.create_time), now FROM
/// (SELECT biz_no, MIN(id) AS first_fail FROM t_event_record WHERE status = 'FAIL' GROUP BY
/// biz_no) AS f JOIN t_event_record AS w ON w.biz_no = f.biz_no AND w.status = 'WAIT'
/// AND w.id > f.first_fail`: one range of `idx_t_event_record_biz_no_status_id` per key with a
/// dead letter.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn blocked_keys<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<BlockedKeys, OutboxError> {
    let row = db.query_one(&outbox.driver(db)?.blocked_keys()).await?;
    let Some(row) = row else {
        return Ok(BlockedKeys::default());
    };
    let keys: i64 = row.try_get("", "blocked_keys")?;
    let oldest: Option<DateTime<Utc>> = row.try_get("", "oldest")?;
    let now: DateTime<Utc> = row.try_get("", "now")?;
    Ok(BlockedKeys {
        keys: u64::try_from(keys).unwrap_or(0),
        oldest_age_seconds: oldest.map(|oldest| seconds_between(oldest, now)),
    })
}

/// `now − then` in seconds, at least 0.
fn seconds_between(then: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    ((now - then).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6).max(0.0)
}

/// Counts the rows per status, the age of the oldest waiting event and the `SENDING` rows
/// older than `lease` (pass the workers' lease, default 10 minutes).
///
/// SQL (five reads, no lock; not one snapshot, so a row changing meanwhile may be counted in
/// a neighbouring status):
/// `SELECT status, COUNT(id) FROM t_event_record GROUP BY status`;
/// `SELECT MIN(create_time), now FROM t_event_record WHERE status = 'WAIT'`;
/// `SELECT COUNT(*) FROM t_event_record WHERE status = 'SENDING' AND claimed_at < now - lease`;
/// the read of [`blocked_keys`]; `SELECT delivered FROM t_outbox_counter WHERE outbox_table =
/// :table`.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::SchemaOutdated`]
/// without `t_outbox_counter` (migration `m20261206_000005_create_t_outbox_relay`);
/// [`OutboxError::Db`] otherwise.
pub async fn stats<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    lease: Duration,
) -> Result<OutboxStats, OutboxError> {
    let driver = outbox.driver(db)?;
    let count = by_status(admin::count_by_status(db, driver, None).await?);
    let oldest_wait_age_seconds = oldest_wait_age(db, outbox, Column::CreateTime).await?;
    let sending_over_lease = admin::count_sending_over_lease(db, driver, lease).await?;
    let blocked = blocked_keys(outbox, db).await?;
    let delivered = crate::driver::counter::delivered(db, driver).await?;
    Ok(OutboxStats {
        delivered,
        wait: count(EventStatus::Wait),
        sending: count(EventStatus::Sending),
        success: count(EventStatus::Success),
        fail: count(EventStatus::Fail),
        dead_letters: count(EventStatus::Fail),
        oldest_wait_age_seconds,
        sending_over_lease,
        lease_seconds: lease.as_secs_f64(),
        blocked_keys: blocked.keys,
        oldest_blocked_age_seconds: blocked.oldest_age_seconds,
    })
}

/// The unfinished part of the outbox, cheap enough to read every few seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Backlog {
    /// `WAIT` rows.
    pub wait: u64,
    /// `SENDING` rows.
    pub sending: u64,
    /// `FAIL` rows (dead letters).
    pub fail: u64,
    /// How long, in seconds by the database clock, the most overdue `WAIT` row has been due
    /// (now − its `next_retry_time`): the relay's lag. 0 when nothing is due.
    pub oldest_wait_age_seconds: f64,
    /// Age in seconds (database now − `create_time`) of the oldest event not yet delivered,
    /// `WAIT` or `SENDING`, due or backing off; 0 when there is none.
    pub oldest_undelivered_age_seconds: f64,
    /// `WAIT` events that failed before (`retry_count > 0`) and wait out their back-off
    /// (`next_retry_time` in the future).
    pub backing_off: u64,
}

/// Reads the [`Backlog`] in one statement, an index range over the unfinished rows that skips
/// the delivered ones: `SELECT status, COUNT(id), MIN(create_time), MIN(next_retry_time),
/// COUNT(CASE WHEN retry_count > 0 AND next_retry_time > now THEN 1 END), now FROM
/// t_event_record WHERE status IN ('WAIT', 'SENDING', 'FAIL') GROUP BY status`. The worker
/// refreshes the gauges `outbox_backlog{status}`, `outbox_oldest_wait_age_seconds`,
/// `outbox_oldest_undelivered_age_seconds` and `outbox_backoff_events` with it.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn backlog<C: ConnectionTrait>(outbox: &Outbox, db: &C) -> Result<Backlog, OutboxError> {
    let rows = admin::backlog(db, outbox.driver(db)?).await?;
    let of = |status: EventStatus| rows.iter().find(|r| r.status == status.as_str());
    let count = |status| of(status).map_or(0, |r| u64::try_from(r.rows).unwrap_or(0));
    let age = |then: Option<DateTime<Utc>>, now| then.map_or(0.0, |t| seconds_between(t, now));
    let undelivered = [EventStatus::Wait, EventStatus::Sending]
        .into_iter()
        .filter_map(of)
        .map(|r| age(r.oldest_created, r.now))
        .fold(0.0, f64::max);
    Ok(Backlog {
        wait: count(EventStatus::Wait),
        sending: count(EventStatus::Sending),
        fail: count(EventStatus::Fail),
        oldest_wait_age_seconds: of(EventStatus::Wait).map_or(0.0, |r| age(r.oldest_due, r.now)),
        oldest_undelivered_age_seconds: undelivered,
        backing_off: of(EventStatus::Wait).map_or(0, |r| u64::try_from(r.backing_off).unwrap_or(0)),
    })
}

/// The count of a status in the rows of one `GROUP BY status` query (0 when absent).
fn by_status(rows: Vec<(String, i64)>) -> impl Fn(EventStatus) -> u64 {
    move |status| {
        rows.iter()
            .filter(|(s, _)| s == status.as_str())
            .map(|(_, n)| u64::try_from(*n).unwrap_or(0))
            .sum()
    }
}

/// Seconds from the smallest `column` of the `WAIT` rows to the database's now; `None` when
/// nothing waits.
async fn oldest_wait_age<C: ConnectionTrait>(
    db: &C,
    outbox: &Outbox,
    column: Column,
) -> Result<Option<f64>, OutboxError> {
    let oldest = admin::oldest_wait(db, outbox.driver(db)?, column).await?;
    Ok(oldest.and_then(|(oldest, now)| Some(seconds_between(oldest?, now))))
}

/// Fails with [`OutboxError::TableMissing`] unless `outbox`'s table exists (reads at most one
/// id: `SELECT id FROM t_event_record LIMIT 1`), for tools that should refuse to start. On
/// Postgres it is one simple-protocol query, so that it also passes a transaction-mode pooler
/// ([`crate::StatementProtocol::Simple`]).
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn check_table<C: ConnectionTrait>(outbox: &Outbox, db: &C) -> Result<(), OutboxError> {
    Ok(admin::check_table(db, outbox.driver(db)?).await?)
}
