//! Dead letters grouped by their error: the groups, a group's events, and retrying or
//! discarding a whole group.
use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use sea_orm_outbox_entity::event_record::Model;
use serde::Serialize;

use super::dead::{by_pages, check_limit};
use crate::driver::{dead_groups, query_events, RECLAIM_BATCH};
use crate::error::OutboxError;
use crate::outbox::Outbox;

/// The dead letters (`FAIL` rows) that share one `last_error`, from [`dead_letter_groups`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DeadLetterGroup {
    /// The error the group's events failed with last (`last_error`); `None` for the dead
    /// letters without one.
    pub error: Option<String>,
    /// The group's dead letters.
    pub count: u64,
    /// The smallest id in the group: its oldest event.
    pub oldest_id: i64,
    /// The latest `update_time` in the group (database clock): when its last event failed.
    pub last_update: DateTime<Utc>,
}

/// The dead letters grouped by their error (`last_error`), the largest group first (ties:
/// the group with the oldest event first). Errors equal by the column's comparison form one
/// group: on MySQL/MariaDB that is the table's collation (case-insensitive, trailing spaces
/// ignored, by default); [`retry_dead_group`] and [`discard_dead_group`] select by the same
/// comparison.
///
/// SQL (one read, no lock): `SELECT last_error, COUNT(id), MIN(id), MAX(update_time) FROM
/// t_event_record WHERE status = 'FAIL' GROUP BY last_error ORDER BY COUNT(id) DESC, MIN(id)`.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn dead_letter_groups<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<Vec<DeadLetterGroup>, OutboxError> {
    let rows = dead_groups::dead_letter_groups(db, outbox.driver(db)?).await?;
    Ok(rows
        .into_iter()
        .map(|(error, count, oldest_id, last_update)| DeadLetterGroup {
            error,
            count: u64::try_from(count).unwrap_or(0),
            oldest_id,
            last_update,
        })
        .collect())
}

/// The dead letters whose `last_error` is `error` (`None`: those without one), oldest id
/// first, at most `limit`: the events of one [`DeadLetterGroup`].
///
/// SQL: `SELECT * FROM t_event_record WHERE status = 'FAIL' AND last_error = :error ORDER BY
/// id LIMIT :limit` (`last_error IS NULL` for `None`).
///
/// # Errors
/// [`OutboxError::InvalidArgument`] when `limit` is over `i64::MAX`;
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn dead_letters_with_error<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    error: Option<&str>,
    limit: u64,
) -> Result<Vec<Model>, OutboxError> {
    check_limit(limit, "dead-letter")?;
    let query = outbox.driver(db)?.dead_letters_with_error(error, limit);
    Ok(query_events(db, &query).await?)
}

/// [`super::retry_dead`] for every dead letter whose `last_error` is `error` (`None`: those
/// without one); returns how many were retried. Dead letters of other errors stay `FAIL`.
///
/// SQL: in pages of 1,000 by ascending id, `SELECT id FROM t_event_record WHERE status =
/// 'FAIL' AND last_error = :error AND id > :last ORDER BY id LIMIT :batch`, then `UPDATE
/// t_event_record SET status = 'WAIT', retry_count = 0, next_retry_time = now, claim_owner =
/// NULL, claimed_at = NULL, update_time = now WHERE id IN (:ids) AND status = 'FAIL' AND
/// last_error = :error` through the primary key, so it never waits on rows of open business
/// transactions (as [`super::retry_all_dead`]).
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn retry_dead_group<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    error: Option<&str>,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    by_pages(
        db,
        |after| driver.dead_letter_group_ids(error, after, RECLAIM_BATCH),
        |ids| driver.retry_dead_group(ids, error),
    )
    .await
}

/// Deletes every dead letter whose `last_error` is `error` (`None`: those without one);
/// returns how many were deleted. Dead letters of other errors and rows in any other status
/// stay.
///
/// SQL: paged as [`retry_dead_group`], then `DELETE FROM t_event_record WHERE id IN (:ids)
/// AND status = 'FAIL' AND last_error = :error` through the primary key.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn discard_dead_group<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    error: Option<&str>,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    by_pages(
        db,
        |after| driver.dead_letter_group_ids(error, after, RECLAIM_BATCH),
        |ids| driver.discard_dead_group(ids, error),
    )
    .await
}
