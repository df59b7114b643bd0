//! The MySQL/MariaDB batch claim: no `UPDATE ... RETURNING` and no `LIMIT` in an `IN`
//! subquery, so one short `READ COMMITTED` transaction: a locking read, then the update by ids.
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType, SelectStatement};
use sea_orm::{
    ConnectionTrait, DbErr, FromQueryResult, IsolationLevel, Statement, TransactionTrait,
};
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use crate::driver::{retry_transient, ByIds, Driver, RelayDb};

/// The MySQL/MariaDB claim over the locking read `locking` ([`Driver::locking_candidates`] or
/// the ordered claim's heads, [`Driver::ordered_heads_query`]): [`claim_locked`], run again on a
/// transient conflict. InnoDB locks the outer rows only: the predecessor subqueries read
/// committed rows, so a predecessor being claimed right now still reads as `WAIT`.
pub(crate) async fn claim(
    db: &RelayDb,
    owner: &str,
    locking: &SelectStatement,
) -> Result<Vec<Model>, DbErr> {
    let driver = db.driver();
    let locking = driver.build(locking);
    retry_transient(|| claim_locked(db.inner(), driver, owner, locking.clone())).await
}

/// The MySQL/MariaDB batch claim of up to `n` due events, its scan resumed where the worker's
/// last full claim ended ([`super::resume`]).
pub(crate) async fn claim_due(db: &RelayDb, owner: &str, n: u64) -> Result<Vec<Model>, DbErr> {
    let resume = db.scan_resume();
    let from = resume.start();
    let claimed = claim(db, owner, &db.driver().locking_candidates(n, from)).await?;
    let last_due = claimed.iter().map(|e| e.next_retry_time).max();
    resume.claimed(from, n, claimed.len(), last_due);
    Ok(claimed)
}

impl Driver {
    /// `SELECT *, <now> AS claim_now FROM t_event_record WHERE status = 'WAIT' AND
    /// next_retry_time <= now [AND next_retry_time >= :from] ORDER BY next_retry_time LIMIT :n
    /// FOR UPDATE SKIP LOCKED`: the first statement of the MySQL/MariaDB batch claim, scanning
    /// from `from` when given ([`super::resume`]).
    pub fn locking_candidates(
        self,
        n: u64,
        from: Option<sea_orm::prelude::DateTimeUtc>,
    ) -> SelectStatement {
        let mut select = self.candidates(n);
        if let Some(from) = from {
            select.and_where(Expr::col(Column::NextRetryTime).gte(from));
        }
        select
            .expr_as(self.now(), "claim_now")
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = :now,
    /// update_time = :now WHERE id IN (:ids) AND status = 'WAIT'`: the second statement of the
    /// MySQL/MariaDB batch claim, over the rows the first one locked (`now` is the clock it
    /// read).
    pub fn claim_locked(
        self,
        ids: &[i64],
        owner: &str,
        now: sea_orm::prelude::DateTimeUtc,
    ) -> ByIds {
        ByIds::update(self)
            .claimed_by(owner, Expr::val(now))
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Wait.as_str())))
    }
}

/// A row locked by the MySQL/MariaDB batch claim, with the database's clock read in the same
/// statement.
struct LockedRow {
    model: Model,
    now: sea_orm::prelude::DateTimeUtc,
}

impl FromQueryResult for LockedRow {
    fn from_query_result(res: &sea_orm::QueryResult, pre: &str) -> Result<Self, DbErr> {
        Ok(LockedRow {
            model: Model::from_query_result(res, pre)?,
            now: res.try_get(pre, "claim_now")?,
        })
    }
}

/// The MySQL/MariaDB claim, one short `READ COMMITTED` transaction: the locking read
/// `locking` (with the database clock as `claim_now`), then [`Driver::claim_locked`], commit.
/// The rows stay locked until the commit, so the claimed models are the read ones with the
/// claim applied (the columns are `DATETIME(6)`, so the values equal the stored ones).
async fn claim_locked(
    db: &sea_orm::DatabaseConnection,
    driver: Driver,
    owner: &str,
    locking: Statement,
) -> Result<Vec<Model>, DbErr> {
    // READ COMMITTED: no gap locks, so the claim never blocks inserts of new events.
    let txn = db
        .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
        .await?;
    let locked: Vec<LockedRow> = LockedRow::find_by_statement(locking).all(&txn).await?;
    let Some(now) = locked.first().map(|r| r.now) else {
        txn.commit().await?;
        return Ok(Vec::new());
    };
    let ids: Vec<i64> = locked.iter().map(|r| r.model.id).collect();
    // Not retried here: a failure ends the whole transaction.
    let updated = txn
        .execute_raw(driver.claim_locked(&ids, owner, now).build())
        .await?
        .rows_affected();
    if updated != ids.len() as u64 {
        // Cannot happen while the rows are locked; if it does, claim nothing rather than
        // report rows this instance may not own.
        if let Err(e) = txn.rollback().await {
            tracing::warn!(error = %e, "rollback after a batch-claim mismatch failed");
        }
        return Err(DbErr::Custom(format!(
            "batch claim for {owner} updated {} of {} locked rows; rolled back",
            updated,
            ids.len()
        )));
    }
    txn.commit().await?;
    Ok(locked
        .into_iter()
        .map(|r| Model {
            status: EventStatus::Sending,
            claim_owner: Some(owner.to_owned()),
            claimed_at: Some(now),
            update_time: now,
            ..r.model
        })
        .collect())
}
