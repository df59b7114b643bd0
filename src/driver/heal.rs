//! The healing of dead letters ([`crate::HealPolicy`]): dead letters of a transient failure put
//! back to `WAIT` round by round, in bounded batches, each row by one guarded statement.
use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::DbErr;
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{ByIds, Driver, RelayDb};
use crate::error::FailureKind;
use crate::retry::HealPolicy;

impl Driver {
    /// `last_error LIKE 'retryable: %' AND ((retry_count <= :max_retries + 1 AND update_time <
    /// now - :quiet) OR (retry_count = :max_retries + 2 AND update_time < now - :quiet × 2) OR
    /// ...)`, one term per round k of `policy` (`retry_count = max_retries + 1 + k`, waiting
    /// `quiet × 2^k`): a dead letter of a transient failure whose next round is due. Round 0
    /// also takes a smaller `retry_count` (the retry limit was raised since). On MySQL/MariaDB
    /// and SQLite `LIKE` ignores the letter case of the prefix; the relay writes it in lower
    /// case.
    fn healable(self, max_retries: u32, policy: &HealPolicy) -> Expr {
        let first = i64::from(max_retries) + 1;
        let mut due: Option<Expr> = None;
        for k in 0..policy.rounds {
            let count = if k == 0 {
                Expr::col(Column::RetryCount).lte(first)
            } else {
                Expr::col(Column::RetryCount).eq(first + i64::from(k))
            };
            let round = count.and(Expr::col(Column::UpdateTime).lt(self.now_minus(policy.wait(k))));
            due = Some(match due {
                None => round,
                Some(due) => due.or(round),
            });
        }
        let retryable = format!("{}%", FailureKind::Retryable.prefix());
        let kind = Expr::col(Column::LastError).like(retryable);
        match due {
            Some(due) => kind.and(due),
            // No round (a policy `validate` refuses): nothing is due.
            None => Expr::val(1).eq(0),
        }
    }

    /// `SELECT id FROM t_event_record WHERE status = 'FAIL' AND <healable> LIMIT :batch`: dead
    /// letters whose healing round is due ([`Driver::heal`] names the condition), read through
    /// the `status` index without locking anything.
    pub fn healable_dead_letters(
        self,
        max_retries: u32,
        policy: &HealPolicy,
        batch: u64,
    ) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .and_where(self.healable(max_retries, policy))
            .limit(batch)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'WAIT', next_retry_time = now, claim_owner = NULL,
    /// claimed_at = NULL, update_time = now WHERE id IN (:ids) AND status = 'FAIL' AND
    /// last_error LIKE 'retryable: %' AND ((retry_count <= :max_retries + 1 AND update_time <
    /// now - :quiet) OR ...)`: the dead letters of `ids` whose healing round is still due, due
    /// now. `retry_count` and `last_error` stay: the next failure makes it a dead letter again at
    /// once, one round further. The whole condition is checked again on each row, so of several
    /// instances one heals a row, once per round.
    pub fn heal(self, ids: &[i64], max_retries: u32, policy: &HealPolicy) -> ByIds {
        let now = self.now();
        ByIds::update(self)
            .set(Column::Status, Expr::val(EventStatus::Wait.as_str()))
            .set(Column::NextRetryTime, now.clone())
            .free_lease()
            .set(Column::UpdateTime, now)
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Fail.as_str())))
            .filter(self.healable(max_retries, policy))
    }
}

/// Heals every dead letter whose round of `policy` is due (worker retry limit `max_retries`),
/// in batches of at most `batch` until a batch comes back short: each reads the ids
/// ([`Driver::healable_dead_letters`], no locks) and heals those rows by id ([`Driver::heal`]).
/// Returns how many it put back to `WAIT`.
///
/// # Errors
/// [`DbErr::Custom`] when `batch` is 0; any database error (batches done before it stay done).
pub async fn heal_dead_letters(
    db: &RelayDb,
    max_retries: u32,
    policy: &HealPolicy,
    batch: u64,
) -> Result<u64, DbErr> {
    if batch == 0 {
        return Err(DbErr::Custom("heal batch size must be at least 1".into()));
    }
    let mut healed = 0;
    loop {
        let ids = db
            .query_ids(|d| d.healable_dead_letters(max_retries, policy, batch))
            .await?;
        if ids.is_empty() {
            break;
        }
        let n = db.run(|d| d.heal(&ids, max_retries, policy)).await?;
        healed += n;
        // A full batch that changed nothing (healed by other instances meanwhile) ends the pass
        // too, so it can never spin.
        if (ids.len() as u64) < batch || n == 0 {
            break;
        }
    }
    Ok(healed)
}
