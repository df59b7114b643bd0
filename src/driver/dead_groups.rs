//! The statements of the dead letters grouped by their error ([`crate::ops::dead_letter_groups`]
//! and the group actions) and of the search by key or id ([`crate::ops::find_events`]).
//! Grouping by fingerprint happens in `ops`: these statements read and act on exact errors.
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{event_columns, ByIds, Driver};

type DateTimeUtc = sea_orm::prelude::DateTimeUtc;

/// One row of [`Driver::dead_letter_groups`]: `(last_error, count, oldest id, last update)`.
pub type GroupRow = (Option<String>, i64, i64, DateTimeUtc);

impl Driver {
    /// `SELECT last_error, COUNT(id) AS n, MIN(id) AS oldest_id, MAX(update_time) AS last_update
    /// FROM t_event_record WHERE status = 'FAIL' GROUP BY last_error ORDER BY COUNT(id) DESC,
    /// MIN(id)`: the dead letters by error, largest group first (`last_error` is `TEXT` on every
    /// backend; MySQL/MariaDB group by the column's collation, case-insensitive by default).
    pub fn dead_letter_groups(self) -> SelectStatement {
        Query::select()
            .column(Column::LastError)
            .expr_as(Expr::col(Column::Id).count(), "n")
            .expr_as(Expr::col(Column::Id).min(), "oldest_id")
            .expr_as(Expr::col(Column::UpdateTime).max(), "last_update")
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .group_by_col(Column::LastError)
            .order_by_expr(Expr::col(Column::Id).count(), Order::Desc)
            .order_by_expr(Expr::col(Column::Id).min(), Order::Asc)
            .to_owned()
    }

    /// `last_error IN (:errors)`, or `last_error IS NULL` for `None`: the rows whose error is
    /// one of a group's ([`crate::ops::dead_letter_groups`] folds errors into groups by their
    /// fingerprint).
    pub fn last_error_in(self, errors: Option<&[String]>) -> Expr {
        match errors {
            Some(errors) => Expr::col(Column::LastError).is_in(errors.iter().map(String::as_str)),
            None => Expr::col(Column::LastError).is_null(),
        }
    }

    /// `SELECT id, last_error FROM t_event_record WHERE status = 'FAIL' AND id > :after ORDER BY
    /// id LIMIT :batch`: one page of dead letters by id, with their errors (a group's members
    /// are chosen from them by fingerprint).
    pub fn dead_letter_errors(self, after: i64, batch: u64) -> SelectStatement {
        let mut q = self.dead_letter_ids(after, batch);
        q.column(Column::LastError);
        q
    }

    /// `SELECT * FROM t_event_record WHERE id IN (:ids) AND status = 'FAIL' ORDER BY id`: the
    /// dead letters of `ids`, oldest first.
    pub fn dead_letters_by_ids(self, ids: &[i64]) -> SelectStatement {
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(Expr::col(Column::Id).is_in(ids.iter().copied()))
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .order_by(Column::Id, Order::Asc)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'WAIT', retry_count = 0, next_retry_time = now,
    /// claim_owner = NULL, claimed_at = NULL, update_time = now WHERE id IN (:ids) AND status =
    /// 'FAIL' AND last_error IN (:errors)` (`last_error IS NULL` for `None`): [`Driver::retry_dead`]
    /// of the rows still in the group (run through the primary key).
    pub fn retry_dead_group(self, ids: &[i64], errors: Option<&[String]>) -> ByIds {
        self.retry_dead(ids).filter(self.last_error_in(errors))
    }

    /// `DELETE FROM t_event_record WHERE id IN (:ids) AND status = 'FAIL' AND last_error IN
    /// (:errors)` (`last_error IS NULL` for `None`): [`Driver::discard_dead`] of the rows still in
    /// the group (run through the primary key).
    pub fn discard_dead_group(self, ids: &[i64], errors: Option<&[String]>) -> ByIds {
        self.discard_dead(ids).filter(self.last_error_in(errors))
    }

    /// `SELECT * FROM t_event_record WHERE biz_no = :query [OR id = :id] ORDER BY id DESC LIMIT
    /// :limit`: the events of a key, or the event of an id (`id` when the query is one), newest
    /// first (the `biz_no` index and the primary key).
    pub fn find_events(self, query: &str, id: Option<i64>, limit: u64) -> SelectStatement {
        let mut condition = Expr::col(Column::BizNo).eq(query);
        if let Some(id) = id {
            condition = condition.or(Expr::col(Column::Id).eq(id));
        }
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(condition)
            .order_by(Column::Id, Order::Desc)
            .limit(limit)
            .to_owned()
    }
}

/// The rows of [`Driver::dead_letter_groups`].
pub async fn dead_letter_groups<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
) -> Result<Vec<GroupRow>, DbErr> {
    db.query_all(&driver.dead_letter_groups())
        .await?
        .iter()
        .map(|r| {
            Ok((
                r.try_get_by_index(0)?,
                r.try_get_by_index(1)?,
                r.try_get_by_index(2)?,
                r.try_get_by_index(3)?,
            ))
        })
        .collect()
}

/// The rows of [`Driver::dead_letter_errors`]: `(id, last_error)`.
pub async fn dead_letter_errors<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    after: i64,
    batch: u64,
) -> Result<Vec<(i64, Option<String>)>, DbErr> {
    db.query_all(&driver.dead_letter_errors(after, batch))
        .await?
        .iter()
        .map(|r| Ok((r.try_get_by_index(0)?, r.try_get_by_index(1)?)))
        .collect()
}
