//! The plans of the ordered claim on Postgres and MariaDB: its predecessor check reads
//! `idx_t_event_record_biz_no_status_id`, and the blocked-key count of `ops` scans no whole
//! table.
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::common::TestContext;
use crate::driver::HeadScan;
use crate::OrderedPolicy;

crate::backend_test! {
    /// The predecessor check of the ordered claim reads `idx_t_event_record_biz_no_status_id`.
    postgres_ordered_claim_uses_the_biz_no_index: Postgres, "ordered_explain" => ordered_claim_uses_the_biz_no_index;
    /// The predecessor check of the ordered claim reads `idx_t_event_record_biz_no_status_id`.
    mariadb_ordered_claim_uses_the_biz_no_index: MySql, "ordered_explain" => ordered_claim_uses_the_biz_no_index;
}

/// EXPLAIN lines of `stmt` (Postgres: the plan; MariaDB: `table key type Extra` per row).
async fn explain(db: &DatabaseConnection, stmt: Statement) -> String {
    let backend = db.get_database_backend();
    let stmt = Statement {
        sql: format!("EXPLAIN {}", stmt.sql),
        ..stmt
    };
    let rows = db.query_all_raw(stmt).await.expect("explain");
    rows.iter()
        .map(|r| match backend {
            DbBackend::Postgres => r.try_get::<String>("", "QUERY PLAN").expect("plan"),
            _ => {
                let col = |c: &str| {
                    r.try_get::<Option<String>>("", c)
                        .expect(c)
                        .unwrap_or_default()
                };
                format!(
                    "table={} type={} key={} ref={} Extra={}",
                    col("table"),
                    col("type"),
                    col("key"),
                    col("ref"),
                    col("Extra")
                )
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// On a table of 20,000 delivered events and 5,000 waiting ones (250 keys × 20), the ordered
/// claim's predecessor check reads `idx_t_event_record_biz_no_status_id` (Postgres: the
/// heads `UPDATE`; MariaDB: the locking `SELECT` of its claim); the blocked-key count of
/// `outbox stats` scans no whole table.
async fn ordered_claim_uses_the_biz_no_index(ctx: &TestContext) {
    use crate::driver;
    let db = &ctx.db;
    let backend = ctx.db_backend();
    let fill = |status: &str, rows: u32, keys: u32| {
        match backend {
        DbBackend::Postgres => format!(
            "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) \
             SELECT 'K' || (g % {keys}), 'T', '{{}}', '{status}', 0, now() - interval '1 hour', now(), now() FROM generate_series(1, {rows}) g"
        ),
        _ => format!(
            "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) \
             SELECT CONCAT('K', seq % {keys}), 'T', '{{}}', '{status}', 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq_1_to_{rows}"
        ),
    }
    };
    db.execute_unprepared(&fill("SUCCESS", 20_000, 2_000))
        .await
        .expect("fill delivered");
    db.execute_unprepared(&fill("WAIT", 5_000, 250))
        .await
        .expect("fill waiting");
    db.execute_unprepared(match backend {
        DbBackend::Postgres => "ANALYZE t_event_record",
        _ => "ANALYZE TABLE t_event_record",
    })
    .await
    .expect("analyze");
    let index = crate::migration::m20261202_000004_add_biz_no_status_index::INDEX;
    for (policy, scan) in [
        (OrderedPolicy::Block, HeadScan::Deep),
        (OrderedPolicy::Skip, HeadScan::Deep),
        (OrderedPolicy::Block, HeadScan::for_heads(20)),
    ] {
        let d = driver::Driver::of(backend).expect("a known backend");
        let claim = match backend {
            DbBackend::Postgres => d.build(&d.ordered_heads("me", policy, 20, scan)),
            _ => d.build(&d.ordered_heads_query(policy, 20, true, scan)),
        };
        let plan = explain(db, claim).await;
        eprintln!("{policy:?} {scan:?} claim plan:\n{plan}");
        assert!(plan.contains(index), "{policy:?} {scan:?} claim:\n{plan}");
        // No row source read whole but MariaDB's derived window (`<derived2>`, at most the
        // window's rows).
        for bad in [
            "Seq Scan on t_event_record",
            "table=p type=ALL",
            "table=c type=ALL",
            "table=t_event_record type=ALL",
        ] {
            assert!(
                !plan.contains(bad),
                "{policy:?} {scan:?} claim reads every row:\n{plan}"
            );
        }
        // The predecessor check reads one (biz_no, status) range per status, never every row
        // of the key (its delivered history) filtered by status.
        match backend {
            DbBackend::Postgres => {
                assert!(
                    plan.contains("Scan Backward using idx_t_event_record_biz_no_status_id"),
                    "{scan:?} claim:\n{plan}"
                );
                assert!(
                    !plan.contains("Filter: ((status)::text = ANY"),
                    "{scan:?} claim:\n{plan}"
                );
            }
            _ => {
                // Each probe looks its status up (`ref=...,const` on the biz_no index, or
                // `ref=const` on a status index), never the biz_no alone.
                let probes: Vec<&str> =
                    plan.lines().filter(|l| l.starts_with("table=p ")).collect();
                assert!(!probes.is_empty(), "no predecessor probe:\n{plan}");
                for p in probes {
                    assert!(
                        p.contains("const"),
                        "{scan:?} predecessor probe by biz_no alone:\n{plan}"
                    );
                }
            }
        }
        if scan != HeadScan::Deep {
            // The window's rows are checked in the window's own scan (Postgres), and the
            // heads are fetched by their ids through the primary key, not by probing every
            // WAIT row.
            let by_id = match backend {
                DbBackend::Postgres => {
                    assert!(
                        plan.contains("Subquery Scan on e"),
                        "{scan:?} claim: the checks do not run on the window:\n{plan}"
                    );
                    let by_pkey = plan
                        .contains("Index Scan using t_event_record_pkey on t_event_record e")
                        || (plan.contains("Bitmap Heap Scan on t_event_record e")
                            && plan.contains("Bitmap Index Scan on t_event_record_pkey"));
                    assert!(by_pkey, "{scan:?} claim: heads not fetched by id:\n{plan}");
                    "t_event_record_pkey"
                }
                _ => "table=e type=eq_ref key=PRIMARY ref=w.id",
            };
            assert!(plan.contains(by_id), "{scan:?} claim:\n{plan}");
        }
    }
    let blocked = explain(
        db,
        backend.build(
            &driver::Driver::of(backend)
                .expect("a known backend")
                .blocked_keys(),
        ),
    )
    .await;
    // The blocked-key count starts from the dead letters (a status index) and reads the WAIT
    // rows of their keys through the biz_no index: no scan of the whole table (MariaDB reads
    // the small derived table of dead letters whole, `table=<derived2> type=ALL`).
    for bad in [
        "Seq Scan on t_event_record",
        "table=w type=ALL",
        "table=t_event_record type=ALL",
    ] {
        assert!(!blocked.contains(bad), "blocked keys:\n{blocked}");
    }
}
