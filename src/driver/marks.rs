//! The owner-guarded transitions of a claimed event, and lease renewal.
//!
//! `owner` is always the claim's whole `claim_owner` value (`<instance id>#<claim token>`, see
//! [`crate::instance`]), so each guard fences off every other claim of the row, this
//! instance's earlier ones included.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{exec_by_ids, query_ids, status_literal, truncate_reason};
use super::{ByIds, Driver, OutboxConnection, Transition};

/// An update of the events `ids` picks guarded by `status = 'SENDING' AND claim_owner = :owner`.
fn owned(driver: Driver, ids: Expr, owner: &str) -> ByIds {
    ByIds::update(driver.table())
        .filter(ids)
        .filter(driver.status_guard(status_literal(EventStatus::Sending)))
        .filter(Expr::col(Column::ClaimOwner).eq(owner))
}

/// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id = :id AND status =
/// 'SENDING' AND claim_owner = :owner`. The lease columns stay as a record of who sent it.
pub async fn mark_success<C: OutboxConnection>(
    db: &C,
    id: i64,
    owner: &str,
) -> Result<Transition, DbErr> {
    let stmt = mark_success_statement(db.driver()?, id, owner);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`mark_success`].
pub fn mark_success_statement(driver: Driver, id: i64, owner: &str) -> ByIds {
    owned(driver, Expr::col(Column::Id).eq(id), owner)
        .set(Column::Status, status_literal(EventStatus::Success))
        .set(Column::UpdateTime, driver.now())
}

/// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
/// retry_count = retry_count + 1, next_retry_time = now + :backoff, last_error = :reason,
/// update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner = :owner`. The count
/// moves relative to the row, never from a copy read earlier.
pub async fn release_for_retry<C: OutboxConnection>(
    db: &C,
    id: i64,
    owner: &str,
    backoff: Duration,
    reason: &str,
) -> Result<Transition, DbErr> {
    let stmt = release_for_retry_statement(db.driver()?, id, owner, backoff, reason);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`release_for_retry`].
pub fn release_for_retry_statement(
    driver: Driver,
    id: i64,
    owner: &str,
    backoff: Duration,
    reason: &str,
) -> ByIds {
    release_statement(driver, id, owner, backoff, reason, true)
}

/// The release of event `id` back to `WAIT`, due after `delay`, its `retry_count` moved on
/// when `counted`.
fn release_statement(
    driver: Driver,
    id: i64,
    owner: &str,
    delay: Duration,
    reason: &str,
    counted: bool,
) -> ByIds {
    let stmt = owned(driver, Expr::col(Column::Id).eq(id), owner)
        .set(Column::Status, status_literal(EventStatus::Wait))
        .set(Column::ClaimOwner, Expr::cust("NULL"))
        .set(Column::ClaimedAt, Expr::cust("NULL"));
    let stmt = if counted {
        stmt.set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
    } else {
        stmt
    };
    stmt.set(Column::NextRetryTime, driver.now_plus(delay))
        .set(Column::LastError, Expr::val(truncate_reason(reason)))
        .set(Column::UpdateTime, driver.now())
}

/// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
/// next_retry_time = now + :delay, last_error = :reason, update_time = now WHERE id = :id AND
/// status = 'SENDING' AND claim_owner = :owner`: puts back an event whose send failed because
/// of the publisher's own configuration ([`crate::PublishErrorKind::Configuration`]), like
/// [`release_for_retry`] but with `retry_count` unchanged: the attempt does not count.
pub async fn release_uncounted<C: OutboxConnection>(
    db: &C,
    id: i64,
    owner: &str,
    delay: Duration,
    reason: &str,
) -> Result<Transition, DbErr> {
    let stmt = release_uncounted_statement(db.driver()?, id, owner, delay, reason);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`release_uncounted`].
pub fn release_uncounted_statement(
    driver: Driver,
    id: i64,
    owner: &str,
    delay: Duration,
    reason: &str,
) -> ByIds {
    release_statement(driver, id, owner, delay, reason, false)
}

/// `UPDATE t_event_record SET status = 'FAIL', retry_count = retry_count + 1, last_error =
/// :reason, update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner = :owner`: a
/// dead letter.
pub async fn mark_fail<C: OutboxConnection>(
    db: &C,
    id: i64,
    owner: &str,
    reason: &str,
) -> Result<Transition, DbErr> {
    let stmt = mark_fail_statement(db.driver()?, id, owner, reason);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`mark_fail`].
pub fn mark_fail_statement(driver: Driver, id: i64, owner: &str, reason: &str) -> ByIds {
    owned(driver, Expr::col(Column::Id).eq(id), owner)
        .set(Column::Status, status_literal(EventStatus::Fail))
        .set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
        .set(Column::LastError, Expr::val(truncate_reason(reason)))
        .set(Column::UpdateTime, driver.now())
}

/// [`owned`] for `id IN (:ids)`.
fn owned_many(driver: Driver, ids: &[i64], owner: &str) -> ByIds {
    let ids = Expr::col(Column::Id).is_in(ids.iter().copied());
    owned(driver, ids, owner)
}

/// Runs an [`owned_many`] statement through the primary key ([`exec_by_ids`]) and returns how
/// many rows were still ours; nothing at all for no ids.
async fn update_owned<C: ConnectionTrait>(db: &C, ids: &[i64], stmt: ByIds) -> Result<u64, DbErr> {
    if ids.is_empty() {
        return Ok(0);
    }
    exec_by_ids(db, &stmt).await
}

/// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id IN (:ids) AND
/// status = 'SENDING' AND claim_owner = :owner`: one statement for a round's deliveries. Returns
/// how many rows were still ours (the rest were reclaimed meanwhile: late acks).
pub async fn mark_success_many<C: OutboxConnection>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = mark_success_many_statement(db.driver()?, ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`mark_success_many`].
pub fn mark_success_many_statement(driver: Driver, ids: &[i64], owner: &str) -> ByIds {
    owned_many(driver, ids, owner)
        .set(Column::Status, status_literal(EventStatus::Success))
        .set(Column::UpdateTime, driver.now())
}

/// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
/// update_time = now WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner = :owner`: hands
/// claimed but unsent events back at once (graceful shutdown), `retry_count` and
/// `next_retry_time` unchanged, so another instance can send them without waiting for the lease.
pub async fn release_unsent<C: OutboxConnection>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = release_unsent_statement(db.driver()?, ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`release_unsent`].
pub fn release_unsent_statement(driver: Driver, ids: &[i64], owner: &str) -> ByIds {
    owned_many(driver, ids, owner)
        .set(Column::Status, status_literal(EventStatus::Wait))
        .set(Column::ClaimOwner, Expr::cust("NULL"))
        .set(Column::ClaimedAt, Expr::cust("NULL"))
        .set(Column::UpdateTime, driver.now())
}

/// `UPDATE t_event_record SET claimed_at = now WHERE id IN (:ids) AND status = 'SENDING' AND
/// claim_owner = :owner`: renews the leases of sends still in flight. Returns how many were
/// still ours; fewer than `ids.len()` means some lease was lost (see [`owned_ids`]).
pub async fn renew_leases<C: OutboxConnection>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = renew_leases_statement(db.driver()?, ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`renew_leases`].
pub fn renew_leases_statement(driver: Driver, ids: &[i64], owner: &str) -> ByIds {
    owned_many(driver, ids, owner).set(Column::ClaimedAt, driver.now())
}

/// `SELECT id FROM t_event_record WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner =
/// :owner`: which of `ids` are still leased to `owner` (the status guard as every statement by
/// ids writes it, [`Driver::status_guard`]).
pub fn owned_ids_query(driver: Driver, ids: &[i64], owner: &str) -> SelectStatement {
    Query::select()
        .column(Column::Id)
        .from(driver.table())
        .and_where(Expr::col(Column::Id).is_in(ids.iter().copied()))
        .and_where(driver.status_guard(status_literal(EventStatus::Sending)))
        .and_where(Expr::col(Column::ClaimOwner).eq(owner))
        .to_owned()
}

/// The ids among `ids` still `SENDING` under `owner`'s lease ([`owned_ids_query`]).
pub async fn owned_ids<C: OutboxConnection>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<Vec<i64>, DbErr> {
    query_ids(db, &owned_ids_query(db.driver()?, ids, owner)).await
}
