//! The ordered claim ([`crate::WorkerConfig::ordered`]): step 1 claims only the heads of their
//! keys ([`Driver::ordered_heads`]), step 2 (`runs.rs`) a run of each claimed head's next due
//! events. An event is a *head* when no earlier event of its key is in a blocking status
//! ([`OrderedPolicy::blocking_statuses`]). Why two relays never hold two events of one key, and
//! the limits of the order: `docs/ordered.md`.
use sea_orm::sea_query::{
    Alias, Asterisk, Expr, ExprTrait, LockBehavior, LockType, Order, Query, SelectStatement,
    UpdateStatement,
};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{mysql, postgres, sqlite, Backend, Driver};
use crate::config::OrderedPolicy;

/// The alias of the candidate row in [`Driver::ordered_heads_query`].
pub(super) const CANDIDATE: &str = "e";
/// The alias of the predecessor row in [`no_blocking_predecessor`].
const PREDECESSOR: &str = "p";
/// The alias of the row out in [`no_event_of_the_key_out`].
pub(super) const OUT: &str = "s";
/// The alias of the candidate rows where they are a derived table
/// ([`Driver::ordered_heads_query`]).
pub(super) const WINDOW: &str = "w";

/// "No earlier event of the key waiting, nor (with `Block`) dead": one test per blocking status
/// but `SENDING` ([`no_event_of_the_key_out`]). For `WAIT` `(SELECT MAX(p.id) ... AND p.id <
/// e.id) IS NULL`, which reads `idx_t_event_record_biz_no_status_id` backwards from `e.id` and
/// stops at the nearest earlier event; for `FAIL` `NOT EXISTS (...)`.
pub fn no_blocking_predecessor(driver: Driver, policy: OrderedPolicy) -> Expr {
    let (e, p) = (Alias::new(CANDIDATE), Alias::new(PREDECESSOR));
    let statuses = policy.blocking_statuses().iter();
    let none = statuses
        .filter(|s| **s != EventStatus::Sending)
        .map(|status| {
            let mut pred = Query::select();
            pred.expr(Expr::col((p.clone(), Column::Id)).max())
                .from_as(driver.table(), p.clone())
                .and_where(Expr::col((p.clone(), Column::BizNo)).equals((e.clone(), Column::BizNo)))
                .and_where(Expr::col((p.clone(), Column::Status)).eq(status.as_str()))
                .and_where(
                    Expr::col((p.clone(), Column::Id)).lt(Expr::col((e.clone(), Column::Id))),
                );
            if *status == EventStatus::Wait {
                Expr::SubQuery(
                    None,
                    Box::new(
                        sea_orm::sea_query::QueryStatementBuilder::into_sub_query_statement(pred),
                    ),
                )
                .is_null()
            } else {
                pred.clear_selects().expr(Expr::val(1));
                Expr::exists(pred).not()
            }
        });
    none.reduce(ExprTrait::and)
        .expect("every policy blocks on WAIT")
}

/// "No event of the key is out": no `SENDING` event of `e`'s key, earlier or later (a dead
/// letter retried under `Skip`, or an event committed after a later one of its key, waits until
/// that one is done). Postgres reads the keys out once per statement (`postgres/ordered.rs`);
/// the others test per candidate: `NOT EXISTS (SELECT 1 FROM t_event_record AS s WHERE s.status
/// = 'SENDING' AND s.biz_no = e.biz_no)`.
pub fn no_event_of_the_key_out(driver: Driver) -> Expr {
    if driver.backend == Backend::Postgres {
        return postgres::ordered::no_event_of_the_key_out(driver);
    }
    let (e, out) = (Alias::new(CANDIDATE), Alias::new(OUT));
    let mut q = Query::select();
    q.from_as(driver.table(), out.clone())
        .and_where(Expr::col((out.clone(), Column::Status)).eq(EventStatus::Sending.as_str()))
        .expr(Expr::val(1))
        .and_where(Expr::col((out, Column::BizNo)).equals((e, Column::BizNo)));
    Expr::exists(q).not()
}

/// Which due `WAIT` rows step 1 of the ordered claim looks through for heads: the worker
/// claims from a [`HeadScan::Window`] and, when that comes up short, at most every
/// [`HEAD_SCAN_DEEP_EVERY_MIN`] with [`HeadScan::Deep`], so that a head behind a window filled
/// by other keys' backlogs is found too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadScan {
    /// Only the given number of oldest due `WAIT` rows (by `next_retry_time`, see
    /// [`Driver::ordered_heads_query`]): reads at most `window` rows whatever the backlog.
    Window(u64),
    /// Each key's first unfinished event (one `GROUP BY biz_no` over the unfinished rows, see
    /// [`Driver::ordered_heads_query`]): finds every head, reads every unfinished row once.
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

impl Driver {
    /// The due heads of their keys, oldest due first, at most `n`: the rows `e` that are `WAIT`
    /// and due and pass [`no_blocking_predecessor`] and [`no_event_of_the_key_out`], among the
    /// candidates of `scan`:
    /// - [`HeadScan::Window`]: the `window` oldest due `WAIT` rows, checked in their own order only
    ///   until enough heads are found (each backend's `ordered.rs` says how);
    /// - [`HeadScan::Deep`]: `SELECT MIN(id) ... WHERE status IN (:blocking) GROUP BY biz_no`, each
    ///   key's first unfinished event.
    ///
    /// The candidates only narrow the rows checked; the checks are the whole rule. `locked` gives
    /// the MySQL/MariaDB form: `e.*, now AS claim_now` and `FOR UPDATE SKIP LOCKED`; Postgres adds
    /// the lock clause inside its `UPDATE` ([`Driver::ordered_heads`]).
    pub fn ordered_heads_query(
        self,
        policy: OrderedPolicy,
        n: u64,
        locked: bool,
        scan: HeadScan,
    ) -> SelectStatement {
        let e = Alias::new(CANDIDATE);
        let now = self.now();
        let mut c = Query::select();
        match scan {
            HeadScan::Window(window) => {
                c.column(Column::Id)
                    .from(self.table())
                    .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
                    .and_where(Expr::col(Column::NextRetryTime).lte(now.clone()))
                    .order_by(Column::NextRetryTime, Order::Asc)
                    .limit(window);
            }
            HeadScan::Deep => {
                c.expr_as(Expr::col(Column::Id).min(), Alias::new("id"))
                    .from(self.table())
                    .and_where(
                        Expr::col(Column::Status)
                            .is_in(policy.blocking_statuses().iter().map(|s| s.as_str())),
                    )
                    .group_by_col(Column::BizNo);
            }
        }
        let mut q = Query::select();
        let windowed = scan != HeadScan::Deep;
        let from = match self.backend {
            Backend::Postgres => {
                postgres::ordered::from_candidates(self, &mut q, c, windowed, policy, n)
            }
            Backend::MySql => mysql::ordered::from_candidates(self, &mut q, c, windowed),
            Backend::Sqlite => sqlite::ordered::from_candidates(self, &mut q, c),
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
            q.and_where(no_blocking_predecessor(self, policy))
                .and_where(no_event_of_the_key_out(self));
        }
        q.order_by((from.ordered_by, Column::NextRetryTime), Order::Asc)
            .limit(n);
        if locked {
            lock_heads(self, &mut q);
        }
        q
    }

    /// Step 1 on Postgres and SQLite: the batch claim's `UPDATE ... RETURNING *` over
    /// [`Driver::ordered_heads_query`]. MySQL/MariaDB run that query as a locking read instead.
    pub fn ordered_heads(
        self,
        owner: &str,
        policy: OrderedPolicy,
        n: u64,
        scan: HeadScan,
    ) -> UpdateStatement {
        let mut due = self.ordered_heads_query(policy, n, false, scan);
        match self.backend {
            Backend::Postgres => {
                lock_heads(self, &mut due);
                postgres::claim::claim_of(self, owner, due)
            }
            Backend::MySql | Backend::Sqlite => self.claim_in(owner, due),
        }
    }
}

/// How a backend's heads query reads its candidates ([`Driver::ordered_heads_query`]).
pub(super) struct HeadsFrom {
    /// Whether the checks run on the outer query's rows (`e`), not already on the candidates.
    pub(super) checks_here: bool,
    /// The alias whose `next_retry_time` orders the heads.
    pub(super) ordered_by: Alias,
}

/// `FOR UPDATE SKIP LOCKED` on the rows of `e` (never on the candidates, a non-locking read).
/// Postgres names the table (`postgres/ordered.rs`); MariaDB has no `OF`, and its materialized
/// derived table is not locked; sea-query leaves the clause out for SQLite (one writer at a
/// time).
fn lock_heads(driver: Driver, q: &mut SelectStatement) {
    match driver.backend {
        Backend::Postgres => postgres::ordered::lock_heads(q),
        Backend::MySql | Backend::Sqlite => {
            q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        }
    }
}
