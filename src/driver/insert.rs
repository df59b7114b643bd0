//! The event insert.
use std::time::Instant;

use sea_orm::sea_query::{Expr, InsertStatement, Query};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{Driver, Table};
use crate::event::{Due, NewEvent};

impl Driver {
    /// `INSERT` of a new `WAIT` event, `retry_count` 0, due (`next_retry_time`) now on the
    /// database clock, `now + delay` for a delayed event, or at the instant it names.
    pub fn insert(self, event: &NewEvent) -> InsertStatement {
        let now = self.now();
        let due = match event.due() {
            Due::Now => now.clone(),
            Due::After(delay) => self.now_plus(delay),
            Due::At(at) => self.instant(at),
        };
        let mut insert = Query::insert();
        insert
            .into_table(self.table())
            .columns([
                Column::BizNo,
                Column::EventType,
                Column::Payload,
                Column::Status,
                Column::RetryCount,
                Column::NextRetryTime,
                Column::CreateTime,
                Column::UpdateTime,
                Column::Headers,
            ])
            .values_panic([
                Expr::val(event.biz_no()),
                Expr::val(event.event_type()),
                Expr::val(event.payload()),
                Expr::val(EventStatus::Wait.as_str()),
                Expr::val(0),
                due,
                now.clone(),
                now,
                Expr::val(event.headers_json()),
            ]);
        if self.returning() {
            insert.returning_col(Column::Id);
        }
        insert
    }
}

/// Inserts `event` into `table` as a `WAIT` row due now and returns its id; on Postgres the
/// same statement may also queue the wake-up `NOTIFY` ([`Driver::with_wakeup`]). Does not
/// validate: callers go through [`crate::OutboxExt::with_event`].
///
/// # Errors
/// Any database error (for example a missing table).
pub async fn insert_event<C: ConnectionTrait>(
    db: &C,
    table: Table,
    event: &NewEvent,
) -> Result<i64, DbErr> {
    let driver = Driver::of_db(db)?.with_table(table);
    let stmt = driver.insert(event);
    if driver.returning() {
        let wakeup = event.wakeup();
        let started = Instant::now();
        let row = db
            .query_one(&driver.with_wakeup(stmt, wakeup))
            .await?
            .ok_or_else(|| DbErr::Custom("INSERT ... RETURNING id returned no row".into()))?;
        let id = row.try_get_by_index::<i64>(0)?;
        // The slot's key was taken before the statement ran: an insert that took a whole
        // interval or longer and skipped its notification may hold a stale key, so it notifies
        // on its own.
        if let Some(interval) = wakeup {
            let skipped = !interval.is_zero() && !row.try_get_by_index::<bool>(1).unwrap_or(true);
            if skipped && started.elapsed() >= interval {
                if let Some(alone) = driver.wakeup_alone() {
                    db.execute_raw(alone).await?;
                }
            }
        }
        Ok(id)
    } else {
        let res = db.execute(&stmt).await?;
        i64::try_from(res.last_insert_id())
            .map_err(|_| DbErr::Custom("last insert id does not fit i64".into()))
    }
}
