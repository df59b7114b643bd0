//! The ordered claim's heads on Postgres (see `driver/ordered.rs`): the window's checks run on
//! the window itself, the candidates reach the outer query as `e.id = ANY(ARRAY(..))`, and the
//! lock names the table whose rows it takes (`FOR UPDATE OF e`).
use sea_orm::sea_query::{
    Alias, Expr, ExprTrait, LockBehavior, LockType, Order, Query, SelectStatement,
    SubQueryStatement,
};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use crate::config::OrderedPolicy;
use crate::driver::ordered::{no_blocking_predecessor, HeadsFrom, CANDIDATE, OUT};
use crate::driver::Driver;

/// The fewest extra candidate heads (`max(HEAD_LOCK_SLACK, n)` for `n` heads) the window's
/// check hands to the locking query, standing in for heads that other relays have locked or
/// taken since this statement's snapshot; a claim left short makes a deep claim or claims again.
pub const HEAD_LOCK_SLACK: u64 = 16;

/// `FROM t_event_record AS e WHERE e.id = ANY(ARRAY(<c>))`. For a window `c` (which also reads
/// `biz_no` and `next_retry_time`) the checks run on its own rows, in its order: `c` becomes
/// `SELECT e.id FROM (<window>) AS e WHERE <checks> ORDER BY e.next_retry_time LIMIT :n +
/// max(HEAD_LOCK_SLACK, n)` (a subquery with a `LIMIT` is never flattened, so its filter runs
/// row by row over the window's ordered index scan and stops at its `LIMIT`).
pub(crate) fn from_candidates(
    driver: Driver,
    q: &mut SelectStatement,
    mut c: SelectStatement,
    window: bool,
    policy: OrderedPolicy,
    n: u64,
) -> HeadsFrom {
    let e = Alias::new(CANDIDATE);
    let candidates = if window {
        c.column(Column::BizNo).column(Column::NextRetryTime);
        let mut heads = Query::select();
        heads
            .column((e.clone(), Column::Id))
            .from_subquery(c, e.clone())
            .and_where(no_blocking_predecessor(driver, policy))
            .and_where(no_event_of_the_key_out(driver))
            .order_by((e.clone(), Column::NextRetryTime), Order::Asc)
            .limit(n.saturating_add(Ord::max(HEAD_LOCK_SLACK, n)));
        heads
    } else {
        c
    };
    q.from_as(driver.table(), e.clone())
        .and_where(Expr::cust_with_expr(
            r#""e"."id" = ANY(ARRAY($1))"#,
            Expr::SubQuery(
                None,
                Box::new(SubQueryStatement::SelectStatement(candidates)),
            ),
        ));
    HeadsFrom {
        checks_here: !window,
        ordered_by: e,
    }
}

/// `e.biz_no NOT IN (SELECT s.biz_no FROM t_event_record AS s WHERE s.status = 'SENDING')`, a
/// hashed subplan: the keys out are read once per statement, then each candidate costs one hash
/// lookup (a correlated probe can rescan every `SENDING` row per candidate). `biz_no` is `NOT
/// NULL`, so `NOT IN` has no null case.
pub(crate) fn no_event_of_the_key_out(driver: Driver) -> Expr {
    let (e, out) = (Alias::new(CANDIDATE), Alias::new(OUT));
    let mut q = Query::select();
    q.from_as(driver.table(), out.clone())
        .and_where(Expr::col((out.clone(), Column::Status)).eq(EventStatus::Sending.as_str()))
        .column((out, Column::BizNo));
    Expr::col((e, Column::BizNo)).not_in_subquery(q)
}

/// `FOR UPDATE OF e SKIP LOCKED`: Postgres names the table whose rows it locks, which says so
/// whatever the `FROM` holds.
pub(crate) fn lock_heads(q: &mut SelectStatement) {
    q.lock_with_tables_behavior(
        LockType::Update,
        [Alias::new(CANDIDATE)],
        LockBehavior::SkipLocked,
    );
}

#[cfg(test)]
mod tests {
    use sea_orm::sea_query::PostgresQueryBuilder;

    use crate::config::OrderedPolicy;
    use crate::driver::{Driver, HeadScan};

    #[test]
    fn heads_sql_checks_the_predecessors() {
        let sql = Driver::Postgres
            .ordered_heads("me", OrderedPolicy::Block, 20, HeadScan::Deep)
            .to_string(PostgresQueryBuilder);
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
        let q = Driver::Postgres.ordered_heads_query(
            OrderedPolicy::Block,
            1,
            false,
            HeadScan::for_heads(1),
        );
        let pg = Driver::Postgres.build(&q).to_string();
        // The checks on the window's rows, 1 + HEAD_LOCK_SLACK candidates locked by primary
        // key.
        assert!(
            pg.contains(r#"LIMIT 256) AS "e" WHERE (SELECT MAX("p"."id")"#),
            "{pg}"
        );
        assert!(
            pg.contains(r#"ORDER BY "e"."next_retry_time" ASC LIMIT 17"#),
            "{pg}"
        );
        assert_eq!(pg.matches(r#"SELECT MAX("p"."id")"#).count(), 1, "{pg}");
    }
}
