//! The indexes the scan and the reclaim read, among 20,000 delivered events, on Postgres,
//! MariaDB and SQLite.
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use super::relay;
use crate::common::{new_event, TestContext};
use crate::driver;
use crate::EventStatus;

crate::backend_tests!(scan_and_reclaim_use_the_composite_indexes);

/// EXPLAIN lines of `stmt` on `ctx`'s backend.
async fn explain(ctx: &TestContext, stmt: Statement) -> Vec<String> {
    let backend = ctx.db_backend();
    let prefix = match backend {
        DbBackend::Sqlite => "EXPLAIN QUERY PLAN ",
        _ => "EXPLAIN ",
    };
    let stmt = Statement {
        sql: format!("{prefix}{}", stmt.sql),
        ..stmt
    };
    let rows = ctx.db.query_all_raw(stmt).await.expect("explain");
    rows.iter()
        .map(|r| match backend {
            DbBackend::Postgres => r.try_get::<String>("", "QUERY PLAN").expect("plan"),
            DbBackend::MySql => format!(
                "type={} key={} Extra={}",
                r.try_get::<Option<String>>("", "type")
                    .expect("type")
                    .unwrap_or_default(),
                r.try_get::<Option<String>>("", "key")
                    .expect("key")
                    .unwrap_or_default(),
                r.try_get::<Option<String>>("", "Extra")
                    .expect("Extra")
                    .unwrap_or_default()
            ),
            _ => r.try_get::<String>("", "detail").expect("detail"),
        })
        .collect()
}

async fn scan_and_reclaim_use_the_composite_indexes(ctx: &TestContext) {
    let db = &ctx.db;
    let backend = ctx.db_backend();
    let fill = match backend {
        DbBackend::Postgres => "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, claim_owner, claimed_at, create_time, update_time) \
             SELECT 'B' || g, 'T', '{}', 'SUCCESS', 0, now() - interval '1 day', 'old', now() - interval '1 day', now(), now() FROM generate_series(1, 20000) g",
        DbBackend::MySql => "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, claim_owner, claimed_at, create_time, update_time) \
             SELECT CONCAT('B', seq), 'T', '{}', 'SUCCESS', 0, UTC_TIMESTAMP(6) - INTERVAL 1 DAY, 'old', UTC_TIMESTAMP(6) - INTERVAL 1 DAY, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq_1_to_20000",
        _ => "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000) \
             INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, claim_owner, claimed_at, create_time, update_time) \
             SELECT 'B' || n, 'T', '{}', 'SUCCESS', 0, '2020-01-01T00:00:00.000000+00:00', 'old', '2020-01-01T00:00:00.000000+00:00', '2020-01-01T00:00:00.000000+00:00', '2020-01-01T00:00:00.000000+00:00' FROM g",
    };
    db.execute_unprepared(fill).await.expect("fill");
    for i in 0..5 {
        new_event(db, &format!("W-{i}")).await;
    }
    db.execute_unprepared(match backend {
        DbBackend::Postgres => "ANALYZE t_event_record",
        DbBackend::MySql => "ANALYZE TABLE t_event_record",
        _ => "ANALYZE",
    })
    .await
    .expect("analyze");

    let d = driver::Driver::of(backend).expect("a known backend");
    let scan = explain(ctx, backend.build(&d.candidates(20)))
        .await
        .join("\n");
    let reclaim = explain(
        ctx,
        backend.build(&d.expired_leases(Duration::from_secs(600), driver::RECLAIM_BATCH)),
    )
    .await
    .join("\n");
    // The reclaim's update names its rows by id and reads them through the primary key alone.
    let by_id = explain(
        ctx,
        d.reclaim(
            &[1, 2, 3, 4],
            Duration::from_secs(600),
            3,
            EventStatus::Wait,
        )
        .build(),
    )
    .await
    .join("\n");
    // MySQL/MariaDB must read PRIMARY alone (any other plan locks rows it does not change, see
    // `driver/mysql/by_ids.rs`); Postgres reads the primary key too (its status guard is kept
    // off the status indexes, which would read every event in flight); SQLite takes no such
    // locks and may pick any index, but never a full scan.
    let (wanted, bad): (&[&str], &[&str]) = match backend {
        DbBackend::MySql => (&["type=range key=PRIMARY"], &["type=ALL", "type=index"]),
        DbBackend::Postgres => (
            &["t_event_record_pkey"],
            &["Seq Scan", "idx_t_event_record_status_"],
        ),
        _ => (
            &["INTEGER PRIMARY KEY", "idx_t_event_record_status_"],
            &["SCAN t_event_record"],
        ),
    };
    assert!(
        wanted.iter().any(|w| by_id.contains(w)) && !bad.iter().any(|b| by_id.contains(b)),
        "reclaim update by id:\n{by_id}"
    );
    // The scan reads idx_t_event_record_status_next_retry in order. For the reclaim both composite indexes
    // start with `status`, and with few SENDING rows Postgres and MariaDB rate them alike (a
    // range over status = 'SENDING' either way); what matters is an index range, not a scan of
    // the delivered rows.
    for (what, plan, indexes) in [
        ("scan", &scan, &["idx_t_event_record_status_next_retry"][..]),
        (
            "reclaim",
            &reclaim,
            &[
                "idx_t_event_record_status_claimed_at",
                "idx_t_event_record_status_next_retry",
            ][..],
        ),
    ] {
        assert!(
            indexes.iter().any(|i| plan.contains(i)),
            "{what} uses none of {indexes:?}:\n{plan}"
        );
        for bad in [
            "Seq Scan",
            "type=ALL",
            "filesort",
            "Sort",
            "SCAN t_event_record",
            "TEMP B-TREE",
        ] {
            assert!(!plan.contains(bad), "{what} plan has {bad}:\n{plan}");
        }
    }
    eprintln!(
        "{:?} scan plan:\n{scan}\nreclaim plan:\n{reclaim}\nreclaim update by id:\n{by_id}",
        ctx.backend
    );
    // The scan still finds exactly the 5 due events among 20,000 delivered ones.
    assert_eq!(
        relay(db)
            .query_events(|d| d.candidates(20))
            .await
            .expect("scan")
            .len(),
        5
    );
}
