//! The reclaim of expired leases, in bounded batches.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};
use sea_orm::DbErr;
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{ByIds, Driver, RelayDb};

/// What a reclaim pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct Reclaimed {
    /// Expired leases put back to `WAIT` (retry_count + 1).
    pub requeued: u64,
    /// Expired leases whose retries were used up: now `FAIL` (dead letters).
    pub dead_lettered: u64,
}

impl Reclaimed {
    /// Every expired lease handled.
    pub fn total(&self) -> u64 {
        self.requeued + self.dead_lettered
    }
}

/// The reason stored in `last_error` when a lease expires, with the prefix of
/// [`crate::FailureKind::LeaseExpired`].
pub const LEASE_EXPIRED: &str = "lease-expired: the sender died or hung mid-send";

/// Expired leases handled per statement by [`reclaim_stuck`] (and rows per batch of the other
/// batched maintenance statements): a backlog is many short statements, never one giant one.
pub const RECLAIM_BATCH: u64 = 1000;

impl Driver {
    /// `SELECT id FROM t_event_record WHERE status = 'SENDING' AND claimed_at < now - :lease
    /// ORDER BY claimed_at LIMIT :batch`: the oldest expired leases, read through
    /// `idx_t_event_record_status_claimed_at` without locking anything.
    pub fn expired_leases(self, lease: Duration, batch: u64) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Sending.as_str()))
            .and_where(Expr::col(Column::ClaimedAt).lt(self.now_minus(lease)))
            .order_by(Column::ClaimedAt, Order::Asc)
            .limit(batch)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'WAIT' | 'FAIL', claim_owner = NULL, claimed_at =
    /// NULL, retry_count = retry_count + 1, last_error = 'lease-expired: ...', update_time = now
    /// WHERE id IN (:ids) AND status = 'SENDING' AND claimed_at < now - :lease AND retry_count <
    /// :max_retries` (to `WAIT`) or `>= :max_retries` (to `FAIL`). A lease renewed since
    /// [`Driver::expired_leases`] read it is left alone; a reclaim counts as an attempt, so a
    /// message that kills its sender every time ends in `FAIL`.
    pub fn reclaim(self, ids: &[i64], lease: Duration, max_retries: u32, to: EventStatus) -> ByIds {
        let limit = i32::try_from(max_retries).unwrap_or(i32::MAX);
        let stmt = ByIds::update(self)
            .set(Column::Status, Expr::val(to.as_str()))
            .free_lease()
            .set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
            .set(Column::LastError, Expr::val(LEASE_EXPIRED))
            .set(Column::UpdateTime, self.now())
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Sending.as_str())))
            .filter(Expr::col(Column::ClaimedAt).lt(self.now_minus(lease)));
        if to == EventStatus::Fail {
            stmt.filter(Expr::col(Column::RetryCount).gte(limit))
        } else {
            stmt.filter(Expr::col(Column::RetryCount).lt(limit))
        }
    }
}

/// Handles every lease older than `lease` (an instance died or hung mid-send): back to `WAIT`
/// with `retry_count + 1`, or `FAIL` once `retry_count` has reached `max_retries`.
///
/// Works in batches of at most `batch` leases until a batch comes back short: each reads the
/// ids ([`Driver::expired_leases`], no locks) and updates those rows by id ([`Driver::reclaim`]).
///
/// # Errors
/// [`DbErr::Custom`] when `batch` is 0; any database error (batches done before it stay done).
pub async fn reclaim_stuck(
    db: &RelayDb,
    lease: Duration,
    max_retries: u32,
    batch: u64,
) -> Result<Reclaimed, DbErr> {
    if batch == 0 {
        return Err(DbErr::Custom(
            "reclaim batch size must be at least 1".into(),
        ));
    }
    let mut done = Reclaimed::default();
    loop {
        let ids = db.query_ids(|d| d.expired_leases(lease, batch)).await?;
        if ids.is_empty() {
            break;
        }
        let failed = db
            .run(|d| d.reclaim(&ids, lease, max_retries, EventStatus::Fail))
            .await?;
        let requeued = db
            .run(|d| d.reclaim(&ids, lease, max_retries, EventStatus::Wait))
            .await?;
        done.dead_lettered += failed;
        done.requeued += requeued;
        // A short batch is the last; a full one that changed nothing (every row renewed or
        // handled by another instance meanwhile) ends the pass too, so it can never spin.
        if (ids.len() as u64) < batch || failed + requeued == 0 {
            break;
        }
    }
    Ok(done)
}
