//! How Postgres plans the relay's hot statements: the batch claim and the marks
//! reuse one generic plan per connection, the marks and the claims' updates read through the
//! primary key whatever the statistics say about the statuses, and a claim of `n` never takes
//! more than `n`.
use super::relay;
use crate::common::{self, run_on, Backend, TestContext};
use crate::driver;
use crate::Completion;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, Statement,
};
use sea_orm_outbox_entity::event_record::{Column, Entity};
use sea_orm_outbox_entity::EventStatus;

/// `rows` events written through `with_event`, one transaction.
async fn write(ctx: &TestContext, rows: usize) {
    common::insert_many(&ctx.db, "P", rows).await;
}

/// Postgres' plan of `stmt` (`EXPLAIN`, not run), one line per node.
async fn explain(db: &impl ConnectionTrait, stmt: &Statement) -> String {
    let explain = Statement {
        sql: format!("EXPLAIN {}", stmt.sql),
        ..stmt.clone()
    };
    let lines: Vec<String> = db
        .query_all_raw(explain)
        .await
        .expect("explain")
        .iter()
        .map(|r| r.try_get::<String>("", "QUERY PLAN").expect("plan"))
        .collect();
    lines.join("\n")
}

/// How many `WAIT` events are due strictly before `at`.
async fn waiting_due_before(db: &impl ConnectionTrait, at: sea_orm::prelude::DateTimeUtc) -> u64 {
    Entity::find()
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
        .filter(Column::NextRetryTime.lt(at))
        .count(db)
        .await
        .expect("count")
}

/// `(generic_plans, custom_plans)` of this connection's prepared statements whose text contains
/// `needle`, summed.
async fn plans(db: &sea_orm::DatabaseConnection, needle: &str) -> (i64, i64) {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT COALESCE(SUM(generic_plans), 0)::bigint AS g, COALESCE(SUM(custom_plans), 0)::bigint AS c \
             FROM pg_prepared_statements WHERE statement LIKE '%' || $1 || '%'",
            [needle.into()],
        ))
        .await
        .expect("pg_prepared_statements")
        .expect("one row");
    (
        row.try_get::<i64>("", "g").expect("g"),
        row.try_get::<i64>("", "c").expect("c"),
    )
}

/// On one connection, twelve rounds of claim 10 + mark: the claim and the mark statements settle
/// on their generic plan after Postgres' custom-plan trials (five, and more while a custom plan
/// is estimated cheaper, which depends on the table's size), so at least three rounds of each
/// run it; each claim took exactly 10 of the due events.
async fn claim_and_marks_reuse_their_generic_plans(ctx: &TestContext) {
    write(ctx, 200).await;
    let db = ctx.pool(1).await;
    // No auto-analyze during the rounds: new statistics would invalidate the cached plans.
    db.execute_unprepared("ALTER TABLE t_event_record SET (autovacuum_enabled = off)")
        .await
        .expect("autovacuum off");
    db.execute_unprepared("ANALYZE t_event_record")
        .await
        .expect("analyze");
    for round in 0..12 {
        let owner = format!("plans#{round}");
        let claimed = driver::claim_batch(&relay(&db), &owner, 10)
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 10, "round {round}");
        let ids: Vec<i64> = claimed.iter().map(|e| e.id).collect();
        let marked = relay(&db)
            .run(|d| d.mark_success_many(&ids, &owner))
            .await
            .expect("mark");
        assert_eq!(marked, 10, "round {round}");
    }
    let claim = plans(&db, "FOR UPDATE SKIP LOCKED").await;
    let mark = plans(&db, "SET \"status\" = 'SUCCESS'").await;
    assert!(
        claim.0 >= 3 && claim.0 + claim.1 == 12,
        "claim plans (generic, custom) = {claim:?}"
    );
    assert!(
        mark.0 >= 3 && mark.0 + mark.1 == 12,
        "mark plans (generic, custom) = {mark:?}"
    );
    assert_eq!(common::count(&db, EventStatus::Success).await, 120);
    assert_eq!(common::count(&db, EventStatus::Wait).await, 80);
}

/// Statistics taken while every event waited, then 3,000 events in flight: the owner-guarded
/// mark of a few of them reads the primary key, not an index on `status` (which would read
/// every event in flight).
async fn marks_read_through_the_primary_key(ctx: &TestContext) {
    let db = &ctx.db;
    db.execute_unprepared(
        "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) \
         SELECT 'K' || g, 'T', '{}', 'WAIT', 0, now(), now(), now() FROM generate_series(1, 20000) g",
    )
    .await
    .expect("fill");
    db.execute_unprepared("ANALYZE t_event_record")
        .await
        .expect("analyze");
    db.execute_unprepared(
        "UPDATE t_event_record SET status = 'SENDING', claim_owner = 'o', claimed_at = now() WHERE id <= 3000",
    )
    .await
    .expect("in flight");
    let ids: Vec<i64> = (1..=20).collect();
    let pg = driver::Driver::of(DbBackend::Postgres).expect("a known backend");
    for stmt in [
        pg.mark_success_many(&ids, "o").build(),
        pg.renew_leases(&ids, "o").build(),
        pg.release_unsent(&ids, "o").build(),
        driver::postgres::claim::mark_success_and_claim_statement(
            pg,
            (&ids, "o", Completion::Update),
            "o2",
            10,
        ),
    ] {
        let plan = explain(db, &stmt).await;
        let marking = plan.split("CTE outbox_claimed").next().unwrap_or_default();
        assert!(
            marking.contains("t_event_record_pkey"),
            "{}\n{plan}",
            stmt.sql
        );
        assert!(
            !marking.contains("idx_t_event_record_status_claimed_at"),
            "{}\n{plan}",
            stmt.sql
        );
    }
}

/// Statistics taken while no event waited (all 20,000 delivered), then every event `WAIT`
/// again: the batch claim and the ordered claim update the rows their id array names through
/// the primary key, not by reading every `WAIT` row through an index on `status` and
/// filtering it on the array (the outer guard is `("status" = 'WAIT') IS TRUE`).
async fn claims_update_through_the_primary_key(ctx: &TestContext) {
    let db = &ctx.db;
    // No auto-analyze between the update and the plans: the statistics must stay stale.
    db.execute_unprepared("ALTER TABLE t_event_record SET (autovacuum_enabled = off)")
        .await
        .expect("autovacuum off");
    db.execute_unprepared(
        "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) \
         SELECT 'K' || g, 'T', '{}', 'SUCCESS', 0, now(), now(), now() FROM generate_series(1, 20000) g",
    )
    .await
    .expect("fill");
    db.execute_unprepared("ANALYZE t_event_record")
        .await
        .expect("analyze");
    db.execute_unprepared("UPDATE t_event_record SET status = 'WAIT'")
        .await
        .expect("due again");
    let pg = driver::Driver::of(DbBackend::Postgres).expect("a known backend");
    for stmt in [
        pg.build(&pg.claim_batch("o", 100)),
        pg.build(&pg.ordered_heads(
            "o",
            crate::OrderedPolicy::Block,
            100,
            driver::HeadScan::for_heads(100),
        )),
    ] {
        let plan = explain(db, &stmt).await;
        // The update's own scan is its direct child (`  ->  ` two spaces in); the InitPlan's
        // nodes, which choose the ids, sit deeper.
        // Through the primary key with the id array as its index condition, not a full scan
        // of the key filtered on the array.
        let lines: Vec<&str> = plan.lines().collect();
        let feeding = lines
            .iter()
            .position(|l| l.starts_with("  ->  ") && l.contains("on t_event_record"))
            .unwrap_or_else(|| panic!("no scan feeds the update:\n{plan}"));
        assert!(
            lines[feeding].contains("Index Scan using t_event_record_pkey"),
            "{}\n{plan}",
            stmt.sql
        );
        assert!(
            lines
                .get(feeding + 1)
                .is_some_and(|l| l.trim_start().starts_with("Index Cond: (id = ANY")),
            "{}\n{plan}",
            stmt.sql
        );
    }
}

/// A claim of `n` takes exactly `min(n, due)` events for every `n` around the sub-select's
/// power-of-two bucket, oldest due first.
async fn a_claim_of_n_takes_n(ctx: &TestContext) {
    let ids = common::insert_many(&ctx.db, "P", 300).await;
    // Distinct due times in another order than the ids' (a permutation of 300 milliseconds,
    // all long past), so that the order of the claims is seen.
    let base = chrono::DateTime::parse_from_rfc3339("2020-01-01T00:00:00Z")
        .expect("base")
        .with_timezone(&chrono::Utc);
    for (i, id) in (0i64..).zip(ids) {
        let due = base + chrono::Duration::milliseconds((i * 7) % 300);
        Entity::update_many()
            .col_expr(Column::NextRetryTime, Expr::value(due))
            .filter(Column::Id.eq(id))
            .exec(&ctx.db)
            .await
            .expect("due time");
    }
    let mut taken = 0;
    for (k, n) in [1u64, 2, 3, 63, 64, 65, 100].into_iter().enumerate() {
        let claimed = driver::claim_batch(&relay(&ctx.db), &format!("n#{k}"), n)
            .await
            .expect("claim");
        assert_eq!(claimed.len() as u64, n);
        taken += n;
        assert_eq!(common::count(&ctx.db, EventStatus::Sending).await, taken);
        // Oldest due first: nothing still waiting is due before the latest event claimed.
        let last = claimed
            .iter()
            .map(|e| e.next_retry_time)
            .max()
            .expect("one");
        let earlier = waiting_due_before(&ctx.db, last).await;
        assert_eq!(
            earlier, 0,
            "a waiting event was due before the claimed ones"
        );
    }
    let rest = driver::claim_batch(&relay(&ctx.db), "n#last", 128)
        .await
        .expect("claim");
    assert_eq!(rest.len() as u64, 300 - taken);
}

mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claim_and_marks_reuse_their_generic_plans() {
        super::run_on(
            super::Backend::Postgres,
            "claim_and_marks_reuse_their_generic_plans",
            super::claim_and_marks_reuse_their_generic_plans,
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_update_through_the_primary_key() {
        super::run_on(
            super::Backend::Postgres,
            "claims_update_through_the_primary_key",
            super::claims_update_through_the_primary_key,
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn marks_read_through_the_primary_key() {
        super::run_on(
            super::Backend::Postgres,
            "marks_read_through_the_primary_key",
            super::marks_read_through_the_primary_key,
        )
        .await
    }
}

crate::backend_tests!(a_claim_of_n_takes_n);
