//! Claiming: the candidate read and per-row claim of the seed, and the batch claim (each
//! backend's in its `claim.rs`).
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement, UpdateStatement};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, TransactionTrait};
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use super::{event_columns, exec_by_ids, mysql, postgres, query_events, retry_transient};
use super::{sqlite, status_literal};
use super::{Backend, ByIds, Claim, Driver, OutboxConnection};

pub use super::mysql::claim::locking_candidates_query;
// Reached by the statement snapshots only: the MySQL claim runs it from its backend file.
#[cfg(test)]
pub use super::mysql::claim::claim_locked_statement;

/// `SELECT * FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
/// next_retry_time LIMIT batch`: served by `idx_t_event_record_status_next_retry`. Takes no lock.
pub fn candidates_query(driver: Driver, batch: u64) -> SelectStatement {
    Query::select()
        .columns(event_columns(driver))
        .from(driver.table())
        .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
        .and_where(Expr::col(Column::NextRetryTime).lte(driver.now()))
        .order_by(Column::NextRetryTime, Order::Asc)
        .limit(batch)
        .to_owned()
}

/// The due `WAIT` events, oldest due first, at most `batch`. Several instances seeing the same
/// rows is normal: [`claim`] decides who sends.
pub async fn select_candidates<C: OutboxConnection>(
    db: &C,
    batch: u64,
) -> Result<Vec<Model>, DbErr> {
    query_events(db, &candidates_query(db.driver()?, batch)).await
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE id = :id AND status = 'WAIT' AND next_retry_time <= now AND
/// retry_count = :seen_retry_count`: a candidate released with back-off meanwhile is not
/// claimed early, and the worker's `retry_count` stays the row's.
pub fn claim_statement(driver: Driver, id: i64, seen_retry_count: i32, owner: &str) -> ByIds {
    let now = driver.now();
    ByIds::update(driver.table())
        .set(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .set(Column::ClaimOwner, Expr::val(owner))
        .set(Column::ClaimedAt, now.clone())
        .set(Column::UpdateTime, now.clone())
        .filter(Expr::col(Column::Id).eq(id))
        .filter(driver.status_guard(Expr::val(EventStatus::Wait.as_str())))
        .filter(Expr::col(Column::NextRetryTime).lte(now))
        .filter(Expr::col(Column::RetryCount).eq(seen_retry_count))
}

/// Takes the lease on event `id` (seen with `seen_retry_count`) for `owner`.
pub async fn claim<C: OutboxConnection>(
    db: &C,
    id: i64,
    seen_retry_count: i32,
    owner: &str,
) -> Result<Claim, DbErr> {
    let stmt = claim_statement(db.driver()?, id, seen_retry_count, owner);
    let rows = exec_by_ids(db, &stmt).await?;
    Ok(if rows == 1 { Claim::Won } else { Claim::Lost })
}

/// `UPDATE ... WHERE status = 'WAIT' AND id IN (SELECT id ... WHERE status = 'WAIT' AND
/// next_retry_time <= now ORDER BY next_retry_time LIMIT :n) RETURNING *`: the batch claim of
/// SQLite; Postgres has its own form (`postgres/claim.rs`), MySQL/MariaDB run
/// [`locking_candidates_query`] and [`claim_locked_statement`] instead.
pub fn claim_batch_statement(driver: Driver, owner: &str, n: u64) -> UpdateStatement {
    match driver.backend {
        Backend::Postgres => postgres::claim::claim_batch_statement(driver, owner, n),
        Backend::MySql | Backend::Sqlite => {
            let mut due = Query::select();
            due.column(Column::Id)
                .from(driver.table())
                .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
                .and_where(Expr::col(Column::NextRetryTime).lte(driver.now()))
                .order_by(Column::NextRetryTime, Order::Asc)
                .limit(n);
            claim_in(driver, owner, due)
        }
    }
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND id IN (<due>) RETURNING *`: the claim over the
/// ids `due` selects without a lock clause (SQLite's batch claim and ordered heads).
pub(super) fn claim_in(driver: Driver, owner: &str, due: SelectStatement) -> UpdateStatement {
    claim_update(
        driver,
        owner,
        Expr::col(Column::Status).eq(status_literal(EventStatus::Wait)),
        Expr::col(Column::Id).in_subquery(due),
    )
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE <wait> AND <ids> RETURNING *`: every batch claim's update, the
/// statuses as literals ([`status_literal`]). Postgres' claim reads `update_time` as
/// `claimed_at`: keep both set from the one `now`.
pub(super) fn claim_update(driver: Driver, owner: &str, wait: Expr, ids: Expr) -> UpdateStatement {
    let now = driver.now();
    let mut update = Query::update();
    update
        .table(driver.table())
        .value(Column::Status, status_literal(EventStatus::Sending))
        .value(Column::ClaimOwner, Expr::val(owner))
        .value(Column::ClaimedAt, now.clone())
        .value(Column::UpdateTime, now)
        .and_where(wait)
        .and_where(ids);
    update.returning_all();
    update
}

/// Runs an `UPDATE ... RETURNING *` claim and reads the claimed rows; transient conflicts are
/// retried.
pub(super) async fn claim_returning<C: ConnectionTrait>(
    db: &C,
    stmt: &UpdateStatement,
) -> Result<Vec<Model>, DbErr> {
    let rows = retry_transient(|| db.query_all(stmt)).await?;
    rows.iter()
        .map(|r| Model::from_query_result(r, ""))
        .collect()
}

/// Claims up to `n` due events for `owner` without waiting on rows other instances are
/// claiming, and returns them (status `SENDING`), oldest due first. Each backend's `claim.rs`
/// holds its form; the guards are those of [`claim`].
///
/// # Errors
/// Any database error (transient conflicts are retried first).
pub async fn claim_batch<C>(db: &C, owner: &str, n: u64) -> Result<Vec<Model>, DbErr>
where
    C: OutboxConnection + TransactionTrait,
{
    let driver = db.driver()?;
    let mut claimed = match driver.backend {
        Backend::Postgres => postgres::claim::claim_batch(db, driver, owner, n).await?,
        Backend::MySql => {
            mysql::claim::claim(db, driver, owner, &locking_candidates_query(driver, n)).await?
        }
        Backend::Sqlite => {
            let claim = claim_batch_statement(driver, owner, n);
            sqlite::claim::claim_if_due(db, driver, &claim).await?
        }
    };
    sort_by_due(&mut claimed);
    Ok(claimed)
}

/// Orders claimed events oldest due first (then by id).
pub(super) fn sort_by_due(events: &mut [Model]) {
    events.sort_by(|a, b| {
        a.next_retry_time
            .cmp(&b.next_retry_time)
            .then(a.id.cmp(&b.id))
    });
}

/// What [`mark_success_and_claim_batch`] did.
#[derive(Debug)]
pub struct MarkedAndClaimed {
    /// How many of the delivered ids were still the claim's and are now `SUCCESS` (the mark's
    /// `rows_affected`; the rest were reclaimed meanwhile: late acks).
    pub marked: u64,
    /// The events now claimed (status `SENDING`), oldest due first, as [`claim_batch`]
    /// returns them.
    pub claimed: Vec<Model>,
}

/// The statement of [`mark_success_and_claim_batch`] on `driver`; `None` where no single
/// statement can do both ([`Driver::mark_and_claim_in_one`]: Postgres only).
#[cfg(test)]
pub fn mark_success_and_claim_statement(
    driver: Driver,
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Option<sea_orm::Statement> {
    match driver.backend {
        Backend::Postgres => Some(postgres::claim::mark_success_and_claim_statement(
            driver, done_ids, done_owner, owner, n,
        )),
        Backend::MySql | Backend::Sqlite => None,
    }
}

/// Marks `done_ids` (delivered events of the claim `done_owner`) `SUCCESS` as
/// [`super::mark_success_many`] does and claims up to `n` due events for `owner` as
/// [`claim_batch`] does, in one statement ([`mark_success_and_claim_statement`]): both happen,
/// or (on an error) neither.
///
/// # Errors
/// Any database error (transient conflicts are retried first); [`DbErr::Custom`] on a backend
/// without the single statement ([`Driver::mark_and_claim_in_one`]).
pub async fn mark_success_and_claim_batch<C: OutboxConnection>(
    db: &C,
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Result<MarkedAndClaimed, DbErr> {
    let driver = db.driver()?;
    let (marked, mut claimed) = match driver.backend {
        Backend::Postgres => {
            postgres::claim::mark_success_and_claim(db, driver, done_ids, done_owner, owner, n)
                .await?
        }
        other => {
            return Err(DbErr::Custom(format!(
                "{other:?}: no single statement marks and claims; mark, then claim"
            )))
        }
    };
    sort_by_due(&mut claimed);
    Ok(MarkedAndClaimed { marked, claimed })
}
