//! The reclaim of expired leases, in bounded batches.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};
use sea_orm::DbErr;
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{exec_by_ids, query_ids, ByIds, Driver, OutboxConnection};

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

/// The reason stored in `last_error` when a lease expires.
pub const LEASE_EXPIRED: &str = "lease expired: the sender died or hung mid-send";

/// Expired leases handled per statement by [`reclaim_stuck`] (and rows per batch of the other
/// batched maintenance statements): a backlog is many short statements, never one giant one.
pub const RECLAIM_BATCH: u64 = 1000;

/// `SELECT id FROM t_event_record WHERE status = 'SENDING' AND claimed_at < now - :lease ORDER
/// BY claimed_at LIMIT :batch`: the oldest expired leases, read through
/// `idx_t_event_record_status_claimed_at` without locking anything.
pub fn expired_leases_query(driver: Driver, lease: Duration, batch: u64) -> SelectStatement {
    Query::select()
        .column(Column::Id)
        .from(driver.table())
        .and_where(Expr::col(Column::Status).eq(EventStatus::Sending.as_str()))
        .and_where(Expr::col(Column::ClaimedAt).lt(driver.now_minus(lease)))
        .order_by(Column::ClaimedAt, Order::Asc)
        .limit(batch)
        .to_owned()
}

/// `UPDATE t_event_record SET status = 'WAIT' | 'FAIL', claim_owner = NULL, claimed_at = NULL,
/// retry_count = retry_count + 1, last_error = 'lease expired ...', update_time = now WHERE id
/// IN (:ids) AND status = 'SENDING' AND claimed_at < now - :lease AND retry_count <
/// :max_retries` (to `WAIT`) or `>= :max_retries` (to `FAIL`). A lease renewed since
/// [`expired_leases_query`] read it is left alone; a reclaim counts as an attempt, so a message
/// that kills its sender every time ends in `FAIL`.
pub fn reclaim_statement(
    driver: Driver,
    ids: &[i64],
    lease: Duration,
    max_retries: u32,
    to: EventStatus,
) -> ByIds {
    let limit = i32::try_from(max_retries).unwrap_or(i32::MAX);
    let stmt = ByIds::update(driver.table())
        .set(Column::Status, Expr::val(to.as_str()))
        .set(Column::ClaimOwner, Expr::cust("NULL"))
        .set(Column::ClaimedAt, Expr::cust("NULL"))
        .set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
        .set(Column::LastError, Expr::val(LEASE_EXPIRED))
        .set(Column::UpdateTime, driver.now())
        .filter(Expr::col(Column::Id).is_in(ids.iter().copied()))
        .filter(driver.status_guard(Expr::val(EventStatus::Sending.as_str())))
        .filter(Expr::col(Column::ClaimedAt).lt(driver.now_minus(lease)));
    if to == EventStatus::Fail {
        stmt.filter(Expr::col(Column::RetryCount).gte(limit))
    } else {
        stmt.filter(Expr::col(Column::RetryCount).lt(limit))
    }
}

/// Handles every lease older than `lease` (an instance died or hung mid-send): back to `WAIT`
/// with `retry_count + 1`, or `FAIL` once `retry_count` has reached `max_retries`.
///
/// Works in batches of at most `batch` leases until a batch comes back short: each reads the
/// ids ([`expired_leases_query`], no locks) and updates those rows by id ([`reclaim_statement`]).
///
/// # Errors
/// [`DbErr::Custom`] when `batch` is 0; any database error (batches done before it stay done).
pub async fn reclaim_stuck<C: OutboxConnection>(
    db: &C,
    lease: Duration,
    max_retries: u32,
    batch: u64,
) -> Result<Reclaimed, DbErr> {
    if batch == 0 {
        return Err(DbErr::Custom(
            "reclaim batch size must be at least 1".into(),
        ));
    }
    let driver = db.driver()?;
    let mut done = Reclaimed::default();
    loop {
        let ids = query_ids(db, &expired_leases_query(driver, lease, batch)).await?;
        if ids.is_empty() {
            break;
        }
        let to_fail = reclaim_statement(driver, &ids, lease, max_retries, EventStatus::Fail);
        let failed = exec_by_ids(db, &to_fail).await?;
        let to_wait = reclaim_statement(driver, &ids, lease, max_retries, EventStatus::Wait);
        let requeued = exec_by_ids(db, &to_wait).await?;
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
