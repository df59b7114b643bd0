//! Claiming: the candidate read and per-row claim of the seed, and the batch claim (each
//! backend's in its `claim.rs`).
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement, UpdateStatement};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult, TransactionTrait};
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use super::{event_columns, exec_by_ids, mysql, postgres, query_events, retry_transient};
use super::{sqlite, status_literal};
use super::{Backend, ByIds, Claim, Driver, OutboxConnection};

// Reached by the statement snapshots only: the MySQL claim runs them from its backend file.
#[cfg(test)]
pub use super::mysql::claim::{claim_locked_statement, locking_candidates_query};

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
///
/// # Errors
/// Any database error.
pub async fn select_candidates<C: OutboxConnection>(
    db: &C,
    batch: u64,
) -> Result<Vec<Model>, DbErr> {
    query_events(db, &candidates_query(db.driver()?, batch)).await
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE id = :id AND status = 'WAIT' AND next_retry_time <= now AND
/// retry_count = :seen_retry_count`.
///
/// The last two guards go beyond the seed: a candidate read before another instance released it
/// with back-off is not claimed early, and the `retry_count` the worker computes from stays the
/// row's real one.
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
///
/// # Errors
/// Any database error.
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

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND id IN (SELECT id FROM t_event_record WHERE
/// status = 'WAIT' AND next_retry_time <= now ORDER BY next_retry_time LIMIT :n) RETURNING *`:
/// the batch claim of SQLite (one writer at a time, so no lock clause); Postgres runs its own
/// form (`postgres/claim.rs`: `FOR UPDATE SKIP LOCKED` inside `id = ANY(ARRAY(..))`,
/// returning the columns whose values the relay does not know). MySQL/MariaDB run the two
/// statements of [`locking_candidates_query`] and [`claim_locked_statement`] instead (the
/// form above, which they reject, is rendered for them only for comparison).
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
/// update_time = now WHERE <wait> AND <ids> RETURNING *`: every batch claim's update, its
/// status guard `wait` and its id condition `ids` as the backend writes them, the statuses as
/// literals (constants of every claim; see [`status_literal`] for why literals). The Postgres
/// batch claim replaces `RETURNING *` with the columns whose values it does not know and
/// relies on `claimed_at` and `update_time` being set from the one `now` below
/// (`CURRENT_TIMESTAMP` on Postgres: the same value for the whole transaction); keep them so.
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

/// Runs an `UPDATE ... RETURNING *` claim (SQLite's batch claim, the ordered claim's heads on
/// Postgres and SQLite) and reads the claimed rows; transient conflicts are retried.
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
/// claiming, and returns them (status `SENDING`), oldest due first.
///
/// - Postgres: one `UPDATE ... WHERE ("status" = 'WAIT') IS TRUE AND id = ANY(ARRAY(SELECT ...
///   FOR UPDATE SKIP LOCKED)) RETURNING <the columns whose values it does not know>` (the
///   array form runs the locking subquery exactly once; the boolean guard keeps the update on
///   the primary key).
/// - SQLite: a lock-free read of whether anything is due, then (only when something is) the same
///   statement without the lock clause (SQLite has one writer at a time; the read keeps idle
///   relays off the write lock).
/// - MySQL/MariaDB (no `UPDATE ... RETURNING`, no `LIMIT` in an `IN` subquery): one short
///   `READ COMMITTED` transaction: `SELECT ... FOR UPDATE SKIP LOCKED` (with the database's
///   clock), `UPDATE ... WHERE id IN (...)`, commit; the locked rows are returned with the claim
///   applied.
///
/// The owner and status guards are those of [`claim`]; every event claimed is ours alone.
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
        Backend::MySql => mysql::claim::claim_batch(db, driver, owner, n).await?,
        Backend::Sqlite => sqlite::claim::claim_batch(db, driver, owner, n).await?,
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

/// Marks `done_ids` (delivered events of the claim `done_owner`) `SUCCESS` exactly as
/// [`super::mark_success_many`] does (guarded by `status = 'SENDING' AND claim_owner =
/// :done_owner`, its `rows_affected` returned) and claims up to `n` due events for `owner`
/// exactly as [`claim_batch`] does, in ONE statement and round trip (Postgres: a
/// data-modifying `WITH`, see [`mark_success_and_claim_statement`]): one commit per batch
/// instead of two. Both happen, or (on an error) neither.
///
/// # Errors
/// Any database error (transient conflicts are retried first); [`DbErr::Custom`] on a backend
/// without the single statement ([`Driver::mark_and_claim_in_one`]): there, mark and claim
/// with the two functions.
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
