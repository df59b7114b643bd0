//! Dead letters grouped by the fingerprint of their error: the groups, a group's events, and
//! retrying or discarding a whole group.
use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use sea_orm_outbox_entity::event_record::Model;
use serde::Serialize;

use super::dead::check_limit;
use super::fingerprint::fingerprint;
use crate::driver::{dead_groups, exec_by_ids, query_events, ByIds, Driver, RECLAIM_BATCH};
use crate::error::{FailureKind, OutboxError};
use crate::outbox::Outbox;

/// The dead letters (`FAIL` rows) whose errors share one fingerprint, from
/// [`dead_letter_groups`]: one outage's dead letters, whatever ids and addresses their
/// messages name, form one group.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DeadLetterGroup {
    /// The group's key: the [`fingerprint`] of its errors (their kind's prefix and their text
    /// with ids, numbers, quoted values and the like replaced); `None` for the dead letters
    /// without an error.
    pub fingerprint: Option<String>,
    /// The kind of failure the relay recorded ([`FailureKind::of`] of the errors); `None`
    /// without a known prefix (an older version's or a hand-written error) or without an error.
    pub kind: Option<FailureKind>,
    /// One of the group's errors as stored in `last_error`: the one most of its dead letters
    /// have (ties: the one of the oldest event); `None` for the dead letters without an error.
    pub error: Option<String>,
    /// Distinct errors (`last_error` values) in the group.
    pub errors: u64,
    /// The group's dead letters.
    pub count: u64,
    /// The smallest id in the group: its oldest event.
    pub oldest_id: i64,
    /// The latest `update_time` in the group (database clock): when its last event failed.
    pub last_update: DateTime<Utc>,
}

/// The dead letters grouped by the [`fingerprint`] of their error, the largest group first
/// (ties: the group with the oldest event first). The fingerprint keeps the kind's prefix, so
/// a retryable and a permanent failure never share a group.
///
/// SQL (one read, no lock): `SELECT last_error, COUNT(id), MIN(id), MAX(update_time) FROM
/// t_event_record WHERE status = 'FAIL' GROUP BY last_error ORDER BY COUNT(id) DESC, MIN(id)`;
/// the distinct errors are then folded into fingerprints here. (On MySQL/MariaDB errors equal
/// by the column's collation, by default ignoring letter case and trailing spaces, arrive as
/// one.)
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn dead_letter_groups<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
) -> Result<Vec<DeadLetterGroup>, OutboxError> {
    let rows = dead_groups::dead_letter_groups(db, outbox.driver(db)?).await?;
    let mut groups: Vec<DeadLetterGroup> = Vec::new();
    let mut index: HashMap<Option<String>, usize> = HashMap::new();
    // The rows come largest first: the first error of a fingerprint is its most common one.
    for (error, count, oldest_id, last_update) in rows {
        let count = u64::try_from(count).unwrap_or(0);
        let key = error.as_deref().map(fingerprint);
        match index.get(&key) {
            Some(&i) => {
                let g = &mut groups[i];
                g.errors += 1;
                g.count += count;
                g.oldest_id = g.oldest_id.min(oldest_id);
                g.last_update = g.last_update.max(last_update);
            }
            None => {
                index.insert(key.clone(), groups.len());
                groups.push(DeadLetterGroup {
                    kind: error.as_deref().and_then(FailureKind::of),
                    fingerprint: key,
                    error,
                    errors: 1,
                    count,
                    oldest_id,
                    last_update,
                });
            }
        }
    }
    groups.sort_by_key(|g| (std::cmp::Reverse(g.count), g.oldest_id));
    Ok(groups)
}

/// The dead letters of the group `fingerprint` (a [`DeadLetterGroup::fingerprint`]; `None`:
/// those without an error), oldest id first, at most `limit`.
///
/// SQL: in pages of 1,000 by ascending id, `SELECT id, last_error FROM t_event_record WHERE
/// status = 'FAIL' AND id > :last ORDER BY id LIMIT :batch` (the group's members chosen by
/// fingerprint here) until `limit` are found, then `SELECT * FROM t_event_record WHERE id IN
/// (:ids) AND status = 'FAIL' ORDER BY id`.
///
/// # Errors
/// [`OutboxError::InvalidArgument`] when `limit` is over `i64::MAX`;
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn dead_letters_in_group<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    fingerprint: Option<&str>,
    limit: u64,
) -> Result<Vec<Model>, OutboxError> {
    check_limit(limit, "dead-letter")?;
    let driver = outbox.driver(db)?;
    let want = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut ids = Vec::new();
    let mut after = Some(i64::MIN);
    while let Some(last) = after.filter(|_| ids.len() < want) {
        let page = group_page(db, driver, fingerprint, last).await?;
        ids.extend(page.ids);
        after = page.next;
    }
    ids.truncate(want);
    let mut events = Vec::with_capacity(ids.len());
    for ids in ids.chunks(RECLAIM_BATCH as usize) {
        events.extend(query_events(db, &driver.dead_letters_by_ids(ids)).await?);
    }
    Ok(events)
}

/// [`super::retry_dead`] for every dead letter of the group `fingerprint` (`None`: those
/// without an error); returns how many were retried. Dead letters of other groups stay `FAIL`.
///
/// SQL: in pages of 1,000 by ascending id, `SELECT id, last_error FROM t_event_record WHERE
/// status = 'FAIL' AND id > :last ORDER BY id LIMIT :batch`; of each page the group's members
/// (by fingerprint) are updated: `UPDATE t_event_record SET status = 'WAIT', retry_count = 0,
/// next_retry_time = now, claim_owner = NULL, claimed_at = NULL, update_time = now WHERE id IN
/// (:ids) AND status = 'FAIL' AND last_error IN (:their errors)` through the primary key, so it
/// never waits on rows of open business transactions (as [`super::retry_all_dead`]).
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn retry_dead_group<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    fingerprint: Option<&str>,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    act_on_group(db, driver, fingerprint, |ids, errors| {
        driver.retry_dead_group(ids, errors)
    })
    .await
}

/// Deletes every dead letter of the group `fingerprint` (`None`: those without an error);
/// returns how many were deleted. Dead letters of other groups and rows in any other status
/// stay.
///
/// SQL: paged as [`retry_dead_group`], then `DELETE FROM t_event_record WHERE id IN (:ids) AND
/// status = 'FAIL' AND last_error IN (:their errors)` through the primary key.
///
/// # Errors
/// [`OutboxError::TableMissing`] without the migration; [`OutboxError::Db`] otherwise.
pub async fn discard_dead_group<C: ConnectionTrait>(
    outbox: &Outbox,
    db: &C,
    fingerprint: Option<&str>,
) -> Result<u64, OutboxError> {
    let driver = outbox.driver(db)?;
    act_on_group(db, driver, fingerprint, |ids, errors| {
        driver.discard_dead_group(ids, errors)
    })
    .await
}

/// The members of the group `fingerprint` in one page of dead letters.
struct Page {
    /// The group's dead letters in the page, ascending.
    ids: Vec<i64>,
    /// Their distinct errors (none for the group without an error).
    errors: Vec<String>,
    /// The last id of the page when the page was full (more may follow); `None` after the last.
    next: Option<i64>,
}

/// The members of the group `fingerprint` among the dead letters after id `after` (one page of
/// [`RECLAIM_BATCH`]).
async fn group_page<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    group: Option<&str>,
    after: i64,
) -> Result<Page, OutboxError> {
    let rows = dead_groups::dead_letter_errors(db, driver, after, RECLAIM_BATCH).await?;
    let next = match rows.last() {
        Some(&(last, _)) if rows.len() as u64 == RECLAIM_BATCH => Some(last),
        _ => None,
    };
    let mut ids = Vec::new();
    let mut errors = BTreeSet::new();
    for (id, error) in rows {
        if error.as_deref().map(fingerprint).as_deref() == group {
            ids.push(id);
            errors.extend(error);
        }
    }
    Ok(Page {
        ids,
        errors: errors.into_iter().collect(),
        next,
    })
}

/// Runs `act` on the members of the group `fingerprint`, page by page in ascending id until a
/// page comes back short; `act(ids, errors)` is guarded by the errors of those members (`None`
/// for the group without an error). Returns the rows `act` changed in all.
async fn act_on_group<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    fingerprint: Option<&str>,
    act: impl Fn(&[i64], Option<&[String]>) -> ByIds,
) -> Result<u64, OutboxError> {
    let mut total = 0;
    let mut after = Some(i64::MIN);
    while let Some(last) = after {
        let page = group_page(db, driver, fingerprint, last).await?;
        let errors = fingerprint.map(|_| page.errors.as_slice());
        total += exec_by_ids(db, &act(&page.ids, errors)).await?;
        after = page.next;
    }
    Ok(total)
}
