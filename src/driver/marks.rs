//! The owner-guarded transitions of a claimed event, and lease renewal: run by
//! [`RelayDb::transition`](super::RelayDb::transition) (one event) or
//! [`RelayDb::run`](super::RelayDb::run) (many; the count of rows still ours).
//!
//! `owner` is always the claim's whole `claim_owner` value (`<instance id>#<claim token>`, see
//! [`crate::instance`]), so each guard fences off every other claim of the row, this
//! instance's earlier ones included.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{status_literal, truncate_reason, ByIds, Driver};
use crate::Completion;

impl ByIds {
    /// `AND status = 'SENDING' AND claim_owner = :owner`: only while `owner` holds the lease.
    fn owned_by(self, owner: &str) -> Self {
        let guard = self
            .driver
            .status_guard(status_literal(EventStatus::Sending));
        self.filter(guard)
            .filter(Expr::col(Column::ClaimOwner).eq(owner))
    }

    /// `SET claim_owner = NULL, claimed_at = NULL`: the lease given up.
    pub(super) fn free_lease(self) -> Self {
        self.set(Column::ClaimOwner, Expr::cust("NULL"))
            .set(Column::ClaimedAt, Expr::cust("NULL"))
    }
}

impl Driver {
    /// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id = :id AND status =
    /// 'SENDING' AND claim_owner = :owner`. The lease columns stay as a record of who sent it.
    /// The relay marks a round's deliveries at once ([`Driver::complete`]); the tests one.
    #[cfg(test)]
    pub fn mark_success(self, id: i64, owner: &str) -> ByIds {
        ByIds::update(self)
            .id(id)
            .owned_by(owner)
            .set(Column::Status, status_literal(EventStatus::Success))
            .set(Column::UpdateTime, self.now())
    }

    /// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
    /// retry_count = retry_count + 1, next_retry_time = now + :delay, last_error = :reason,
    /// update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner = :owner`. The
    /// count moves relative to the row, never from a copy read earlier. Without `counted`
    /// `retry_count` is left out: the send failed because of the publisher's own configuration
    /// ([`crate::PublishErrorKind::Configuration`]), and the attempt does not count.
    pub fn release_for_retry(
        self,
        id: i64,
        owner: &str,
        delay: Duration,
        reason: &str,
        counted: bool,
    ) -> ByIds {
        let stmt = ByIds::update(self)
            .id(id)
            .owned_by(owner)
            .set(Column::Status, status_literal(EventStatus::Wait))
            .free_lease();
        let stmt = if counted {
            stmt.set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
        } else {
            stmt
        };
        stmt.set(Column::NextRetryTime, self.now_plus(delay))
            .set(Column::LastError, Expr::val(truncate_reason(reason)))
            .set(Column::UpdateTime, self.now())
    }

    /// `UPDATE t_event_record SET status = 'FAIL', retry_count = retry_count + 1, last_error =
    /// :reason, update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner =
    /// :owner`: a dead letter.
    pub fn mark_fail(self, id: i64, owner: &str, reason: &str) -> ByIds {
        ByIds::update(self)
            .id(id)
            .owned_by(owner)
            .set(Column::Status, status_literal(EventStatus::Fail))
            .set(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
            .set(Column::LastError, Expr::val(truncate_reason(reason)))
            .set(Column::UpdateTime, self.now())
    }

    /// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id IN (:ids) AND
    /// status = 'SENDING' AND claim_owner = :owner`: one statement for a round's deliveries.
    /// Rows no longer ours (reclaimed meanwhile: late acks) are not counted.
    pub fn mark_success_many(self, ids: &[i64], owner: &str) -> ByIds {
        ByIds::update(self)
            .ids(ids)
            .owned_by(owner)
            .set(Column::Status, status_literal(EventStatus::Success))
            .set(Column::UpdateTime, self.now())
    }

    /// `DELETE FROM t_event_record WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner =
    /// :owner`: [`Completion::Delete`]'s form of [`Driver::mark_success_many`], the same guard.
    pub fn delete_delivered(self, ids: &[i64], owner: &str) -> ByIds {
        ByIds::delete(self).ids(ids).owned_by(owner)
    }

    /// A round's deliveries of claim `owner` completed as `completion` says:
    /// [`Driver::mark_success_many`] or [`Driver::delete_delivered`]. `rows_affected` counts
    /// the rows still ours; the rest are late acks.
    pub fn complete(self, ids: &[i64], owner: &str, completion: Completion) -> ByIds {
        match completion {
            Completion::Update => self.mark_success_many(ids, owner),
            Completion::Delete => self.delete_delivered(ids, owner),
        }
    }

    /// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
    /// update_time = now WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner = :owner`:
    /// hands claimed but unsent events back at once (graceful shutdown), `retry_count` and
    /// `next_retry_time` unchanged, so another instance can send them without waiting for the
    /// lease.
    pub fn release_unsent(self, ids: &[i64], owner: &str) -> ByIds {
        ByIds::update(self)
            .ids(ids)
            .owned_by(owner)
            .set(Column::Status, status_literal(EventStatus::Wait))
            .free_lease()
            .set(Column::UpdateTime, self.now())
    }

    /// `UPDATE t_event_record SET claimed_at = now WHERE id IN (:ids) AND status = 'SENDING' AND
    /// claim_owner = :owner`: renews the leases of sends still in flight. Fewer rows than
    /// `ids.len()` means some lease was lost (see [`Driver::owned_ids`]).
    pub fn renew_leases(self, ids: &[i64], owner: &str) -> ByIds {
        ByIds::update(self)
            .ids(ids)
            .owned_by(owner)
            .set(Column::ClaimedAt, self.now())
    }

    /// `SELECT id FROM t_event_record WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner =
    /// :owner`: which of `ids` are still leased to `owner` (the status guard as every statement
    /// by ids writes it, [`Driver::status_guard`]).
    pub fn owned_ids(self, ids: &[i64], owner: &str) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .and_where(Expr::col(Column::Id).is_in(ids.iter().copied()))
            .and_where(self.status_guard(status_literal(EventStatus::Sending)))
            .and_where(Expr::col(Column::ClaimOwner).eq(owner))
            .to_owned()
    }
}
