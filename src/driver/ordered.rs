//! The ordered claim ([`crate::WorkerConfig::ordered`]): only the heads of their keys, then a
//! run of each claimed head's next due events.
//!
//! An event `e` of key K (`biz_no`) is a *head* when no event of K with a smaller id is in a
//! blocking status ([`OrderedPolicy::blocking_statuses`]: `WAIT`, `SENDING`, and `FAIL` with
//! [`OrderedPolicy::Block`]). The claim has two steps:
//!
//! 1. **Heads** ([`ordered_heads_query`], run by each backend's `claim.rs`):
//!    the due `WAIT` rows with [`no_blocking_predecessor`] and [`no_event_of_the_key_out`],
//!    oldest due first, at most `heads`, taken like the batch claim (Postgres: one `UPDATE ...
//!    WHERE id = ANY(ARRAY(SELECT ... FOR UPDATE OF e SKIP LOCKED)) RETURNING *`; MySQL/MariaDB: the locking `SELECT` and the
//!    `UPDATE` by ids in one `READ COMMITTED` transaction; SQLite: the `UPDATE ... RETURNING`
//!    without a lock clause).
//! 2. **Runs** (`runs.rs`: [`run_candidates_query`], [`claim_run_statement`]): for each head now
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
use sea_orm::sea_query::{
    Alias, Asterisk, Expr, ExprTrait, Order, Query, SelectStatement, UpdateStatement,
};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::claim::claim_in;
use super::{mysql, postgres, sqlite, Backend, Driver};
use crate::config::OrderedPolicy;

/// The alias of the candidate row in [`ordered_heads_query`].
pub(super) const CANDIDATE: &str = "e";
/// The alias of the predecessor row in [`no_blocking_predecessor`].
const PREDECESSOR: &str = "p";
/// The alias of the row out in [`no_event_of_the_key_out`].
pub(super) const OUT: &str = "s";
/// The alias of the candidate rows where they are a derived table ([`ordered_heads_query`]).
pub(super) const WINDOW: &str = "w";

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
pub fn no_blocking_predecessor(driver: Driver, policy: OrderedPolicy) -> Expr {
    let (e, p) = (Alias::new(CANDIDATE), Alias::new(PREDECESSOR));
    let mut all: Option<Expr> = None;
    for status in policy.blocking_statuses() {
        if *status == EventStatus::Sending {
            continue; // no_event_of_the_key_out
        }
        let mut pred = Query::select();
        pred.expr(Expr::col((p.clone(), Column::Id)).max())
            .from_as(driver.table(), p.clone())
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
///   'SENDING')`, the keys out read once per statement (see `postgres/ordered.rs`).
/// - MySQL/MariaDB and SQLite: `NOT EXISTS (SELECT 1 FROM t_event_record AS s WHERE s.biz_no =
///   e.biz_no AND s.status = 'SENDING')`, one range of `idx_t_event_record_biz_no_status_id` on
///   SQLite; MariaDB may rewrite it (`exists_to_in`) into one materialized read of the
///   `SENDING` rows, like Postgres'.
pub fn no_event_of_the_key_out(driver: Driver) -> Expr {
    match driver.backend {
        Backend::Postgres => postgres::ordered::no_event_of_the_key_out(driver),
        Backend::MySql | Backend::Sqlite => no_sending_event_of_the_key(driver),
    }
}

/// `NOT EXISTS (SELECT 1 FROM t_event_record AS s WHERE s.status = 'SENDING' AND s.biz_no =
/// e.biz_no)`: [`no_event_of_the_key_out`] of MySQL/MariaDB and SQLite.
fn no_sending_event_of_the_key(driver: Driver) -> Expr {
    let (e, out) = (Alias::new(CANDIDATE), Alias::new(OUT));
    let mut q = Query::select();
    q.from_as(driver.table(), out.clone())
        .and_where(Expr::col((out.clone(), Column::Status)).eq(EventStatus::Sending.as_str()))
        .expr(Expr::val(1))
        .and_where(Expr::col((out, Column::BizNo)).equals((e, Column::BizNo)));
    Expr::exists(q).not()
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
/// head a claim with one free slot wants.
/// - Postgres: the checks run on the window itself, `e.id = ANY(ARRAY(SELECT e.id FROM
///   (<window>) AS e WHERE <checks> ORDER BY e.next_retry_time LIMIT :n + head_lock_slack(n)))`
///   (a subquery with a `LIMIT` is never flattened, so its filter runs row by row over the
///   window's ordered index scan and stops at its `LIMIT`). The outer query fetches those
///   candidates by primary key, re-checks `status` and `next_retry_time` on the row it locks
///   (`FOR UPDATE OF e SKIP LOCKED`, inside the `UPDATE` of [`ordered_heads_statement`]) and
///   keeps `n`; `head_lock_slack` more candidates stand in for heads that other relays have
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
    driver: Driver,
    policy: OrderedPolicy,
    n: u64,
    locked: bool,
    scan: HeadScan,
) -> SelectStatement {
    let e = Alias::new(CANDIDATE);
    let now = driver.now();
    let window = match scan {
        HeadScan::Window(window) => Some(window),
        HeadScan::Deep => None,
    };
    let mut c = Query::select();
    match window {
        Some(window) => {
            c.column(Column::Id);
            match driver.backend {
                Backend::Postgres => postgres::ordered::window_columns(&mut c),
                Backend::MySql => mysql::ordered::window_columns(&mut c),
                Backend::Sqlite => sqlite::ordered::window_columns(&mut c),
            }
            c.from(driver.table())
                .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
                .and_where(Expr::col(Column::NextRetryTime).lte(now.clone()))
                .order_by(Column::NextRetryTime, Order::Asc)
                .limit(window);
        }
        None => {
            c.expr_as(Expr::col(Column::Id).min(), Alias::new("id"))
                .from(driver.table())
                .and_where(
                    Expr::col(Column::Status)
                        .is_in(policy.blocking_statuses().iter().map(|s| s.as_str())),
                )
                .group_by_col(Column::BizNo);
        }
    }
    let mut q = Query::select();
    let windowed = window.is_some();
    let from = match driver.backend {
        Backend::Postgres => {
            postgres::ordered::from_candidates(driver, &mut q, c, windowed, policy, n)
        }
        Backend::MySql => mysql::ordered::from_candidates(driver, &mut q, c, windowed),
        Backend::Sqlite => sqlite::ordered::from_candidates(driver, &mut q, c),
    };
    if locked {
        q.column((e.clone(), Asterisk))
            .expr_as(now.clone(), "claim_now");
    } else {
        q.column((e.clone(), Column::Id));
    }
    q.and_where(Expr::col((e.clone(), Column::Status)).eq(EventStatus::Wait.as_str()))
        .and_where(Expr::col((e, Column::NextRetryTime)).lte(now));
    if from.checks_here {
        q.and_where(no_blocking_predecessor(driver, policy))
            .and_where(no_event_of_the_key_out(driver));
    }
    q.order_by((from.ordered_by, Column::NextRetryTime), Order::Asc)
        .limit(n);
    if locked {
        lock_heads(driver, &mut q);
    }
    q
}

/// How a backend's heads query reads its candidates ([`ordered_heads_query`]).
pub(super) struct HeadsFrom {
    /// Whether the checks run on the outer query's rows (`e`); otherwise the backend ran them
    /// on the candidates already.
    pub(super) checks_here: bool,
    /// The alias whose `next_retry_time` orders the heads.
    pub(super) ordered_by: Alias,
}

/// `FOR UPDATE SKIP LOCKED` on the rows of `e`, the table read in the outer query (never
/// those of the candidates: on Postgres an array or a derived table, on MariaDB a materialized
/// derived table, a non-locking read); each backend's `lock_heads` says how.
fn lock_heads(driver: Driver, q: &mut SelectStatement) {
    match driver.backend {
        Backend::Postgres => postgres::ordered::lock_heads(q),
        Backend::MySql => mysql::ordered::lock_heads(q),
        Backend::Sqlite => sqlite::ordered::lock_heads(q),
    }
}

/// Step 1 on Postgres (`id = ANY(ARRAY(<heads> FOR UPDATE OF e SKIP LOCKED))`, the outer guard
/// written `("status" = 'WAIT') IS TRUE`) and SQLite (`id IN (<heads>)`): `UPDATE
/// t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now, update_time
/// = now WHERE status = 'WAIT' AND id ... RETURNING *`, the batch claim's statement over
/// [`ordered_heads_query`]. MySQL/MariaDB run [`ordered_heads_query`] as a locking read
/// instead (this form, without a lock clause, is theirs only for comparison).
pub fn ordered_heads_statement(
    driver: Driver,
    owner: &str,
    policy: OrderedPolicy,
    n: u64,
    scan: HeadScan,
) -> UpdateStatement {
    let mut due = ordered_heads_query(driver, policy, n, false, scan);
    match driver.backend {
        Backend::Postgres => {
            lock_heads(driver, &mut due);
            postgres::claim::claim_of(driver, owner, due)
        }
        Backend::MySql | Backend::Sqlite => claim_in(driver, owner, due),
    }
}
