//! The foundation suite, run on Postgres, MariaDB and SQLite (see `tests/common`).
mod common;

use common::wait_until;
use common::{
    age, claim_by_hand, count, db_now, event, event_by_biz_no, insert_many, new_event, query_pairs,
    wait_for_success, Fleet,
};

use std::sync::Arc;
use std::time::Duration;

use common::{hooked_order, order, ScriptedPublisher, TestContext};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, Statement,
    TransactionTrait,
};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{
    transactional_publish, CancellationToken, EventError, EventStatus, InMemoryPublisher, Migrator,
    NewEvent, OutboxError, OutboxExt, Publisher, StatementProtocol, Worker, WorkerConfig,
};

backend_tests!(
    migration_creates_table_and_indexes,
    with_event_commits_and_rolls_back,
    transactional_publish_is_atomic,
    missing_table_says_to_migrate,
    three_workers_publish_each_event_once,
    crash_after_claim_is_reclaimed,
    always_failing_backs_off_then_dead_letters,
    configuration_fault_is_not_an_attempt,
    one_failure_does_not_stop_the_round,
    hook_writes_the_event_in_the_same_transaction,
    cancellation_finishes_the_send_in_flight,
    simple_statement_protocol_is_postgres_only,
);

/// A config for fast tests: short delays, lease 10 s, back-off base 200 ms.
fn fast_config(owner: &str) -> WorkerConfig {
    // The foundation suite exercises the seed's claiming; tests/leases.rs covers Batch.
    common::test_config(owner).claim_strategy(sea_orm_outbox::ClaimStrategy::PerRow)
}

async fn indexes(ctx: &TestContext) -> Vec<(String, String)> {
    let db = &ctx.db;
    let sql = match ctx.db_backend() {
        DbBackend::Postgres => "SELECT i.relname AS name, string_agg(a.attname, ',' ORDER BY k.n) AS cols \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
             CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, n) \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE t.relname = 't_event_record' AND NOT x.indisprimary GROUP BY i.relname ORDER BY 1",
        DbBackend::MySql => "SELECT index_name AS name, GROUP_CONCAT(column_name ORDER BY seq_in_index) AS cols \
             FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 't_event_record' \
             AND index_name <> 'PRIMARY' GROUP BY index_name ORDER BY 1",
        _ => "SELECT m.name AS name, group_concat(ii.name, ',') AS cols FROM sqlite_master m, pragma_index_info(m.name) ii \
             WHERE m.type = 'index' AND m.tbl_name = 't_event_record' GROUP BY m.name ORDER BY 1",
    };
    query_pairs(
        db,
        Statement::from_string(ctx.db_backend(), sql),
        ("name", "cols"),
    )
    .await
}

async fn migration_creates_table_and_indexes(ctx: &TestContext) {
    let expected = vec![
        // The ordered claim's predecessor check (m20261202_000004_add_biz_no_status_index).
        (
            "idx_t_event_record_biz_no_status_id".to_owned(),
            "biz_no,status,id".to_owned(),
        ),
        (
            "idx_t_event_record_status_claimed_at".to_owned(),
            "status,claimed_at".to_owned(),
        ),
        (
            "idx_t_event_record_status_next_retry".to_owned(),
            "status,next_retry_time".to_owned(),
        ),
    ];
    assert_eq!(indexes(ctx).await, expected);
    if ctx.db_backend() == DbBackend::MySql {
        let row = ctx
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::MySql,
                "SELECT COUNT(*) AS n FROM information_schema.columns WHERE table_schema = DATABASE() \
                 AND table_name = 't_event_record' AND data_type = 'datetime' AND datetime_precision = 6",
            ))
            .await
            .expect("columns")
            .expect("row");
        assert_eq!(
            row.try_get::<i64>("", "n").expect("n"),
            4,
            "all four timestamps are DATETIME(6)"
        );
    }
    // Microseconds survive a round trip where the backend's clock has them.
    let id = new_event(&ctx.db, "B-1").await;
    let e = event(&ctx.db, id).await;
    assert_eq!(e.create_time, e.next_retry_time);

    common::unobserve_deletions(&ctx.db, &Default::default()).await;
    Migrator::down(&ctx.db, None).await.expect("down");
    assert!(indexes(ctx).await.is_empty());
    let err = Events::find()
        .all(&ctx.db)
        .await
        .expect_err("table is gone");
    assert!(matches!(
        OutboxError::from(err),
        OutboxError::TableMissing(_)
    ));
    Migrator::up(&ctx.db, None).await.expect("up again");
    assert_eq!(indexes(ctx).await, expected);
}

async fn with_event_commits_and_rolls_back(ctx: &TestContext) {
    let db = &ctx.db;
    let txn = db.begin().await.expect("begin");
    let id = txn
        .with_event(
            NewEvent::json("ORD-1", "ORDER_CREATED", &serde_json::json!({"a": 1})).expect("json"),
        )
        .await
        .expect("with_event");
    txn.commit().await.expect("commit");

    let rows = Events::find().all(db).await.expect("rows");
    assert_eq!(rows.len(), 1);
    let e = &rows[0];
    assert_eq!(
        (e.id, e.status, e.retry_count, e.payload.as_str()),
        (id, EventStatus::Wait, 0, r#"{"a":1}"#)
    );
    assert!(e.claim_owner.is_none() && e.claimed_at.is_none());
    // Due now by the database clock.
    let due = Events::find()
        .filter(Expr::col(Column::NextRetryTime).lte(db_now(db.get_database_backend(), None)))
        .all(db)
        .await
        .expect("due");
    assert_eq!(due.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id]);

    let txn = db.begin().await.expect("begin");
    txn.with_event(NewEvent::raw("ORD-2", "ORDER_CREATED", "{}"))
        .await
        .expect("with_event");
    txn.rollback().await.expect("rollback");
    assert_eq!(
        Events::find().count(db).await.expect("count"),
        1,
        "rollback leaves no event"
    );

    // Invalid events are refused before any write.
    for bad in [
        NewEvent::raw("", "T", "{}"),
        NewEvent::raw("B", " ", "{}"),
        NewEvent::raw("x".repeat(65), "T", "{}"),
        NewEvent::raw("B", "y".repeat(65), "{}"),
        NewEvent::raw(
            "B",
            "T",
            "z".repeat(sea_orm_outbox::EventLimits::DEFAULT_MAX_PAYLOAD_BYTES + 1),
        ),
    ] {
        let err = db.with_event(bad).await.expect_err("invalid");
        assert!(matches!(err, OutboxError::InvalidEvent(_)), "{err}");
    }
    assert_eq!(Events::find().count(db).await.expect("count"), 1);
}

async fn transactional_publish_is_atomic(ctx: &TestContext) {
    let db = &ctx.db;
    let (saved, event_id) =
        transactional_publish(db, order::new("ORD-7", 70), order::created_event)
            .await
            .expect("publish");
    let e = event(db, event_id).await;
    assert_eq!((e.biz_no.as_str(), e.status), ("ORD-7", EventStatus::Wait));
    assert_eq!(
        e.payload,
        format!(r#"{{"amount":70,"orderId":{}}}"#, saved.id)
    );
    assert_eq!(order::Entity::find().count(db).await.expect("orders"), 1);

    // An invalid event (derived from the saved row) rolls the order back too.
    let err = transactional_publish(db, order::new("", 1), |o: &order::Model| {
        Ok(NewEvent::raw(&o.order_no, "ORDER_CREATED", "{}"))
    })
    .await
    .expect_err("empty biz_no");
    assert!(
        matches!(
            err,
            OutboxError::InvalidEvent(EventError::Empty { field: "biz_no" })
        ),
        "{err}"
    );
    // So does an error of the closure.
    let err = transactional_publish(db, order::new("ORD-9", 1), |_o: &order::Model| {
        Err(OutboxError::InvalidConfig("no".into()))
    })
    .await
    .expect_err("closure error");
    assert!(matches!(err, OutboxError::InvalidConfig(_)));
    assert_eq!(order::Entity::find().count(db).await.expect("orders"), 1);
    assert_eq!(Events::find().count(db).await.expect("events"), 1);
}

async fn missing_table_says_to_migrate(ctx: &TestContext) {
    common::unobserve_deletions(&ctx.db, &Default::default()).await;
    Migrator::down(&ctx.db, None).await.expect("down");
    let err = ctx
        .db
        .with_event(NewEvent::raw("B", "T", "{}"))
        .await
        .expect_err("no table");
    assert!(matches!(err, OutboxError::TableMissing(_)), "{err}");
    assert!(err.to_string().contains("run the migration"), "{err}");
    let worker =
        Worker::new(ctx.pool(2).await, ScriptedPublisher::ok(), fast_config("w")).expect("worker");
    let err = worker
        .run_once(&CancellationToken::new())
        .await
        .expect_err("no table");
    assert!(matches!(err, OutboxError::TableMissing(_)), "{err}");
}

/// `StatementProtocol::Simple` (for Postgres behind a transaction-mode pooler) is refused on
/// MySQL/MariaDB and SQLite rather than ignored.
async fn simple_statement_protocol_is_postgres_only(ctx: &TestContext) {
    let config = fast_config("w").statement_protocol(StatementProtocol::Simple);
    let worker = Worker::new(ctx.pool(2).await, ScriptedPublisher::ok(), config);
    match ctx.backend {
        common::Backend::Postgres => {
            worker.expect("simple protocol on Postgres");
        }
        _ => {
            let err = worker.expect_err("simple protocol off Postgres");
            assert!(
                matches!(&err, OutboxError::InvalidConfig(m) if m.contains("Postgres")),
                "{err}"
            );
        }
    }
}

async fn three_workers_publish_each_event_once(ctx: &TestContext) {
    const N: usize = 1000;
    insert_many(&ctx.db, "ORD", N).await;

    let publisher = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(
        ctx,
        2,
        publisher.clone(),
        (0..3).map(|w| fast_config(&format!("w{w}"))),
    )
    .await;
    let drained = wait_for_success(&ctx.db, N as u64, Duration::from_secs(240)).await;
    let mut claimed = 0;
    let mut lost = 0;
    for s in fleet.stop().await {
        claimed += s.claimed;
        lost += s.claim_lost;
        assert_eq!(s.errors, 0, "{s:?}");
    }
    assert!(drained, "outbox not drained: {} published", publisher.len());
    assert_eq!(publisher.distinct_ids().len(), N);
    assert_eq!(
        publisher.duplicates(),
        0,
        "a fault-free race publishes each event once"
    );
    assert_eq!(claimed, N as u64);
    assert_eq!(count(&ctx.db, EventStatus::Fail).await, 0);
    eprintln!(
        "{:?}: {N} events, 3 workers, claims lost: {lost}",
        ctx.backend
    );
}

async fn crash_after_claim_is_reclaimed(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-C").await;
    // Instance A claims, then "dies": it never finishes.
    claim_by_hand(db, &[id], "dead-a").await;
    let publisher = ScriptedPublisher::ok();
    let b =
        Worker::new(ctx.pool(2).await, publisher.clone(), fast_config("alive-b")).expect("worker");
    // While the lease is fresh nothing is reclaimed, even with an old next_retry_time.
    age(db, id, Column::NextRetryTime, Duration::from_secs(3600)).await;
    assert_eq!(b.reclaim_once().await.expect("reclaim"), 0);
    assert_eq!(event(db, id).await.claim_owner.as_deref(), Some("dead-a"));
    // Once claimed_at is older than the lease (10 s), B reclaims and publishes it.
    age(db, id, Column::ClaimedAt, Duration::from_secs(11)).await;
    assert_eq!(b.reclaim_once().await.expect("reclaim"), 1);
    let e = event(db, id).await;
    assert_eq!(
        (e.status, e.claim_owner, e.claimed_at),
        (EventStatus::Wait, None, None)
    );
    let round = b.run_once(&CancellationToken::new()).await.expect("round");
    assert_eq!(round.published, 1);
    let e = event(db, id).await;
    assert_eq!(
        (e.status, e.claim_owner.as_deref().map(common::instance_of)),
        (EventStatus::Success, Some("alive-b"))
    );
    assert_eq!(
        publisher
            .inner
            .distinct_ids()
            .into_iter()
            .collect::<Vec<_>>(),
        vec![id]
    );
}

async fn always_failing_backs_off_then_dead_letters(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-F").await;
    let config = fast_config("w-fail");
    let base = config.retry.backoff_base;
    let worker = Worker::new(
        ctx.pool(2).await,
        ScriptedPublisher::failing_all(false),
        config,
    )
    .expect("worker");
    let cancel = CancellationToken::new();
    for n in 1..=3u32 {
        let round = worker.run_once(&cancel).await.expect("round");
        assert_eq!(round.retried, 1, "attempt {n}: {round:?}");
        let e = event(db, id).await;
        assert_eq!((e.status, e.retry_count), (EventStatus::Wait, n as i32));
        assert_eq!(
            e.last_error.as_deref(),
            Some("retryable: scripted broker outage")
        );
        // The release wrote next_retry_time and update_time from the same database "now".
        let backoff = (e.next_retry_time - e.update_time)
            .to_std()
            .expect("positive");
        assert_eq!(backoff, base * n * n, "attempt {n}");
        // Not due yet: the next round does not touch it.
        assert_eq!(worker.run_once(&cancel).await.expect("round").claimed, 0);
        // Make it due instead of sleeping out the back-off.
        age(db, id, Column::NextRetryTime, Duration::ZERO).await;
    }
    let round = worker.run_once(&cancel).await.expect("round");
    assert_eq!(round.dead_lettered, 1);
    let e = event(db, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Fail, 4));

    // A permanent error is a dead letter at once.
    let id = new_event(db, "ORD-P").await;
    let worker = Worker::new(
        ctx.pool(2).await,
        ScriptedPublisher::failing_all(true),
        fast_config("w-perm"),
    )
    .expect("worker");
    let round = worker.run_once(&cancel).await.expect("round");
    assert_eq!(round.dead_lettered, 1);
    let e = event(db, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Fail, 1));
    assert_eq!(
        e.last_error.as_deref(),
        Some("permanent: scripted permanent failure")
    );
}

/// Refuses every send because of its own configuration (rejected credentials, say).
struct Misconfigured;

#[async_trait::async_trait]
impl Publisher for Misconfigured {
    async fn publish(
        &self,
        _: &sea_orm_outbox::OutboxMessage,
    ) -> Result<(), sea_orm_outbox::PublishError> {
        Err(sea_orm_outbox::PublishError::configuration(
            "credentials rejected",
        ))
    }
}

/// A configuration fault never counts as an attempt: however often it is met, the event goes
/// back to WAIT with retry_count 0 (never FAIL), due after the policy's max back-off capped at
/// 60 s, and is delivered once the publisher is fixed.
async fn configuration_fault_is_not_an_attempt(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-C").await;
    let config = fast_config("w-conf"); // max back-off 60 s
    let worker = Worker::new(ctx.pool(2).await, Arc::new(Misconfigured), config).expect("worker");
    let cancel = CancellationToken::new();
    for n in 1..=5 {
        let round = worker.run_once(&cancel).await.expect("round");
        assert_eq!(
            (round.config_faults, round.retried, round.dead_lettered),
            (1, 0, 0),
            "attempt {n}: {round:?}"
        );
        let e = event(db, id).await;
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Wait, 0),
            "attempt {n}"
        );
        assert_eq!(
            e.last_error.as_deref(),
            Some("configuration: credentials rejected")
        );
        assert_eq!(e.claim_owner, None);
        let delay = (e.next_retry_time - e.update_time)
            .to_std()
            .expect("positive");
        assert_eq!(delay, Duration::from_secs(60), "attempt {n}");
        assert_eq!(worker.run_once(&cancel).await.expect("round").claimed, 0);
        age(db, id, Column::NextRetryTime, Duration::ZERO).await;
    }
    assert_eq!(worker.summary().config_faults, 5);
    let fixed = Worker::new(
        ctx.pool(2).await,
        ScriptedPublisher::ok(),
        fast_config("w-ok"),
    )
    .expect("worker");
    assert_eq!(fixed.run_once(&cancel).await.expect("round").published, 1);
    assert_eq!(event(db, id).await.status, EventStatus::Success);
}

async fn one_failure_does_not_stop_the_round(ctx: &TestContext) {
    let db = &ctx.db;
    insert_many(db, "ORD", 20).await;
    let publisher = ScriptedPublisher::failing("ORD-7");
    let worker =
        Worker::new(ctx.pool(2).await, publisher.clone(), fast_config("w")).expect("worker");
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!((round.claimed, round.published, round.retried), (20, 19, 1));
    assert_eq!(count(db, EventStatus::Success).await, 19);
    let failed = event_by_biz_no(db, "ORD-7").await;
    assert_eq!((failed.status, failed.retry_count), (EventStatus::Wait, 1));
}

async fn hook_writes_the_event_in_the_same_transaction(ctx: &TestContext) {
    use sea_orm::ActiveModelTrait;
    let db = &ctx.db;
    let txn = db.begin().await.expect("begin");
    let saved = hooked_order::new("ORD-H1")
        .insert(&txn)
        .await
        .expect("insert");
    txn.commit().await.expect("commit");
    let events = Events::find().all(db).await.expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, format!(r#"{{"orderId":{}}}"#, saved.id));

    let txn = db.begin().await.expect("begin");
    hooked_order::new("ORD-H2")
        .insert(&txn)
        .await
        .expect("insert");
    txn.rollback().await.expect("rollback");
    assert_eq!(
        hooked_order::Entity::find()
            .count(db)
            .await
            .expect("orders"),
        1
    );
    assert_eq!(Events::find().count(db).await.expect("events"), 1);

    // An invalid event fails the save, and the transaction writes nothing.
    let txn = db.begin().await.expect("begin");
    let err = hooked_order::new("")
        .insert(&txn)
        .await
        .expect_err("empty biz_no");
    assert!(err.to_string().contains("biz_no"), "{err}");
    drop(txn);
    assert_eq!(
        hooked_order::Entity::find()
            .count(db)
            .await
            .expect("orders"),
        1
    );
}

/// A publisher that takes `delay` per message and counts the sends it started.
struct SlowPublisher {
    delay: Duration,
    started: std::sync::atomic::AtomicUsize,
    inner: InMemoryPublisher,
}

#[async_trait::async_trait]
impl Publisher for SlowPublisher {
    async fn publish(
        &self,
        m: &sea_orm_outbox::OutboxMessage,
    ) -> Result<(), sea_orm_outbox::PublishError> {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.inner.publish(m).await
    }
}

async fn cancellation_finishes_the_send_in_flight(ctx: &TestContext) {
    let db = &ctx.db;
    insert_many(db, "ORD", 10).await;
    let publisher = Arc::new(SlowPublisher {
        delay: Duration::from_millis(300),
        started: Default::default(),
        inner: InMemoryPublisher::new(),
    });
    // Two slots: two sends in flight at the cancellation, the other events still unsent.
    let config = fast_config("w-stop").send_concurrency(2);
    let fleet = Fleet::start(ctx, 2, publisher.clone(), [config]).await;
    let started = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(5),
        || async { publisher.started.load(std::sync::atomic::Ordering::SeqCst) >= 2 },
    )
    .await;
    assert!(started);
    let cancelled_at = std::time::Instant::now();
    let summary = fleet.stop().await.remove(0);
    // The send in flight finished and was recorded; no new send started; the claimed but
    // unsent events went back to WAIT at once (not after the 10 s lease); nothing is SENDING.
    eprintln!(
        "{:?}: stopped {} ms after cancel: {summary:?}",
        ctx.backend,
        cancelled_at.elapsed().as_millis()
    );
    assert_eq!(summary.published as usize, publisher.inner.len());
    assert_eq!(
        summary.claimed,
        summary.published + summary.released,
        "{summary:?}"
    );
    assert!(
        summary.published >= 2 && summary.published < 10,
        "{summary:?}"
    );
    assert_eq!(count(db, EventStatus::Sending).await, 0);
    assert_eq!(count(db, EventStatus::Success).await, summary.published);
    assert_eq!(count(db, EventStatus::Wait).await, 10 - summary.published);
    for e in Events::find()
        .filter(Column::Status.eq("WAIT"))
        .all(db)
        .await
        .expect("rows")
    {
        assert_eq!(
            (e.retry_count, e.claim_owner),
            (0, None),
            "handed back unchanged"
        );
    }
    // Another instance publishes the rest at once; nothing is published twice.
    let other = ScriptedPublisher::ok();
    let w2 = Worker::new(ctx.pool(2).await, other.clone(), fast_config("w-next")).expect("worker");
    w2.run_once(&CancellationToken::new()).await.expect("round");
    assert_eq!(count(db, EventStatus::Success).await, 10);
    let mut all: Vec<i64> = publisher
        .inner
        .messages()
        .iter()
        .chain(other.inner.messages().iter())
        .map(|m| m.event_id)
        .collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(
        (n, all.len()),
        (10, 10),
        "each event published exactly once"
    );
}
