//! Statements on `t_consumed_message`, the idempotent consumer's record of processed messages
//! (used by [`crate::consumer::consume_once`]).
use sea_orm::sea_query::{Expr, Query};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use sea_orm_outbox_entity::consumed_message::{Column, Entity};

use super::dialect;

/// `INSERT INTO t_consumed_message (consumer_group, msg_id, consumed_at) VALUES (:group,
/// :msg_id, now)` that skips an existing (consumer_group, msg_id) instead of failing
/// ([`dialect::insert_if_absent`]: `ON CONFLICT DO NOTHING`, MySQL `INSERT IGNORE`).
pub fn record_statement(backend: DbBackend, consumer_group: &str, msg_id: &str) -> Statement {
    let mut insert = Query::insert();
    insert
        .into_table(Entity)
        .columns([Column::ConsumerGroup, Column::MsgId, Column::ConsumedAt])
        .values_panic([
            Expr::val(consumer_group),
            Expr::val(msg_id),
            dialect::now(backend),
        ]);
    dialect::insert_if_absent(backend, &insert, [Column::ConsumerGroup, Column::MsgId])
}

/// Records that `consumer_group` processed `msg_id`: `true` when the row was written, `false`
/// when it was already there (a duplicate). Run it inside the consumer's transaction: while
/// that transaction is open, a concurrent record of the same id waits for it on the unique key
/// and then sees the outcome (written if it rolled back, duplicate if it committed).
///
/// # Errors
/// Any database error (for example a missing table). Does not validate the lengths: callers go
/// through [`crate::consumer::consume_once`].
pub async fn record_consumed<C: ConnectionTrait>(
    db: &C,
    consumer_group: &str,
    msg_id: &str,
) -> Result<bool, DbErr> {
    let stmt = record_statement(db.get_database_backend(), consumer_group, msg_id);
    Ok(db.execute_raw(stmt).await?.rows_affected() == 1)
}
