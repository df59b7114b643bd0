//! Statements on `t_consumed_message`, the idempotent consumer's record of processed messages
//! (used by [`crate::consumer::consume_once`]).
use sea_orm::sea_query::{Expr, OnConflict, Query};
use sea_orm::{ConnectionTrait, DbErr, Statement};
use sea_orm_outbox_entity::consumed_message::{Column, Entity};

use super::{mysql, Backend, Driver};

impl Driver {
    /// `INSERT INTO t_consumed_message (consumer_group, msg_id, consumed_at) VALUES (:group,
    /// :msg_id, now) ON CONFLICT (consumer_group, msg_id) DO NOTHING`, on MySQL/MariaDB `INSERT
    /// IGNORE`: an existing row is skipped with 0 rows affected instead of failing (which on
    /// Postgres would abort the transaction).
    pub fn record_consumed(self, consumer_group: &str, msg_id: &str) -> Statement {
        let mut insert = Query::insert();
        insert
            .into_table(Entity)
            .columns([Column::ConsumerGroup, Column::MsgId, Column::ConsumedAt])
            .values_panic([Expr::val(consumer_group), Expr::val(msg_id), self.now()]);
        match self.backend {
            Backend::MySql => mysql::by_ids::insert_ignore(&insert),
            Backend::Postgres | Backend::Sqlite => {
                let key = [Column::ConsumerGroup, Column::MsgId];
                self.build(insert.on_conflict(OnConflict::columns(key).do_nothing().to_owned()))
            }
        }
    }
}

/// Records that `consumer_group` processed `msg_id`: `true` when the row was written, `false`
/// when it was already there (a duplicate). Run it inside the consumer's transaction: a
/// concurrent record of the same id waits for it on the unique key.
///
/// # Errors
/// Any database error (for example a missing table). Does not validate the lengths: callers go
/// through [`crate::consumer::consume_once`].
pub async fn record_consumed<C: ConnectionTrait>(
    db: &C,
    consumer_group: &str,
    msg_id: &str,
) -> Result<bool, DbErr> {
    let stmt = Driver::of_db(db)?.record_consumed(consumer_group, msg_id);
    Ok(db.execute_raw(stmt).await?.rows_affected() == 1)
}
