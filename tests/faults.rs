//! Faults and hostile timing: a business transaction that commits long after later events
//! were published, and one that stays open while relays work (the relay whose clock is 15
//! minutes ahead is the cli crate's `tests/faults.rs`).
mod common;

use common::wait_until;
use common::{age, event, new_event, Fleet};

use std::time::Duration;

use common::TestContext;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, TransactionTrait};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{
    CancellationToken, EventStatus, InMemoryPublisher, NewEvent, OutboxExt, RetryPolicy,
    WorkerConfig,
};

// Postgres and MariaDB only: servers whose concurrent transactions (and their locks) the tests
// watch.
backend_test!(
    postgres_late_transaction_is_still_published:
        Postgres, "late_txn" => late_transaction_is_still_published;
    mariadb_late_transaction_is_still_published:
        MySql, "late_txn" => late_transaction_is_still_published;
    postgres_open_transaction_on_empty_table_blocks_no_relay_statement:
        Postgres, "open_txn_empty" => open_txn_on_empty_table;
    postgres_open_transaction_among_wait_and_fail_rows_blocks_no_relay_statement:
        Postgres, "open_txn_rows" => open_txn_among_rows;
    mariadb_open_transaction_on_empty_table_blocks_no_relay_statement:
        MySql, "open_txn_empty" => open_txn_on_empty_table;
    mariadb_open_transaction_among_wait_and_fail_rows_blocks_no_relay_statement:
        MySql, "open_txn_rows" => open_txn_among_rows;
);

/// No cursor can skip an event: one whose transaction stays open while later events commit and
/// are published is published once it commits.
async fn late_transaction_is_still_published(ctx: &TestContext) {
    let db = &ctx.db;
    let publisher = std::sync::Arc::new(InMemoryPublisher::new());
    let cfg = WorkerConfig::default()
        .completion(common::completion())
        .poll_delay(Duration::from_millis(20))
        .retry(RetryPolicy::default())
        .instance_id("relay");
    let late = db.begin().await.expect("begin");
    let late_id = late
        .with_event(NewEvent::raw("LATE", "T", "{}"))
        .await
        .expect("insert");
    let fleet = Fleet::start(ctx, 4, publisher.clone(), [cfg]).await;
    let mut later = Vec::new();
    for i in 0..5 {
        later.push(new_event(db, &format!("LATER-{i}")).await);
    }
    let all_later = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        || async { later.iter().all(|id| publisher.distinct_ids().contains(id)) },
    )
    .await;
    assert!(all_later, "later events not published");
    assert!(!publisher.distinct_ids().contains(&late_id));
    late.commit().await.expect("commit the late transaction");
    let published = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        || async { publisher.distinct_ids().contains(&late_id) },
    )
    .await;
    fleet.stop().await;
    assert!(published, "the late event was skipped");
    assert_eq!(event(db, late_id).await.status, EventStatus::Success);
    assert_eq!(publisher.duplicates(), 0);
}

async fn open_txn_on_empty_table(ctx: &TestContext) {
    open_transaction_blocks_no_relay_statement(ctx, false).await
}

async fn open_txn_among_rows(ctx: &TestContext) {
    open_transaction_blocks_no_relay_statement(ctx, true).await
}

/// The statements waiting on a lock right now, from the database's own account of lock waits,
/// as (the waiting statement's SQL, whether it waits on the business transaction that inserted
/// event `business_id`).
///
/// Postgres: ungranted `pg_locks` joined to `pg_stat_activity`, blocked by the business
/// session's pid (`pg_blocking_pids`). MariaDB: the `TRANSACTIONS` section of `SHOW ENGINE
/// INNODB STATUS`, every `LOCK WAIT` with the record it waits for. (MariaDB 10.11's
/// `information_schema.innodb_lock_waits` and `innodb_trx` left out the relay's waiting
/// autocommit statements in every stalled run tried here, while the status report showed them
/// waiting on the business transaction's row.) The business transaction holds locks on its
/// own inserted row alone, so a wait on it is a wait for a record whose primary key is
/// `business_id`.
async fn lock_waits(
    db: &impl sea_orm::ConnectionTrait,
    business_pid: Option<i32>,
    business_id: i64,
) -> Vec<(String, bool)> {
    use sea_orm::{DbBackend, Statement};
    let backend = db.get_database_backend();
    if backend == DbBackend::MySql {
        let status: String = db
            .query_one_raw(Statement::from_string(backend, "SHOW ENGINE INNODB STATUS"))
            .await
            .expect("innodb status")
            .expect("a row")
            .try_get("", "Status")
            .expect("status text");
        // InnoDB prints a BIGINT key as 8 bytes, big-endian with the sign bit flipped.
        let key = format!("hex {:016x}", (business_id as u64) ^ (1 << 63));
        return status
            .split("---TRANSACTION ")
            .filter(|t| t.contains("LOCK WAIT"))
            .map(|t| {
                let query = t
                    .lines()
                    .find(|l| {
                        l.starts_with("UPDATE")
                            || l.starts_with("DELETE")
                            || l.starts_with("SELECT")
                    })
                    .unwrap_or("?")
                    .to_owned();
                let waited = t
                    .split("FOR THIS LOCK TO BE GRANTED")
                    .nth(1)
                    .unwrap_or("")
                    .split("------------------")
                    .next()
                    .unwrap_or("");
                (query, waited.contains(&key))
            })
            .collect();
    }
    let stmt = Statement::from_sql_and_values(
        backend,
        "SELECT COALESCE(a.query, '?') AS q, \
         COALESCE($1 = ANY(pg_blocking_pids(l.pid)), false) AS ours \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE NOT l.granted AND a.datname = current_database()",
        [business_pid.into()],
    );
    common::query_pairs(db, stmt, ("q", "ours")).await
}

/// A business transaction holds an uncommitted event (on an otherwise empty table, or among
/// committed `WAIT` rows that are not due and `FAIL` rows) while two relays (batch claim and
/// the seed's per-row claim) claim, send and mark other events, the reclaim requeues expired
/// leases, and the operator's retry of every dead letter and purge of delivered rows run. A
/// monitor reads the lock-wait view every few milliseconds: nothing may ever wait on the
/// business transaction, and every committed event is published before it ends.
///
/// MariaDB: were the relay's by-id statements not forced onto PRIMARY, a young
/// table's plan would be a full scan whose row locks wait out `innodb_lock_wait_timeout` on the
/// uncommitted row. Postgres takes no gap locks and never waits on a row invisible to its
/// snapshot; the same test shows it there (relays may still wait briefly on each other: a
/// per-row claim on a row the batch claim has locked).
async fn open_transaction_blocks_no_relay_statement(ctx: &TestContext, with_rows: bool) {
    use sea_orm_outbox::{ops, ClaimStrategy};
    let db = &ctx.db;
    let backend = db.get_database_backend();
    let mut expected = Vec::new();
    let mut fail_rows = Vec::new();
    if with_rows {
        for i in 0..5 {
            let not_due = new_event(db, &format!("NOT-DUE-{i}")).await;
            Events::update_many()
                .col_expr(
                    Column::NextRetryTime,
                    common::db_now(backend, Some(('+', Duration::from_secs(86_400)))),
                )
                .filter(Column::Id.eq(not_due))
                .exec(db)
                .await
                .expect("not due");
            let dead = new_event(db, &format!("DEAD-{i}")).await;
            Events::update_many()
                .col_expr(
                    Column::Status,
                    sea_orm::sea_query::Expr::val(EventStatus::Fail.as_str()),
                )
                .filter(Column::Id.eq(dead))
                .exec(db)
                .await
                .expect("dead letter");
            fail_rows.push(dead);
        }
    }
    let late = db.begin().await.expect("begin");
    let late_id = late
        .with_event(NewEvent::raw("LATE", "T", "{}"))
        .await
        .expect("insert");
    let business_pid = match backend {
        sea_orm::DbBackend::Postgres => Some(
            late.query_one_raw(sea_orm::Statement::from_string(
                backend,
                "SELECT pg_backend_pid() AS pid",
            ))
            .await
            .expect("pid")
            .expect("a row")
            .try_get::<i32>("", "pid")
            .expect("pid"),
        ),
        _ => None,
    };
    // Leases of an instance that died mid-send, 11 minutes old: the reclaim requeues them.
    for i in 0..3 {
        let id = new_event(db, &format!("ORPHAN-{i}")).await;
        common::claim_by_hand(db, &[id], "died").await;
        age(db, id, Column::ClaimedAt, Duration::from_secs(11 * 60)).await;
        expected.push(id);
    }
    // With completion by delete the relays leave no delivered row for the purge below: rows
    // marked `SUCCESS` before the relays switched to deleting are what it deletes then.
    if common::deleting() {
        for i in 0..3 {
            let id = new_event(db, &format!("MARKED-{i}")).await;
            Events::update_many()
                .col_expr(
                    Column::Status,
                    sea_orm::sea_query::Expr::val(EventStatus::Success.as_str()),
                )
                .filter(Column::Id.eq(id))
                .exec(db)
                .await
                .expect("delivered before the switch");
        }
    }

    let stop = CancellationToken::new();
    let monitor = tokio::spawn({
        let db = ctx.pool(1).await;
        let stop = stop.clone();
        async move {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.is_cancelled() {
                seen.extend(lock_waits(&db, business_pid, late_id).await);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            seen
        }
    });
    let publisher = std::sync::Arc::new(InMemoryPublisher::new());
    let configs = [
        ("batch", ClaimStrategy::Batch),
        ("per-row", ClaimStrategy::PerRow),
    ]
    .map(|(owner, strategy)| common::test_config(owner).claim_strategy(strategy));
    let relays = Fleet::start(ctx, 4, publisher.clone(), configs).await;
    for i in 0..20 {
        expected.push(new_event(db, &format!("LATER-{i}")).await);
    }
    let all_published = |ids: Vec<i64>| {
        let publisher = publisher.clone();
        async move {
            wait_until(
                Duration::from_secs(20),
                Duration::from_millis(10),
                || async { ids.iter().all(|id| publisher.distinct_ids().contains(id)) },
            )
            .await
        }
    };
    let published = all_published(expected.clone()).await;
    let mut orphan_attempts = Vec::new();
    for id in &expected[..3] {
        orphan_attempts.push(event(db, *id).await.retry_count);
    }
    // The operator's batched statements, while the transaction is still open.
    let retried = ops::retry_all_dead(&sea_orm_outbox::Outbox::default(), db)
        .await
        .expect("retry dead letters");
    let purged = ops::purge_delivered(&sea_orm_outbox::Outbox::default(), db, Duration::ZERO, 4)
        .await
        .expect("purge");
    let retried_published = all_published(fail_rows.clone()).await;
    stop.cancel();
    let waits = monitor.await.expect("monitor");
    // Relays may briefly wait on each other (a per-row claim on a row the batch claim holds);
    // none may wait on the business transaction.
    let (on_business, on_others): (Vec<_>, Vec<_>) = waits.into_iter().partition(|w| w.1);
    eprintln!(
        "{:?}: statements seen waiting on each other: {on_others:#?}; on the business transaction: {on_business:#?}",
        ctx.backend,
    );
    assert!(
        published,
        "committed events not published while a transaction was open"
    );
    assert!(retried_published, "retried dead letters not published");
    assert_eq!(retried, fail_rows.len() as u64);
    assert!(purged > 0, "the purge deleted nothing");
    assert!(
        on_business.is_empty(),
        "statements waited on the open business transaction: {on_business:#?}"
    );
    assert_eq!(orphan_attempts, [1, 1, 1], "each orphan reclaimed once");
    assert!(!publisher.distinct_ids().contains(&late_id));
    late.commit().await.expect("commit the late transaction");
    assert!(
        all_published(vec![late_id]).await,
        "the late event was not published"
    );
    relays.stop().await;
    assert_eq!(publisher.duplicates(), 0);
}
