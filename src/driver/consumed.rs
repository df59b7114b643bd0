//! Statements on `t_consumed_message`, the idempotent consumer's record of processed messages
//! (used by [`crate::consumer::consume_once`]).
use sea_orm::{ConnectionTrait, DbErr, Statement};
use sea_orm_outbox_entity::consumed_message::{Column, Entity};

use super::{Driver, InsertIfAbsent};

/// `INSERT INTO t_consumed_message (consumer_group, msg_id, consumed_at) VALUES (:group,
/// :msg_id, now)` that skips an existing (consumer_group, msg_id) instead of failing
/// ([`Driver::insert_if_absent`]: `ON CONFLICT DO NOTHING`, MySQL `INSERT IGNORE`).
pub fn record_statement(driver: Driver, consumer_group: &str, msg_id: &str) -> Statement {
    driver.insert_if_absent(&InsertIfAbsent::new(
        Entity,
        [Column::ConsumerGroup, Column::MsgId, Column::ConsumedAt],
        vec![
            sea_orm::sea_query::Expr::val(consumer_group),
            sea_orm::sea_query::Expr::val(msg_id),
            driver.now(),
        ],
        [Column::ConsumerGroup, Column::MsgId],
    ))
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
    let stmt = record_statement(Driver::of_db(db)?, consumer_group, msg_id);
    Ok(db.execute_raw(stmt).await?.rows_affected() == 1)
}
