//! Dead letters (retry, discard) and the retention of delivered rows.
use std::time::Duration;

use sea_orm::sea_query::SelectStatement;
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Model;

use crate::driver::{exec_by_ids, query_events, query_ids, ByIds, RECLAIM_BATCH};
use crate::error::OutboxError;
use crate::outbox::Outbox;

/// The dead letters (`FAIL` rows), oldest id first, at most `limit` (0 returns nothing).
///
/// SQL: `SELECT * FROM t_event_record WHERE status = 'FAIL' ORDER BY id LIMIT :limit`.
///
/// # Errors
/// [`OutboxError::InvalidArgument`] when `limit` is over `i64::MAX` (no database takes it);
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn dead_letters<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    limit: u64,
) -> Result<Vec<Model>, OutboxError> {
    check_limit(limit, "dead-letter")?;
    let query = outbox.driver(db)?.dead_letters(limit);
    Ok(query_events(db, &query).await?)
}

/// Fails with [`OutboxError::InvalidArgument`] when `limit` is over `i64::MAX` (no database
/// takes it); `what` names the limit in the message.
pub(super) fn check_limit(limit: u64, what: &str) -> Result<(), OutboxError> {
    if i64::try_from(limit).is_err() {
        return Err(OutboxError::InvalidArgument(format!(
            "{what} limit must be at most {}",
            i64::MAX
        )));
    }
    Ok(())
}

/// Outcome of an operation on one dead letter ([`retry_dead`], [`discard_dead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum DeadLetterOutcome {
    /// The `FAIL` row was retried or discarded.
    Applied,
    /// No `FAIL` row has that id (no such event, or it is not a dead letter): nothing changed.
    NotDeadLetter,
}

/// Gives dead letter `id` a fresh start: `FAIL` → `WAIT`, `retry_count` 0, due now, lease
/// columns cleared. The next relay round sends it with the full retry budget. `last_error` is
/// kept until the next failure overwrites it.
///
/// SQL: `UPDATE t_event_record SET status = 'WAIT', retry_count = 0, next_retry_time = now,
/// claim_owner = NULL, claimed_at = NULL, update_time = now WHERE status = 'FAIL' AND id = :id`.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn retry_dead<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    id: i64,
) -> Result<DeadLetterOutcome, OutboxError> {
    let update = outbox.driver(db)?.retry_dead(&[id]);
    Ok(outcome(exec_by_ids(db, &update).await?))
}

/// [`retry_dead`] for every dead letter; returns how many were retried.
///
/// SQL: in batches of 1,000 by ascending id until a batch comes back short, `SELECT id FROM
/// t_event_record WHERE status = 'FAIL' AND id > :last ORDER BY id LIMIT :batch`, then the
/// update of [`retry_dead`] with `id IN (:ids)` through the primary key (`exec_by_ids`), so it
/// never waits on rows of open business transactions (MySQL/MariaDB lock every row a range
/// `UPDATE` reads).
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn retry_all_dead<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    by_pages(
        db,
        |after| driver.dead_letter_ids(after, RECLAIM_BATCH),
        |ids| driver.retry_dead(ids),
    )
    .await
}

/// Runs `act` on the ids `page` reads, page after page in ascending id until a page comes back
/// short (`page(after)` reads the ids above `after`, at most [`RECLAIM_BATCH`]); returns the
/// rows `act` changed in all. Paged by id: an event retried and failed again while this runs is
/// not met twice, and the loop ends even while relays keep dead-lettering.
pub(super) async fn by_pages<C: ConnectionTrait>(
    db: &C,
    page: impl Fn(i64) -> SelectStatement,
    act: impl Fn(&[i64]) -> ByIds,
) -> Result<u64, OutboxError> {
    let mut total = 0;
    let mut after = i64::MIN;
    loop {
        let ids = query_ids(db, &page(after)).await?;
        let Some(&last) = ids.last() else { break };
        after = last;
        total += exec_by_ids(db, &act(&ids)).await?;
        if (ids.len() as u64) < RECLAIM_BATCH {
            break;
        }
    }
    Ok(total)
}

/// Deletes dead letter `id` for good. Only a `FAIL` row is deleted; an event in any other
/// status is left alone ([`DeadLetterOutcome::NotDeadLetter`]).
///
/// SQL: `DELETE FROM t_event_record WHERE id = :id AND status = 'FAIL'`.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn discard_dead<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    id: i64,
) -> Result<DeadLetterOutcome, OutboxError> {
    let delete = outbox.driver(db)?.discard_dead(&[id]);
    Ok(outcome(exec_by_ids(db, &delete).await?))
}

/// [`discard_dead`] for every dead letter; returns how many were deleted.
///
/// SQL: paged as [`retry_all_dead`], `SELECT id FROM t_event_record WHERE status = 'FAIL' AND
/// id > :last ORDER BY id LIMIT :batch`, then `DELETE FROM t_event_record WHERE id IN (:ids)
/// AND status = 'FAIL'` through the primary key.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn discard_all_dead<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    by_pages(
        db,
        |after| driver.dead_letter_ids(after, RECLAIM_BATCH),
        |ids| driver.discard_dead(ids),
    )
    .await
}

/// One purge batch: how many ids were selected, how many rows deleted. The read takes no lock
/// and the delete checks its guards again on each row, so the batch needs no transaction, and
/// a pass that finds nothing writes nothing (on SQLite it takes no write lock).
async fn purge_batch<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    older_than: Duration,
    batch: u64,
) -> Result<(u64, u64), DbErr> {
    let driver = outbox.driver(db)?;
    let ids = query_ids(db, &driver.purge_ids(older_than, batch)).await?;
    let deleted = exec_by_ids(db, &driver.purge(&ids, older_than)).await?;
    Ok((ids.len() as u64, deleted))
}

fn outcome(rows: u64) -> DeadLetterOutcome {
    if rows == 1 {
        DeadLetterOutcome::Applied
    } else {
        DeadLetterOutcome::NotDeadLetter
    }
}

/// Deletes delivered events (`SUCCESS`) last updated more than `older_than` ago (database
/// clock), at most `batch` rows per statement, and returns how many were deleted. `WAIT`,
/// `SENDING` and `FAIL` rows are never touched.
///
/// Each batch is two short statements, so locks are held briefly and a long purge does not
/// block the relay: `SELECT id FROM t_event_record WHERE status = 'SUCCESS' AND update_time <
/// now - :older_than ORDER BY id LIMIT :batch`, then `DELETE FROM t_event_record WHERE id IN
/// (:ids) AND status = 'SUCCESS' AND update_time < now - :older_than` through the primary key
/// (as [`retry_all_dead`]); repeated until a batch comes back short. (Two statements because
/// MariaDB allows no `LIMIT` inside `IN (subquery)`.)
///
/// # Errors
/// [`OutboxError::InvalidArgument`] when `batch` is 0 or over 10,000 (its ids are bound as
/// statement parameters); [`OutboxError::TableMissing`] without the migration;
/// [`OutboxError::Db`] otherwise. A delete meeting a transient conflict (deadlock, SQLite
/// busy) is tried up to 4 times first. Batches done before an error stay done.
pub async fn purge_delivered<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    older_than: Duration,
    batch: u64,
) -> Result<u64, OutboxError> {
    if batch == 0 || batch > crate::config::MAX_BATCH_SIZE {
        return Err(OutboxError::InvalidArgument(format!(
            "purge batch size must be 1 to {}",
            crate::config::MAX_BATCH_SIZE
        )));
    }
    let mut total = 0;
    loop {
        let (selected, deleted) = purge_batch(outbox, db, older_than, batch).await?;
        total += deleted;
        if selected > 0 {
            tracing::debug!(deleted, total, "purged a batch of delivered events");
        }
        if selected < batch {
            break;
        }
    }
    Ok(total)
}
