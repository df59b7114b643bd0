//! The consumer side: process each outbox event once although the relay may publish it more
//! than once. [`consume_once`] records every processed message in `t_consumed_message` (created
//! by the second migration) in the SAME transaction as the consumer's own writes.
//!
//! The message id to deduplicate on is the outbox event id, the `eventId` message property
//! ([`crate::OutboxMessage::event_id`]), never the broker's own message id: a re-send by another
//! relay instance is a new broker message with a new broker id but the same `eventId`.
use sea_orm::{TransactionSession, TransactionTrait};
use sea_orm_outbox_entity::consumed_message::{CONSUMER_GROUP_MAX_LEN, MSG_ID_MAX_LEN};

use crate::driver::consumed;
use crate::error::OutboxError;

/// The `t_consumed_message` entity [`consume_once`] records message ids in.
pub use sea_orm_outbox_entity::consumed_message;

/// What [`consume_once`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Consumed<T> {
    /// First delivery: the handler ran and its writes committed; holds the handler's value.
    Processed(T),
    /// The message id was already recorded for this consumer group: the handler did not run.
    Duplicate,
}

impl<T> Consumed<T> {
    /// Whether the message was a duplicate (the handler did not run).
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Consumed::Duplicate)
    }
}

/// Runs `handler` for message `msg_id` of `consumer_group` at most once, in one transaction.
///
/// Inside ONE transaction begun on `db`: records `(consumer_group, msg_id)` in
/// `t_consumed_message`, skipping an existing key; if the id was already recorded, rolls back
/// and returns [`Consumed::Duplicate`] without running `handler`; otherwise runs `handler` with
/// the transaction and commits on `Ok` ([`Consumed::Processed`]) or rolls back on `Err`, so a
/// redelivery is processed again. Two deliveries of one id at once are safe: the second insert
/// waits on the unique key until the first transaction ends.
///
/// `msg_id` must be the outbox event id (see the [module documentation](self)).
///
/// ```no_run
/// # async fn award_points(txn: &sea_orm::DatabaseTransaction) -> Result<(), sea_orm::DbErr> {
/// #     let _ = txn;
/// #     Ok(())
/// # }
/// # async fn demo(db: &sea_orm::DatabaseConnection, event_id: &str) -> Result<(), sea_orm_outbox::OutboxError> {
/// use sea_orm_outbox::consumer::{consume_once, Consumed};
///
/// let outcome = consume_once(db, "points", event_id, async |txn| {
///     // The consumer's own writes, in the transaction that records the message id.
///     award_points(txn).await?;
///     Ok::<_, sea_orm_outbox::OutboxError>(())
/// })
/// .await?;
/// if outcome == Consumed::Duplicate { /* acknowledge, nothing else to do */ }
/// # Ok(()) }
/// ```
///
/// # Errors
/// The handler's error (after the rollback); or, converted into `E`:
/// [`OutboxError::InvalidArgument`] when `consumer_group` or `msg_id` is empty or longer than
/// 64 characters, [`OutboxError::TableMissing`] without the migration, [`OutboxError::Db`] for
/// any other database error (including a failed commit).
pub async fn consume_once<C, T, E, F>(
    db: &C,
    consumer_group: &str,
    msg_id: &str,
    handler: F,
) -> Result<Consumed<T>, E>
where
    C: TransactionTrait,
    F: AsyncFnOnce(&C::Transaction) -> Result<T, E>,
    E: From<OutboxError>,
{
    check("consumer_group", consumer_group, CONSUMER_GROUP_MAX_LEN)?;
    check("msg_id", msg_id, MSG_ID_MAX_LEN)?;
    let txn = db.begin().await.map_err(OutboxError::from)?;
    let first = consumed::record_consumed(&txn, consumer_group, msg_id)
        .await
        .map_err(OutboxError::from)?;
    if !first {
        txn.rollback().await.map_err(OutboxError::from)?;
        tracing::debug!(consumer_group, msg_id, "duplicate message; handler not run");
        return Ok(Consumed::Duplicate);
    }
    match handler(&txn).await {
        Ok(value) => {
            txn.commit().await.map_err(OutboxError::from)?;
            Ok(Consumed::Processed(value))
        }
        Err(err) => {
            if let Err(e) = txn.rollback().await {
                // The transaction is discarded either way (the connection drops it).
                tracing::warn!(error = %e, consumer_group, msg_id, "rollback after a failed handler failed");
            }
            Err(err)
        }
    }
}

fn check(field: &str, value: &str, max: usize) -> Result<(), OutboxError> {
    let len = value.chars().count();
    if value.trim().is_empty() || len > max {
        return Err(OutboxError::InvalidArgument(format!(
            "{field} must be 1 to {max} characters (got {len})"
        )));
    }
    Ok(())
}
