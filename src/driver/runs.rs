//! The ordered claim as a whole: step 1 claims the heads of their keys (`ordered.rs`), step 2
//! the run of next due events behind each head, by one guarded `UPDATE` by ids.
use std::collections::{HashMap, HashSet};

use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};
use sea_orm::DbErr;
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use super::claim::{claim_returning, sort_by_due};
use super::{event_columns, mysql, sqlite};
use super::{Backend, ByIds, Driver, HeadScan, RelayDb};
use crate::config::OrderedPolicy;

impl Driver {
    /// `SELECT * FROM t_event_record WHERE biz_no IN (:keys) AND id > :after AND status IN
    /// ('WAIT', 'SENDING', 'FAIL') ORDER BY id LIMIT :limit`: the unfinished events that may
    /// follow the claimed heads of `keys` (step 2), read without locks.
    pub fn run_candidates(self, keys: &[String], after: i64, limit: u64) -> SelectStatement {
        let open = [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail];
        Query::select()
            .columns(event_columns(self))
            .from(self.table())
            .and_where(Expr::col(Column::BizNo).is_in(keys.iter().map(String::as_str)))
            .and_where(Expr::col(Column::Id).gt(after))
            .and_where(Expr::col(Column::Status).is_in(open.iter().map(|s| s.as_str())))
            .order_by(Column::Id, Order::Asc)
            .limit(limit)
            .to_owned()
    }

    /// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
    /// update_time = now WHERE id IN (:ids) AND status = 'WAIT' AND next_retry_time <= now`: the
    /// followers of this claim's heads (step 2; run through the primary key).
    pub fn claim_run(self, ids: &[i64], owner: &str) -> ByIds {
        let now = self.now();
        ByIds::update(self)
            .claimed_by(owner, now.clone())
            .ids(ids)
            .filter(self.status_guard(Expr::val(EventStatus::Wait.as_str())))
            .filter(Expr::col(Column::NextRetryTime).lte(now))
    }
}

/// Claims up to `heads` heads of their keys for `owner` (step 1, through the rows `scan` says)
/// and then, within `total` events, each head's run of next due events (step 2); returns the
/// events (status `SENDING`) key by key, each key's in id order, oldest due head first.
///
/// # Errors
/// Any database error of step 1 (transient conflicts are retried first). When step 2 fails,
/// the heads stay claimed and the error is logged: they are returned alone (followers it had
/// taken are handed back).
pub async fn claim_ordered(
    db: &RelayDb,
    owner: &str,
    policy: OrderedPolicy,
    heads: u64,
    total: u64,
    scan: HeadScan,
) -> Result<Vec<Model>, DbErr> {
    let driver = db.driver();
    let mut claimed = match driver.backend {
        Backend::Postgres => {
            let claim = driver.ordered_heads(owner, policy, heads, scan);
            claim_returning(db, &claim).await?
        }
        Backend::MySql => {
            let locking = driver.ordered_heads_query(policy, heads, true, scan);
            mysql::claim::claim(db, owner, &locking).await?
        }
        Backend::Sqlite => {
            let claim = driver.ordered_heads(owner, policy, heads, scan);
            sqlite::claim::claim_if_due(db, &claim).await?
        }
    };
    sort_by_due(&mut claimed);
    let budget = total.saturating_sub(claimed.len() as u64);
    if budget == 0 || claimed.is_empty() {
        return Ok(claimed);
    }
    match claim_runs(db, owner, policy, &claimed, budget).await {
        Ok(mut runs) => {
            let mut out = Vec::with_capacity(claimed.len() + runs.len());
            for head in claimed {
                let key = head.biz_no.clone();
                out.push(head);
                out.extend(runs.remove(&key).unwrap_or_default());
            }
            Ok(out)
        }
        Err(e) => {
            tracing::warn!(error = %e, "claiming the runs behind the heads failed; sending the heads alone");
            Ok(claimed)
        }
    }
}

/// Step 2: the runs behind `heads` (claimed under `owner`), at most `budget` events, by key.
async fn claim_runs(
    db: &RelayDb,
    owner: &str,
    policy: OrderedPolicy,
    heads: &[Model],
    budget: u64,
) -> Result<HashMap<String, Vec<Model>>, DbErr> {
    let head_of: HashMap<&str, &Model> = heads.iter().map(|h| (h.biz_no.as_str(), h)).collect();
    let keys: Vec<String> = heads.iter().map(|h| h.biz_no.clone()).collect();
    let after = heads.iter().map(|h| h.id).min().unwrap_or(i64::MAX);
    let limit = budget + keys.len() as u64;
    let rows = db
        .query_events(|d| d.run_candidates(&keys, after, limit))
        .await?;
    let mut stopped: HashSet<&str> = HashSet::new();
    let mut runs: Vec<Model> = Vec::new();
    for row in rows {
        if runs.len() as u64 >= budget {
            break;
        }
        let Some(head) = head_of.get(row.biz_no.as_str()) else {
            continue;
        };
        if row.id <= head.id || stopped.contains(row.biz_no.as_str()) {
            continue;
        }
        // "Due" by the database clock the head was claimed with.
        let due = head
            .claimed_at
            .is_some_and(|now| row.next_retry_time <= now);
        match row.status {
            EventStatus::Wait if due => runs.push(row),
            // A dead letter the key goes past (Skip) does not end the run.
            EventStatus::Fail if policy == OrderedPolicy::Skip => {}
            _ => {
                stopped.insert(head.biz_no.as_str());
            }
        }
    }
    if runs.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<i64> = runs.iter().map(|e| e.id).collect();
    let taken = async {
        if db.run(|d| d.claim_run(&ids, owner)).await? == ids.len() as u64 {
            return Ok(ids.clone());
        }
        db.query_ids(|d| d.owned_ids(&ids, owner)).await
    };
    let owned: HashSet<i64> = match taken.await {
        Ok(owned) => owned.into_iter().collect(),
        Err(e) => {
            // The update may have applied with its reply lost, or which followers are ours is
            // unknown: hand every one back.
            hand_back(db, &ids, owner).await;
            return Err(e);
        }
    };
    // Each key's run ends at its first follower not taken; the ones taken after it go back.
    let mut cut: HashSet<String> = HashSet::new();
    let mut back = Vec::new();
    let mut by_key: HashMap<String, Vec<Model>> = HashMap::new();
    for row in runs {
        if !owned.contains(&row.id) {
            cut.insert(row.biz_no.clone());
            continue;
        }
        if cut.contains(&row.biz_no) {
            back.push(row.id);
            continue;
        }
        let claimed_at = head_of.get(row.biz_no.as_str()).and_then(|h| h.claimed_at);
        by_key.entry(row.biz_no.clone()).or_default().push(Model {
            status: EventStatus::Sending,
            claim_owner: Some(owner.to_owned()),
            claimed_at,
            ..row
        });
    }
    // Already cut from the runs: if the hand-back fails they wait for the reclaim.
    hand_back(db, &back, owner).await;
    Ok(by_key)
}

/// Hands the followers `ids` back (a no-op for rows not ours), so that their key is not held
/// until the lease expires; a failure is logged and left to the reclaim.
async fn hand_back(db: &RelayDb, ids: &[i64], owner: &str) {
    if let Err(e) = db.run(|d| d.release_unsent(ids, owner)).await {
        tracing::warn!(error = %e, event_ids = ?ids, "handing back a run failed; the reclaim will");
    }
}
