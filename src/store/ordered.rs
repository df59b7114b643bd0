//! The ordered claim ([`crate::WorkerConfig::ordered`]): only the heads of their keys, then a
//! run of each claimed head's next due events.
//!
//! An event `e` of key K (`biz_no`) is a *head* when no event of K with a smaller id is in a
//! blocking status ([`OrderedPolicy::blocking_statuses`]: `WAIT`, `SENDING`, and `FAIL` with
//! [`OrderedPolicy::Block`]). The claim has two steps:
//!
//! 1. **Heads** ([`ordered_heads_query`], run per backend by [`Dialect::claim_ordered_heads`]):
//!    the due `WAIT` rows with [`no_blocking_predecessor`] and [`no_event_of_the_key_out`],
//!    oldest due first, at most `heads`, taken like the batch claim (Postgres: one `UPDATE ...
//!    WHERE id = ANY(ARRAY(SELECT ... FOR UPDATE OF e SKIP LOCKED)) RETURNING *`; MySQL/MariaDB: the locking `SELECT` and the
//!    `UPDATE` by ids in one `READ COMMITTED` transaction; SQLite: the `UPDATE ... RETURNING`
//!    without a lock clause).
//! 2. **Runs** ([`run_candidates_query`], [`claim_run_statement`]): for each head now
//!    `SENDING` under this claim, the key's next events in id order while they are `WAIT` and
//!    due, claimed by one guarded `UPDATE` by ids.
//!
//! ## Why two relays never hold two events of one key
//! - *Step 1.* The predecessor check reads committed rows only (Postgres: the statement's
//!   snapshot; InnoDB: a consistent read, since a locking clause does not reach a nested
//!   subquery; SQLite: one writer at a time). A predecessor stops being blocking only by
//!   becoming `SUCCESS` (or `FAIL` under `Skip`, or being deleted by `outbox dead discard`),
//!   and `SUCCESS` is final: a stale read can only see a predecessor as *more* blocking than it
//!   is now (`WAIT` where it is already `SENDING` or `SUCCESS`), never less. So while relay A
//!   holds event 1 of K (`SENDING`, even uncommitted: then B reads it as `WAIT`), relay B's
//!   check of event 2 finds event 1 blocking and skips event 2. Event 1 itself is taken by one
//!   relay only: its row is locked (`SKIP LOCKED`) and re-checked `status = 'WAIT'` by the
//!   `UPDATE` (Postgres re-evaluates it on the newest row version), and a relay that loses
//!   the race changes no row.
//! - *Step 2.* A follower f of head h (h < f, same key) is never a head while h is `WAIT` or
//!   `SENDING`, so no other relay's step 1 takes it, and no other relay runs a step 2 for the
//!   key, since only the holder of h does. Between the steps h is `SENDING` under this claim,
//!   committed; the followers' `UPDATE` is guarded by `status = 'WAIT' AND next_retry_time <=
//!   now`, and a follower it did not take cuts the run there (the ones after it are handed
//!   back at once).
//! - A reclaimed (lease-expired) `SENDING` event goes back to `WAIT` and stays its key's head.
//! - Two ways a `WAIT` event can appear *before* an event already being sent: a dead letter
//!   retried under `Skip` while a later event of its key is out, and an event whose
//!   transaction took its id before another one of the same key but committed after it (see
//!   below). [`no_event_of_the_key_out`] keeps such an event back until the later one is done,
//!   so that the two are not held at once either; only a retry or a late commit that lands
//!   between another relay's read and its claim of the later event can still overlap it.
//!
//! Limits of the guarantee (documented in the README): order is id order, and two
//! transactions writing events of one key concurrently may commit a smaller id after a larger
//! one was sent; under `Skip`, a dead letter retried later goes out after the later events of
//! its key.
use std::collections::{HashMap, HashSet};

use sea_orm::sea_query::{Alias, Asterisk, Expr, ExprTrait, Order, Query, SelectStatement};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select, TransactionTrait, UpdateMany,
};
use sea_orm_outbox_entity::event_record::{Column, Entity, Model};
use sea_orm_outbox_entity::EventStatus;

use super::{dialect, exec_by_ids, Dialect};
use crate::config::OrderedPolicy;

/// The alias of the candidate row in [`ordered_heads_query`].
const CANDIDATE: &str = "e";
/// The alias of the predecessor row in [`no_blocking_predecessor`].
const PREDECESSOR: &str = "p";
/// The alias of the row out in [`no_event_of_the_key_out`].
const OUT: &str = "s";
/// The alias of the candidate rows where they are a derived table ([`ordered_heads_query`]).
const WINDOW: &str = "w";

/// "No earlier event of the key waiting, nor (with `Block`) dead": the blocking statuses
/// ([`OrderedPolicy::blocking_statuses`]) but `SENDING`, which [`no_event_of_the_key_out`]
/// tests for every event of the key, earlier or later. One test per status joined by `AND`:
/// for `WAIT` `(SELECT MAX(p.id) FROM t_event_record AS p WHERE p.biz_no = e.biz_no AND
/// p.status = 'WAIT' AND p.id < e.id) IS NULL`, for `FAIL` `NOT EXISTS (SELECT 1 ... p.status
/// = 'FAIL' AND p.id < e.id)`. The `WAIT` test is one range of
/// `idx_t_event_record_biz_no_status_id (biz_no, status, id)` read backwards from `e.id` on
/// Postgres and SQLite (the `MAX` becomes one index lookup), so it stops at the nearest earlier
/// event. MariaDB reads the key's whole `(biz_no, 'WAIT')` range and applies `id < e.id`
/// afterwards, so there a hot key's probe costs its backlog. Not one `p.status IN (...)` (read
/// by `biz_no` alone: every row of the key per probe), nor `NOT EXISTS` for `WAIT` (reads
/// forwards from the key's first entry, over its delivered rows' dead index entries).
pub fn no_blocking_predecessor(policy: OrderedPolicy) -> Expr {
    let (e, p) = (Alias::new(CANDIDATE), Alias::new(PREDECESSOR));
    let mut all: Option<Expr> = None;
    for status in policy.blocking_statuses() {
        if *status == EventStatus::Sending {
            continue; // no_event_of_the_key_out
        }
        let mut pred = Query::select();
        pred.expr(Expr::col((p.clone(), Column::Id)).max())
            .from_as(Entity, p.clone())
            .and_where(Expr::col((p.clone(), Column::BizNo)).equals((e.clone(), Column::BizNo)))
            .and_where(Expr::col((p.clone(), Column::Status)).eq(status.as_str()))
            .and_where(Expr::col((p.clone(), Column::Id)).lt(Expr::col((e.clone(), Column::Id))));
        let none = if *status == EventStatus::Wait {
            Expr::SubQuery(
                None,
                Box::new(sea_orm::sea_query::QueryStatementBuilder::into_sub_query_statement(pred)),
            )
            .is_null()
        } else {
            pred.clear_selects().expr(Expr::val(1));
            Expr::exists(pred).not()
        };
        all = Some(match all {
            None => none,
            Some(so_far) => so_far.and(none),
        });
    }
    all.expect("every policy blocks on WAIT")
}

/// "No event of the key is out": no `SENDING` event of `e`'s key, earlier (a predecessor being
/// sent) or later (a dead letter retried under `Skip`, or an event committed after a later one
/// of its key, waits until that one is done). `e` itself is `WAIT` in the statement's snapshot
/// (Postgres, and the MySQL/MariaDB window form, whose candidates are read in the same read
/// view), so this is exactly "no `SENDING` predecessor and no `SENDING` successor". In the
/// MySQL/MariaDB deep form `e` is a locking read of the newest row: a row `SENDING` in the read
/// view and `WAIT` again since (released) is left for the next claim, which is only more
/// cautious.
/// - Postgres: `e.biz_no NOT IN (SELECT s.biz_no FROM t_event_record AS s WHERE s.status =
///   'SENDING')`, a hashed subplan: the keys out are read once per statement (through
///   `idx_t_event_record_status_claimed_at`), then each candidate costs one hash lookup. A
///   correlated probe per candidate lets the planner, when its statistics saw no `SENDING`
///   rows, rescan every `SENDING` row for every candidate. The cost grows with the events out
///   (relays × slots × run length), not with the table. `biz_no` is `NOT NULL`, so `NOT IN`
///   has no null case.
/// - MySQL/MariaDB and SQLite: `NOT EXISTS (SELECT 1 FROM t_event_record AS s WHERE s.biz_no =
///   e.biz_no AND s.status = 'SENDING')`, one range of `idx_t_event_record_biz_no_status_id` on
///   SQLite; MariaDB 10.11 may rewrite it (`exists_to_in`) into one materialized read of the
///   `SENDING` rows, like Postgres'.
/// - Postgres hashes the list only while its estimated size fits `hash_mem` (some 90,000 keys
///   out with the defaults); above that it compares each candidate with the whole list.
pub fn no_event_of_the_key_out(backend: DbBackend) -> Expr {
    let (e, out) = (Alias::new(CANDIDATE), Alias::new(OUT));
    let mut q = Query::select();
    q.from_as(Entity, out.clone())
        .and_where(Expr::col((out.clone(), Column::Status)).eq(EventStatus::Sending.as_str()));
    if backend == DbBackend::Postgres {
        q.column((out, Column::BizNo));
        Expr::col((e, Column::BizNo)).not_in_subquery(q)
    } else {
        q.expr(Expr::val(1))
            .and_where(Expr::col((out, Column::BizNo)).equals((e, Column::BizNo)));
        Expr::exists(q).not()
    }
}

/// Which due `WAIT` rows step 1 of the ordered claim looks through for heads.
///
/// A key with a backlog (one hot `biz_no`, or a key blocked behind a dead letter) has many due
/// `WAIT` rows and one head at most; checking each of its rows for a blocking predecessor costs
/// one index probe per row, so a claim that wants more heads than exist reads every due row.
/// The worker claims from a [`HeadScan::Window`] and, when that comes
/// up short, at most every [`HEAD_SCAN_DEEP_EVERY_MIN`] or more with [`HeadScan::Deep`], which
/// groups the unfinished rows by key instead of probing each, so that a head behind a window
/// filled by other keys' backlogs is found too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadScan {
    /// Only the given number of oldest due `WAIT` rows (by `next_retry_time`, see
    /// [`ordered_heads_query`]): reads at most `window` rows whatever the backlog.
    Window(u64),
    /// Each key's first unfinished event (one `GROUP BY biz_no` over the unfinished rows, see
    /// [`ordered_heads_query`]): finds every head, reads every unfinished row once.
    Deep,
}

/// The smallest window [`HeadScan::for_heads`] gives.
pub const HEAD_WINDOW_MIN: u64 = 256;

/// The shortest time between two [`HeadScan::Deep`] claims of one worker, whatever they
/// cost (the worker waits `max(this, 20 × the last deep claim's duration)`).
pub const HEAD_SCAN_DEEP_EVERY_MIN: std::time::Duration = std::time::Duration::from_millis(100);

impl HeadScan {
    /// The window for a claim of up to `heads` heads: `max(8 × heads, HEAD_WINDOW_MIN)` rows.
    pub fn for_heads(heads: u64) -> Self {
        HeadScan::Window(Ord::max(heads.saturating_mul(8), HEAD_WINDOW_MIN))
    }
}

/// The due heads of their keys, oldest due first, at most `n`, among the candidates of `scan`:
/// the rows `e` that are `WAIT` and due (`e.next_retry_time <= now`) and pass
/// [`no_blocking_predecessor`] and [`no_event_of_the_key_out`], `ORDER BY e.next_retry_time
/// LIMIT :n` (where the checks and the order sit per backend: below). The candidates:
/// - [`HeadScan::Window`]: `SELECT id[, biz_no][, next_retry_time] FROM t_event_record WHERE
///   status = 'WAIT' AND next_retry_time <= now ORDER BY next_retry_time LIMIT :window`, the
///   oldest due rows (Postgres reads `id, biz_no, next_retry_time`, MySQL/MariaDB `id,
///   next_retry_time`, SQLite `id`);
/// - [`HeadScan::Deep`]: `SELECT MIN(id) FROM t_event_record WHERE status IN (:blocking) GROUP
///   BY biz_no`, each key's first unfinished event (a head is always one: it is blocking
///   itself and has no blocking predecessor), read once per claim instead of probing every due
///   row (which, over a hot key's backlog, costs one probe per row and per dead index entry of
///   the key's delivered rows).
///
/// **The window is checked in its own order**, oldest first, and only until enough heads are
/// found: checking every row of the window and sorting afterwards pays 256 checks for the one
/// head a claim with one free slot wants (slower in every case measured: BENCHMARKS.md).
/// - Postgres: the checks run on the window itself, `e.id = ANY(ARRAY(SELECT e.id FROM
///   (<window>) AS e WHERE <checks> ORDER BY e.next_retry_time LIMIT :n + head_lock_slack(n)))`
///   (a subquery with a `LIMIT` is never flattened, so its filter runs row by row over the
///   window's ordered index scan and stops at its `LIMIT`). The outer query fetches those
///   candidates by primary key, re-checks `status` and `next_retry_time` on the row it locks
///   (`FOR UPDATE OF e SKIP LOCKED`, inside the `UPDATE` of [`ordered_heads_statement`]) and
///   keeps `n`; [`head_lock_slack`] more candidates stand in for heads that other relays have
///   locked or just taken. The checks read only `id` and `biz_no` of the window's row, which
///   never change, in the statement's snapshot. A join of the window and the table instead
///   lets the planner read every `WAIT` row with stale statistics.
/// - MySQL/MariaDB: `FROM (<window>) AS w STRAIGHT_JOIN t_event_record AS e ON e.id = w.id
///   ... ORDER BY w.next_retry_time LIMIT :n`: the derived table is sorted first and joined
///   in that order, the checks run on `e` row by row, and InnoDB skips locked rows while
///   reading, so the `LIMIT` needs no slack.
///
/// The deep candidates have no order to keep: Postgres reads `e.id = ANY(ARRAY(<c>))` with the
/// checks on `e`, MySQL/MariaDB the candidates as a derived table joined to `e` and ordered by
/// `e.next_retry_time`. SQLite reads `e.id IN (<c>)` for both scans. The candidates only narrow the rows checked; the checks are the
/// whole rule. `locked` gives the MySQL/MariaDB form: every column and the database clock
/// (`e.*, now AS claim_now`) and `FOR UPDATE SKIP LOCKED` (the derived table is a non-locking
/// read; the rows of `e` are locked); Postgres adds the lock clause inside its `UPDATE`
/// ([`ordered_heads_statement`]).
pub fn ordered_heads_query(
    backend: DbBackend,
    policy: OrderedPolicy,
    n: u64,
    locked: bool,
    scan: HeadScan,
) -> SelectStatement {
    let e = Alias::new(CANDIDATE);
    let w = Alias::new(WINDOW);
    let now = dialect::now(backend);
    let window = match scan {
        HeadScan::Window(window) => Some(window),
        HeadScan::Deep => None,
    };
    let mut c = Query::select();
    match window {
        Some(window) => {
            c.column(Column::Id);
            match backend {
                DbBackend::Postgres => {
                    c.column(Column::BizNo).column(Column::NextRetryTime);
                }
                DbBackend::MySql => {
                    c.column(Column::NextRetryTime);
                }
                _ => {}
            }
            c.from(Entity)
                .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
                .and_where(Expr::col(Column::NextRetryTime).lte(now.clone()))
                .order_by(Column::NextRetryTime, Order::Asc)
                .limit(window);
        }
        None => {
            c.expr_as(Expr::col(Column::Id).min(), Alias::new("id"))
                .from(Entity)
                .and_where(
                    Expr::col(Column::Status)
                        .is_in(policy.blocking_statuses().iter().map(|s| s.as_str())),
                )
                .group_by_col(Column::BizNo);
        }
    }
    // Where the checks run, and the column the heads are ordered by.
    let mut checked_here = true;
    let mut order_by = e.clone();
    let mut q = Query::select();
    match backend {
        DbBackend::Postgres => {
            let candidates = if window.is_some() {
                // The checks on the window's own rows, in its order (see above).
                checked_here = false;
                let mut heads = Query::select();
                heads
                    .column((e.clone(), Column::Id))
                    .from_subquery(c, e.clone())
                    .and_where(no_blocking_predecessor(policy))
                    .and_where(no_event_of_the_key_out(backend))
                    .order_by((e.clone(), Column::NextRetryTime), Order::Asc)
                    .limit(n.saturating_add(head_lock_slack(n)));
                heads
            } else {
                c
            };
            q.from_as(Entity, e.clone()).and_where(Expr::cust_with_expr(
                r#""e"."id" = ANY(ARRAY($1))"#,
                Expr::SubQuery(
                    None,
                    Box::new(
                        sea_orm::sea_query::QueryStatementBuilder::into_sub_query_statement(
                            candidates,
                        ),
                    ),
                ),
            ));
        }
        DbBackend::MySql => {
            let join = if window.is_some() {
                order_by = w.clone();
                sea_orm::sea_query::JoinType::StraightJoin
            } else {
                sea_orm::sea_query::JoinType::InnerJoin
            };
            q.from_subquery(c, w.clone()).join_as(
                join,
                Entity,
                e.clone(),
                Expr::col((e.clone(), Column::Id)).equals((w, Column::Id)),
            );
        }
        _ => {
            q.from_as(Entity, e.clone())
                .and_where(Expr::col((e.clone(), Column::Id)).in_subquery(c));
        }
    }
    if locked {
        q.column((e.clone(), Asterisk))
            .expr_as(now.clone(), "claim_now");
    } else {
        q.column((e.clone(), Column::Id));
    }
    q.and_where(Expr::col((e.clone(), Column::Status)).eq(EventStatus::Wait.as_str()))
        .and_where(Expr::col((e, Column::NextRetryTime)).lte(now));
    if checked_here {
        q.and_where(no_blocking_predecessor(policy))
            .and_where(no_event_of_the_key_out(backend));
    }
    q.order_by((order_by, Column::NextRetryTime), Order::Asc)
        .limit(n);
    if locked {
        lock_heads(backend, &mut q);
    }
    q
}

/// Postgres, [`HeadScan::Window`]: the fewest extra candidate heads the window's check hands to
/// the locking query ([`ordered_heads_query`]) for heads that other relays have locked (skipped
/// by `SKIP LOCKED`) or taken since this statement's snapshot (no longer `WAIT` when locked).
/// The slack is `max(HEAD_LOCK_SLACK, n)` for a claim of `n` heads ([`head_lock_slack`]): a
/// claim still fills when one other relay takes the same oldest heads at the same moment (or
/// several take up to 16 of them). More racing relays can leave it short; the worker then
/// makes a deep claim of the rest ([`HeadScan::Deep`], when one is allowed) or claims again
/// when a send finishes. Each extra candidate costs one more check of a window row at most.
pub const HEAD_LOCK_SLACK: u64 = 16;

/// The extra candidates for a claim of `n` heads: `max(HEAD_LOCK_SLACK, n)`.
pub fn head_lock_slack(n: u64) -> u64 {
    Ord::max(HEAD_LOCK_SLACK, n)
}

/// `FOR UPDATE SKIP LOCKED` on the rows of `e`, the table read in the outer query (never
/// those of the candidates: on Postgres an array or a derived table, on MariaDB a materialized
/// derived table, a non-locking read). Postgres names the table whose rows it locks (`FOR
/// UPDATE OF e`), which says so whatever the `FROM` holds; MariaDB has no `OF`, and its
/// materialized derived table is not locked.
fn lock_heads(backend: DbBackend, q: &mut SelectStatement) {
    use sea_orm::sea_query::{LockBehavior, LockType};
    if backend == DbBackend::Postgres {
        q.lock_with_tables_behavior(
            LockType::Update,
            [Alias::new(CANDIDATE)],
            LockBehavior::SkipLocked,
        );
    } else {
        q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
}

/// Step 1 on Postgres (`locking`: `id = ANY(ARRAY(<heads> FOR UPDATE SKIP LOCKED))`) and
/// SQLite (`id IN (<heads>)`): `UPDATE t_event_record SET status = 'SENDING', claim_owner =
/// :owner, claimed_at = now, update_time = now WHERE status = 'WAIT' AND id ... RETURNING *`,
/// the batch claim's statement over [`ordered_heads_query`] (on Postgres the outer guard is
/// written `("status" = 'WAIT') IS TRUE`, see `claim_update_with` in `store/claim.rs`).
pub fn ordered_heads_statement(
    backend: DbBackend,
    owner: &str,
    policy: OrderedPolicy,
    n: u64,
    locking: bool,
    scan: HeadScan,
) -> sea_orm::sea_query::UpdateStatement {
    let mut due = ordered_heads_query(backend, policy, n, false, scan);
    if locking {
        lock_heads(backend, &mut due);
    }
    super::claim::claim_update_of(backend, owner, due, locking)
}

/// `SELECT * FROM t_event_record WHERE biz_no IN (:keys) AND id > :after AND status IN
/// ('WAIT', 'SENDING', 'FAIL') ORDER BY id LIMIT :limit`: the unfinished events that may
/// follow the claimed heads of `keys` (step 2), read without locks.
pub fn run_candidates_query(keys: &[String], after: i64, limit: u64) -> Select<Entity> {
    let open = [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail];
    Entity::find()
        .filter(Column::BizNo.is_in(keys.iter().map(String::as_str)))
        .filter(Column::Id.gt(after))
        .filter(Column::Status.is_in(open.iter().map(|s| s.as_str())))
        .order_by_asc(Column::Id)
        .limit(limit)
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE id IN (:ids) AND status = 'WAIT' AND next_retry_time <= now`: the
/// followers of this claim's heads (step 2; run through the primary key).
pub fn claim_run_statement(backend: DbBackend, ids: &[i64], owner: &str) -> UpdateMany<Entity> {
    let now = dialect::now(backend);
    Entity::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .col_expr(Column::ClaimOwner, Expr::val(owner))
        .col_expr(Column::ClaimedAt, now.clone())
        .col_expr(Column::UpdateTime, now.clone())
        .filter(Column::Id.is_in(ids.iter().copied()))
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
        .filter(Expr::col(Column::NextRetryTime).lte(now))
}

/// Claims up to `heads` heads of their keys for `owner` (step 1, looking through the due rows
/// `scan` says) and then, while the claim
/// stays within `total` events, each head's run of next due events (step 2); returns the
/// events (status `SENDING`) key by key, each key's in id order, the keys oldest due head
/// first. See the module documentation for the SQL and why it is safe with many relays.
///
/// # Errors
/// Any database error of step 1 (transient conflicts are retried first). When step 2 fails,
/// the heads stay claimed and the error is logged: they are returned alone (followers it had
/// taken are handed back).
pub async fn claim_ordered<C>(
    db: &C,
    owner: &str,
    policy: OrderedPolicy,
    heads: u64,
    total: u64,
    scan: HeadScan,
) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let backend = db.get_database_backend();
    let mut claimed = Dialect::of(backend)
        .claim_ordered_heads(db, owner, policy, heads, scan)
        .await?;
    claimed.sort_by(|a, b| {
        a.next_retry_time
            .cmp(&b.next_retry_time)
            .then(a.id.cmp(&b.id))
    });
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
async fn claim_runs<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    policy: OrderedPolicy,
    heads: &[Model],
    budget: u64,
) -> Result<HashMap<String, Vec<Model>>, DbErr> {
    let backend = db.get_database_backend();
    let head_of: HashMap<&str, &Model> = heads.iter().map(|h| (h.biz_no.as_str(), h)).collect();
    let keys: Vec<String> = heads.iter().map(|h| h.biz_no.clone()).collect();
    let after = heads.iter().map(|h| h.id).min().unwrap_or(i64::MAX);
    let rows = run_candidates_query(&keys, after, budget + keys.len() as u64)
        .all(db)
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
    let taken = match exec_by_ids(db, &claim_run_statement(backend, &ids, owner)).await {
        Ok(n) => n,
        Err(e) => {
            // The update may have applied with its reply lost (a dropped connection): hand
            // every follower back (guarded by owner and SENDING: a no-op for rows not taken),
            // so that the key is not held until the lease expires.
            if let Err(back) = super::release_unsent(db, &ids, owner).await {
                tracing::warn!(error = %back, "handing back a run failed; the reclaim will");
            }
            return Err(e);
        }
    };
    let owned: HashSet<i64> = if taken == ids.len() as u64 {
        ids.iter().copied().collect()
    } else {
        match super::owned_ids(db, &ids, owner).await {
            Ok(owned) => owned.into_iter().collect(),
            Err(e) => {
                // Which followers are ours is unknown: hand every one back (the key must not
                // stay held by rows nobody sends until their lease expires).
                if let Err(back) = super::release_unsent(db, &ids, owner).await {
                    tracing::warn!(error = %back, "handing back a run failed; the reclaim will");
                }
                return Err(e);
            }
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
    if !back.is_empty() {
        // Already cut from the runs: if the hand-back fails they wait for the reclaim.
        if let Err(e) = super::release_unsent(db, &back, owner).await {
            tracing::warn!(error = %e, event_ids = ?back, "handing back the end of a cut run failed; the reclaim will");
        }
    }
    Ok(by_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_sql_checks_the_predecessors() {
        let sql = ordered_heads_statement(
            DbBackend::Postgres,
            "me",
            OrderedPolicy::Block,
            20,
            true,
            HeadScan::Deep,
        )
        .to_string(sea_orm::sea_query::PostgresQueryBuilder);
        assert!(
            sql.contains(r#"(SELECT MAX("p"."id") FROM "t_event_record" AS "p""#),
            "{sql}"
        );
        for status in ["WAIT", "FAIL"] {
            assert!(
                sql.contains(&format!(
                    r#""p"."status" = '{status}' AND "p"."id" < "e"."id""#
                )),
                "{sql}"
            );
        }
        assert!(
            sql.contains(r#""e"."biz_no" NOT IN (SELECT "s"."biz_no" FROM "t_event_record" AS "s" WHERE "s"."status" = 'SENDING')"#),
            "{sql}"
        );
        assert!(sql.contains(r#"FOR UPDATE OF "e" SKIP LOCKED"#), "{sql}");
    }

    #[test]
    fn the_window_is_checked_in_its_own_order() {
        let sql = |backend: DbBackend| {
            let q = ordered_heads_query(
                backend,
                OrderedPolicy::Block,
                1,
                backend == DbBackend::MySql,
                HeadScan::for_heads(1),
            );
            backend.build(&q).to_string()
        };
        // Postgres: the checks on the window's rows, 1 + HEAD_LOCK_SLACK candidates locked
        // by primary key.
        let pg = sql(DbBackend::Postgres);
        assert!(
            pg.contains(r#"LIMIT 256) AS "e" WHERE (SELECT MAX("p"."id")"#),
            "{pg}"
        );
        assert!(
            pg.contains(r#"ORDER BY "e"."next_retry_time" ASC LIMIT 17"#),
            "{pg}"
        );
        assert_eq!(pg.matches(r#"SELECT MAX("p"."id")"#).count(), 1, "{pg}");
        // MariaDB: the derived window first, in its order.
        let my = sql(DbBackend::MySql);
        assert!(
            my.contains("AS `w` STRAIGHT_JOIN `t_event_record` AS `e`"),
            "{my}"
        );
        assert!(
            my.contains("ORDER BY `w`.`next_retry_time` ASC LIMIT 1 "),
            "{my}"
        );
    }
}
