//! Finding events by business key or id.
use sea_orm::ConnectionTrait;
use sea_orm_outbox_entity::event_record::Model;

use super::dead::check_limit;
use crate::driver::query_events;
use crate::error::OutboxError;
use crate::outbox::Outbox;

/// The events whose `biz_no` equals `query`, and the event whose id it is when `query` reads
/// as an `i64`, newest (largest id) first, at most `limit`. `query` is compared whole (no
/// pattern); surrounding whitespace is trimmed, and an empty query finds nothing.
///
/// SQL: `SELECT * FROM t_event_record WHERE biz_no = :query OR id = :id ORDER BY id DESC LIMIT
/// :limit` (without `OR id = :id` when `query` is no number): the `biz_no` index and the
/// primary key.
///
/// # Errors
/// [`OutboxError::InvalidArgument`] when `limit` is over `i64::MAX`;
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn find_events<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    query: &str,
    limit: u64,
) -> Result<Vec<Model>, OutboxError> {
    check_limit(limit, "search")?;
    let query = query.trim();
    if query.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let id = query.parse::<i64>().ok();
    let select = outbox.driver(db)?.find_events(query, id, limit);
    Ok(query_events(db, &select).await?)
}
