//! Claiming: the candidate read and per-row claim of the seed, and the batch claim (each
//! backend's in its `claim.rs`).
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement, UpdateStatement};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult};
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use super::{event_columns, mysql, postgres, retry_transient, sqlite, status_literal};
use super::{Backend, ByIds, Driver, RelayDb};
use crate::Completion;

impl Driver {
    /// `SELECT * FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
    /// next_retry_time LIMIT batch`: the due events, oldest due first, read through
    /// `idx_t_event_record_status_next_retry` without a lock. Several instances seeing the same
    /// rows is normal: [`Driver::claim`] decides who sends.
    pub fn candidates(self, batch: u64) -> SelectStatement {
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
            .and_where(Expr::col(Column::NextRetryTime).lte(self.now()))
            .order_by(Column::NextRetryTime, Order::Asc)
            .limit(batch)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
    /// update_time = now WHERE id = :id AND status = 'WAIT' AND next_retry_time <= now AND
    /// retry_count = :seen_retry_count`: the lease on one candidate ([`super::Claim`]). A
    /// candidate released with back-off meanwhile is not claimed early, and the worker's
    /// `retry_count` stays the row's.
    pub fn claim(self, id: i64, seen_retry_count: i32, owner: &str) -> ByIds {
        let now = self.now();
        ByIds::update(self)
            .claimed_by(owner, now.clone())
            .id(id)
            .filter(self.status_guard(Expr::val(EventStatus::Wait.as_str())))
            .filter(Expr::col(Column::NextRetryTime).lte(now))
            .filter(Expr::col(Column::RetryCount).eq(seen_retry_count))
    }

    /// `SELECT id FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
    /// next_retry_time LIMIT n`: the ids of [`Driver::candidates`].
    pub fn due_ids(self, n: u64) -> SelectStatement {
        self.candidates(n)
            .clear_selects()
            .column(Column::Id)
            .to_owned()
    }

    /// `UPDATE ... WHERE status = 'WAIT' AND id IN (<due_ids>) RETURNING *`: the batch claim of
    /// SQLite ([`Driver::claim_in`]); Postgres has its own form (`postgres/claim.rs`),
    /// MySQL/MariaDB run [`Driver::locking_candidates`] and [`Driver::claim_locked`] instead.
    pub fn claim_batch(self, owner: &str, n: u64) -> UpdateStatement {
        match self.backend {
            Backend::Postgres => postgres::claim::claim_batch_statement(self, owner, n),
            Backend::MySql | Backend::Sqlite => self.claim_in(owner, self.due_ids(n)),
        }
    }

    /// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
    /// update_time = now WHERE status = 'WAIT' AND id IN (<due>) RETURNING *`: the claim over
    /// the ids `due` selects without a lock clause (SQLite's batch claim and ordered heads).
    pub(super) fn claim_in(self, owner: &str, due: SelectStatement) -> UpdateStatement {
        self.claim_update(
            owner,
            Expr::col(Column::Status).eq(status_literal(EventStatus::Wait)),
            Expr::col(Column::Id).in_subquery(due),
        )
    }

    /// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
    /// update_time = now WHERE <wait> AND <ids> RETURNING *`: every batch claim's update, the
    /// statuses as literals ([`status_literal`]). Postgres' claim reads `update_time` as
    /// `claimed_at`: keep both set from the one `now`.
    pub(super) fn claim_update(self, owner: &str, wait: Expr, ids: Expr) -> UpdateStatement {
        let now = self.now();
        let mut update = Query::update();
        update
            .table(self.table())
            .value(Column::Status, status_literal(EventStatus::Sending))
            .value(Column::ClaimOwner, Expr::val(owner))
            .value(Column::ClaimedAt, now.clone())
            .value(Column::UpdateTime, now)
            .and_where(wait)
            .and_where(ids);
        update.returning_all();
        update
    }
}

impl ByIds {
    /// `SET status = 'SENDING', claim_owner = :owner, claimed_at = :now, update_time = :now`.
    pub(super) fn claimed_by(self, owner: &str, now: Expr) -> Self {
        self.set(Column::Status, Expr::val(EventStatus::Sending.as_str()))
            .set(Column::ClaimOwner, Expr::val(owner))
            .set(Column::ClaimedAt, now.clone())
            .set(Column::UpdateTime, now)
    }
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
/// holds its form; the guards are those of [`Driver::claim`].
///
/// # Errors
/// Any database error (transient conflicts are retried first).
pub async fn claim_batch(db: &RelayDb, owner: &str, n: u64) -> Result<Vec<Model>, DbErr> {
    let driver = db.driver();
    let mut claimed = match driver.backend {
        Backend::Postgres => postgres::claim::claim_batch(db, driver, owner, n).await?,
        Backend::MySql => mysql::claim::claim_due(db, owner, n).await?,
        Backend::Sqlite => sqlite::claim::claim_if_due(db, &driver.claim_batch(owner, n)).await?,
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

/// Completes `done_ids` (delivered events of the claim `done_owner`) as
/// [`Driver::complete`] does with `completion` and claims up to `n` due events for `owner` as
/// [`claim_batch`] does, in one statement (`postgres/claim.rs`): both happen, or (on an error)
/// neither.
///
/// # Errors
/// Any database error (transient conflicts are retried first); [`DbErr::Custom`] on a backend
/// without the single statement ([`Driver::mark_and_claim_in_one`]).
pub async fn mark_success_and_claim_batch(
    db: &RelayDb,
    done_ids: &[i64],
    done_owner: &str,
    completion: Completion,
    owner: &str,
    n: u64,
) -> Result<MarkedAndClaimed, DbErr> {
    let driver = db.driver();
    if !driver.mark_and_claim_in_one() {
        return Err(DbErr::Custom(format!(
            "{:?}: no single statement marks and claims; mark, then claim",
            driver.backend
        )));
    }
    let (marked, mut claimed) = postgres::claim::mark_success_and_claim(
        db,
        driver,
        (done_ids, done_owner, completion),
        owner,
        n,
    )
    .await?;
    sort_by_due(&mut claimed);
    Ok(MarkedAndClaimed { marked, claimed })
}
