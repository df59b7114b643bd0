//! The statements of [`crate::ops`]: backlog counts, dead letters, retention.
use std::time::Duration;

use sea_orm::sea_query::{Alias, Expr, ExprTrait, Func, Order, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{event_columns, ByIds, Driver};

type DateTimeUtc = sea_orm::prelude::DateTimeUtc;

impl Driver {
    /// `SELECT status, COUNT(id) AS n FROM t_event_record [WHERE status IN (:only)] GROUP BY
    /// status`.
    pub fn count_by_status(self, only: Option<&[EventStatus]>) -> SelectStatement {
        let mut q = Query::select();
        q.column(Column::Status)
            .expr_as(Expr::col(Column::Id).count(), "n")
            .from(self.table());
        if let Some(only) = only {
            q.and_where(Expr::col(Column::Status).is_in(only.iter().map(|s| s.as_str())));
        }
        q.group_by_col(Column::Status).to_owned()
    }

    /// `SELECT status, COUNT(id) AS n, MIN(create_time) AS oldest_created, MIN(next_retry_time)
    /// AS oldest_due, COUNT(CASE WHEN retry_count > 0 AND next_retry_time > now THEN 1 END) AS
    /// backing_off, now AS now FROM t_event_record WHERE status IN ('WAIT', 'SENDING', 'FAIL')
    /// GROUP BY status`: the unfinished rows per status in one pass over their index range,
    /// with the oldest of each, the failed ones waiting out their back-off, and the database
    /// clock.
    pub fn backlog(self) -> SelectStatement {
        let open = [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail];
        let backing_off = Expr::case(
            Expr::col(Column::RetryCount)
                .gt(0)
                .and(Expr::col(Column::NextRetryTime).gt(self.now())),
            1,
        );
        Query::select()
            .column(Column::Status)
            .expr_as(Expr::col(Column::Id).count(), "n")
            .expr_as(Expr::col(Column::CreateTime).min(), "oldest_created")
            .expr_as(Expr::col(Column::NextRetryTime).min(), "oldest_due")
            .expr_as(Func::count(backing_off), "backing_off")
            .expr_as(self.now(), "now")
            .from(self.table())
            .and_where(Expr::col(Column::Status).is_in(open.iter().map(|s| s.as_str())))
            .group_by_col(Column::Status)
            .to_owned()
    }

    /// `SELECT MIN(column) AS oldest, now AS now FROM t_event_record WHERE status = 'WAIT'`: the
    /// oldest waiting row's `column` and the database clock, read together.
    pub fn oldest_wait(self, column: Column) -> SelectStatement {
        Query::select()
            .expr_as(Expr::col(column).min(), "oldest")
            .expr_as(self.now(), "now")
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
            .to_owned()
    }

    /// `SELECT COUNT(DISTINCT w.biz_no) AS blocked_keys, MIN(w.create_time) AS oldest, now AS now
    /// FROM (SELECT biz_no, MIN(id) AS first_fail FROM t_event_record WHERE status = 'FAIL' GROUP
    /// BY biz_no) AS f JOIN t_event_record AS w ON w.biz_no = f.biz_no AND w.status = 'WAIT' AND
    /// w.id > f.first_fail`: the keys whose waiting events sit behind a dead letter (held back by
    /// `Block`), the oldest such event, and the database clock. Starts from the few dead letters.
    pub fn blocked_keys(self) -> SelectStatement {
        let (w, f, first) = (Alias::new("w"), Alias::new("f"), Alias::new("first_fail"));
        let dead = Query::select()
            .column(Column::BizNo)
            .expr_as(Expr::col(Column::Id).min(), first.clone())
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .group_by_col(Column::BizNo)
            .to_owned();
        Query::select()
            .expr_as(
                Func::count_distinct(Expr::col((w.clone(), Column::BizNo))),
                "blocked_keys",
            )
            .expr_as(Expr::col((w.clone(), Column::CreateTime)).min(), "oldest")
            .expr_as(self.now(), "now")
            .from_subquery(dead, f.clone())
            .join_as(
                sea_orm::sea_query::JoinType::InnerJoin,
                self.table(),
                w.clone(),
                Expr::col((w.clone(), Column::BizNo))
                    .equals((f.clone(), Column::BizNo))
                    .and(Expr::col((w.clone(), Column::Status)).eq(EventStatus::Wait.as_str()))
                    .and(Expr::col((w, Column::Id)).gt(Expr::col((f, first)))),
            )
            .to_owned()
    }

    /// `SELECT ... FROM t_event_record WHERE status = 'SENDING' AND claimed_at < now - :lease`
    /// (counted by the caller): leases older than `lease`.
    pub fn sending_over_lease(self, lease: Duration) -> SelectStatement {
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Sending.as_str()))
            .and_where(Expr::col(Column::ClaimedAt).lt(self.now_minus(lease)))
            .to_owned()
    }

    /// `SELECT id FROM t_event_record LIMIT 1`: whether the table exists.
    pub fn check_table(self) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .limit(1)
            .to_owned()
    }

    /// `SELECT * FROM t_event_record WHERE status = 'FAIL' ORDER BY id LIMIT :limit`.
    pub fn dead_letters(self, limit: u64) -> SelectStatement {
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .order_by(Column::Id, Order::Asc)
            .limit(limit)
            .to_owned()
    }

    /// `SELECT id FROM t_event_record WHERE status = 'FAIL' AND id > :after ORDER BY id LIMIT
    /// :batch`: one page of dead letters by id.
    pub fn dead_letter_ids(self, after: i64, batch: u64) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .and_where(Expr::col(Column::Id).gt(after))
            .order_by(Column::Id, Order::Asc)
            .limit(batch)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'WAIT', retry_count = 0, next_retry_time = now,
    /// claim_owner = NULL, claimed_at = NULL, update_time = now WHERE id IN (:ids) AND status =
    /// 'FAIL'`: dead letters given a fresh start (run through the primary key).
    pub fn retry_dead(self, ids: &[i64]) -> ByIds {
        let now = self.now();
        ByIds::update(self)
            .set(Column::Status, Expr::val(EventStatus::Wait.as_str()))
            .set(Column::RetryCount, Expr::val(0))
            .set(Column::NextRetryTime, now.clone())
            .free_lease()
            .set(Column::UpdateTime, now)
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Fail.as_str())))
    }

    /// `DELETE FROM t_event_record WHERE id IN (:ids) AND status = 'FAIL'`: dead letters deleted
    /// (run through the primary key).
    pub fn discard_dead(self, ids: &[i64]) -> ByIds {
        ByIds::delete(self)
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Fail.as_str())))
    }

    /// `SELECT id FROM t_event_record WHERE status = 'SUCCESS' AND update_time < now - :older_than
    /// ORDER BY id LIMIT :batch`: one purge batch.
    pub fn purge_ids(self, older_than: Duration, batch: u64) -> SelectStatement {
        Query::select()
            .column(Column::Id)
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Success.as_str()))
            .and_where(Expr::col(Column::UpdateTime).lt(self.now_minus(older_than)))
            .order_by(Column::Id, Order::Asc)
            .limit(batch)
            .to_owned()
    }

    /// `DELETE FROM t_event_record WHERE id IN (:ids) AND status = 'SUCCESS' AND update_time <
    /// now - :older_than` (run through the primary key): the guards of [`Driver::purge_ids`]
    /// checked again on each row.
    pub fn purge(self, ids: &[i64], older_than: Duration) -> ByIds {
        ByIds::delete(self)
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Success.as_str())))
            .filter(Expr::col(Column::UpdateTime).lt(self.now_minus(older_than)))
    }
}

/// The rows of [`Driver::count_by_status`]: `(status, count)`.
pub async fn count_by_status<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    only: Option<&[EventStatus]>,
) -> Result<Vec<(String, i64)>, DbErr> {
    db.query_all(&driver.count_by_status(only))
        .await?
        .iter()
        .map(|r| Ok((r.try_get_by_index(0)?, r.try_get_by_index(1)?)))
        .collect()
}

/// One row of [`Driver::backlog`]: a status's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct BacklogRow {
    /// `WAIT`, `SENDING` or `FAIL`.
    pub status: String,
    /// Its rows.
    pub rows: i64,
    /// The oldest `create_time` among them.
    pub oldest_created: Option<DateTimeUtc>,
    /// The earliest `next_retry_time` among them.
    pub oldest_due: Option<DateTimeUtc>,
    /// Those with `retry_count > 0` and `next_retry_time` in the future.
    pub backing_off: i64,
    /// The database's now.
    pub now: DateTimeUtc,
}

/// The rows of [`Driver::backlog`].
pub async fn backlog<C: ConnectionTrait>(db: &C, driver: Driver) -> Result<Vec<BacklogRow>, DbErr> {
    db.query_all(&driver.backlog())
        .await?
        .iter()
        .map(|r| {
            Ok(BacklogRow {
                status: r.try_get("", "status")?,
                rows: r.try_get("", "n")?,
                oldest_created: r.try_get("", "oldest_created")?,
                oldest_due: r.try_get("", "oldest_due")?,
                backing_off: r.try_get("", "backing_off")?,
                now: r.try_get("", "now")?,
            })
        })
        .collect()
}

/// The row of [`Driver::oldest_wait`]: the oldest `column` (`None` when nothing waits) and the
/// database's now.
pub async fn oldest_wait<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    column: Column,
) -> Result<Option<(Option<DateTimeUtc>, DateTimeUtc)>, DbErr> {
    match db.query_one(&driver.oldest_wait(column)).await? {
        Some(r) => Ok(Some((r.try_get_by_index(0)?, r.try_get_by_index(1)?))),
        None => Ok(None),
    }
}

/// `SELECT COUNT(*) FROM (<sending_over_lease>) AS sub_query`: the leases older than `lease`.
pub async fn count_sending_over_lease<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    lease: Duration,
) -> Result<u64, DbErr> {
    let count = Query::select()
        .expr(Expr::cust("COUNT(*)"))
        .from_subquery(driver.sending_over_lease(lease), "sub_query")
        .to_owned();
    let n: i64 = match db.query_one(&count).await? {
        Some(r) => r.try_get_by_index(0)?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Runs [`Driver::check_table`], on Postgres as one simple-protocol query ([`Driver::inline`])
/// so that it also passes a transaction-mode pooler.
///
/// # Errors
/// Any database error (a missing table among them).
pub async fn check_table<C: ConnectionTrait>(db: &C, driver: Driver) -> Result<(), DbErr> {
    let stmt = driver.build(&driver.check_table());
    match driver.inline(&stmt) {
        Some(sql) => db.execute_unprepared(&sql).await.map(drop),
        None => db.query_one_raw(stmt).await.map(drop),
    }
}
