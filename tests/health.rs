//! Liveness another instance can see, on Postgres, MariaDB and SQLite (see `tests/common`):
//! the gauges and `ops::health` say "failing" when a publisher fails every send (while the
//! overdue age stays near 0: failed events sit in back-off), a worker whose task was aborted
//! is reported stopped by another worker and by `ops::relays` within its heartbeat timeout,
//! `Worker::health` reports a misconfigured publisher, and (Postgres, MariaDB) a transaction
//! holding a snapshot degrades the health, naming its connection.
//!
//! Timed assertions are bounds on detection delays, measured and printed: each check polls
//! every 50 ms until its deadline.
mod common;
#[path = "support/prom.rs"]
mod prom;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{test_config, Backend, ScriptedPublisher, TestContext};
use sea_orm::{ConnectionTrait, DatabaseConnection, IsolationLevel, TransactionTrait};
use sea_orm_migration::SchemaManager;
use sea_orm_outbox::metrics as m;
use sea_orm_outbox::ops::{self, HealthCode, HealthStatus, HealthThresholds};
use sea_orm_outbox::{
    CancellationToken, NewEvent, Outbox, OutboxMessage, PublishError, Publisher, RetryPolicy,
    Worker, WorkerConfig,
};

backend_tests!(
    a_failing_publisher_shows_in_the_undelivered_age_and_health,
    an_aborted_worker_is_reported_stopped_within_its_heartbeat_timeout,
    worker_health_reports_a_misconfigured_publisher,
    recent_dead_letters_degrade_health,
);

backend_test!(
    postgres_a_long_transaction_degrades_health: Postgres, "long_txn" => a_long_transaction_degrades_health;
    mariadb_a_long_transaction_degrades_health: MySql, "long_txn" => a_long_transaction_degrades_health;
);

/// The workers' heartbeat interval in these tests.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// When an instance counts as stopped: three heartbeats.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Between two checks of a polled condition.
const POLL: Duration = Duration::from_millis(50);
/// Between two reads of `ops::health` on MariaDB: InnoDB refills `innodb_trx` only when it was
/// last read more than 100 ms before, so tests that read it more often, together, would freeze
/// it for each other.
const HEALTH_POLL: Duration = Duration::from_millis(250);

/// An outbox table of this test's own (`<name>_<backend>`), so that its gauges are its own in
/// this process.
async fn own_outbox(ctx: &TestContext, name: &str) -> Outbox {
    let table = format!("{name}_{:?}", ctx.backend).to_lowercase();
    let manager = SchemaManager::new(&ctx.db);
    sea_orm_outbox::migration::create_outbox_table(&manager, &table)
        .await
        .expect("create the test's outbox table");
    let outbox = Outbox::new().table(&table).expect("a valid name");
    common::observe_deletions(&ctx.db, &outbox).await;
    outbox
}

/// A worker of `outbox` running in a task of its own, on a pool of its own.
async fn start(
    ctx: &TestContext,
    outbox: &Outbox,
    publisher: Arc<dyn Publisher>,
    config: WorkerConfig,
    cancel: &CancellationToken,
) -> (
    Arc<Worker>,
    tokio::task::JoinHandle<sea_orm_outbox::WorkerSummary>,
) {
    let worker = Arc::new(
        outbox
            .worker(ctx.pool(5).await, publisher, config)
            .expect("worker"),
    );
    let (w, cancel) = (worker.clone(), cancel.clone());
    (worker, tokio::spawn(async move { w.run(cancel).await }))
}

/// Waits until `ops::relays` lists every one of `ids` alive.
async fn alive(db: &DatabaseConnection, outbox: &Outbox, ids: &[&str]) -> bool {
    common::wait_until(Duration::from_secs(10), POLL, || async {
        let relays = ops::relays(outbox, db).await.expect("relays");
        ids.iter()
            .all(|id| relays.iter().any(|r| r.instance_id == *id && r.alive))
    })
    .await
}

/// Writes an event every 100 ms until `cancel`; returns when the first is written (and when
/// its insert began, no later than its `create_time`).
async fn write_steadily(
    db: DatabaseConnection,
    outbox: Outbox,
    cancel: CancellationToken,
) -> Instant {
    let first = Instant::now();
    outbox
        .with_event(&db, NewEvent::raw("E-0", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    tokio::spawn(async move {
        for i in 1.. {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            let event = NewEvent::raw(format!("E-{i}"), "ORDER_CREATED", "{}");
            outbox.with_event(&db, event).await.expect("write");
        }
    });
    first
}

/// Events keep failing (and backing off, up to 100 retries): within two heartbeats of the
/// oldest event turning 3 s old, `outbox_oldest_undelivered_age_seconds` is over 3 s and
/// `ops::health` (threshold 3 s) is failing for it, while the overdue age stays below 1 s.
async fn a_failing_publisher_shows_in_the_undelivered_age_and_health(ctx: &TestContext) {
    let handle = prom::install(None);
    let outbox = own_outbox(ctx, "hfail").await;
    let table = outbox.table_name();
    let retry = RetryPolicy::new(100, Duration::from_secs(1), Duration::from_secs(60));
    let config = test_config("failing")
        .heartbeat_interval(HEARTBEAT)
        .retry(retry);
    let cancel = CancellationToken::new();
    let publisher = ScriptedPublisher::failing_all(false);
    let (_, task) = start(ctx, &outbox, publisher, config, &cancel).await;
    assert!(
        alive(&ctx.db, &outbox, &["failing"]).await,
        "the worker beats"
    );

    let threshold = Duration::from_secs(3);
    let thresholds = HealthThresholds::default().undelivered_age(threshold);
    let first = write_steadily(ctx.pool(2).await, outbox, cancel.clone()).await;
    let crossing = first + threshold;
    let (mut gauge_at, mut health_at) = (None, None);
    let mut overdue_max: f64 = 0.0;
    let mut health_read = Instant::now() - HEALTH_POLL;
    while (gauge_at.is_none() || health_at.is_none())
        && Instant::now() < crossing + 2 * HEARTBEAT + Duration::from_secs(1)
    {
        let age = prom::gauge(handle, m::OLDEST_UNDELIVERED_AGE, table).unwrap_or(0.0);
        if gauge_at.is_none() && age > threshold.as_secs_f64() {
            gauge_at = Some(Instant::now());
        }
        let overdue = prom::gauge(handle, m::OLDEST_WAIT_AGE, table).unwrap_or(0.0);
        overdue_max = overdue_max.max(overdue);
        if health_at.is_none() && health_read.elapsed() >= HEALTH_POLL {
            health_read = Instant::now();
            let h = ops::health(&outbox, &ctx.db, &thresholds)
                .await
                .expect("health");
            let failing = h.status == HealthStatus::Failing
                && h.reasons
                    .iter()
                    .any(|r| r.code == HealthCode::UndeliveredTooOld);
            if failing {
                health_at = Some(Instant::now());
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let delay = |at: Option<Instant>| at.map(|at| at.saturating_duration_since(crossing));
    let (gauge_delay, health_delay) = (delay(gauge_at), delay(health_at));
    let backing_off = prom::gauge(handle, m::BACKOFF_EVENTS, table).unwrap_or(0.0);
    println!(
        "{:?}: after the oldest event turned 3 s old: gauge over 3 s after {gauge_delay:?}, \
         health failing after {health_delay:?}; highest overdue age {overdue_max:.3} s; \
         {backing_off} events backing off",
        ctx.backend
    );
    cancel.cancel();
    task.await.expect("worker task");
    assert!(
        gauge_delay.is_some_and(|d| d <= 2 * HEARTBEAT),
        "outbox_oldest_undelivered_age_seconds over 3 s within two heartbeats: {gauge_delay:?}"
    );
    assert!(
        health_delay.is_some_and(|d| d <= 2 * HEARTBEAT),
        "health failing within two heartbeats: {health_delay:?}"
    );
    assert!(
        overdue_max < 1.0,
        "failed events back off: the overdue age stays low ({overdue_max} s)"
    );
    assert!(backing_off > 0.0, "outbox_backoff_events counts them");
}

/// Two workers beat every second; one's task is aborted (no clean shutdown). `ops::relays`
/// reports it stopped, by name, and the survivor's gauge `outbox_relays_alive` drops to 1,
/// both within its heartbeat timeout (three heartbeats). When the survivor stops cleanly its row goes, the dead one's stays, and
/// `ops::health` is failing, naming the instance heard from last.
async fn an_aborted_worker_is_reported_stopped_within_its_heartbeat_timeout(ctx: &TestContext) {
    let handle = prom::install(None);
    let outbox = own_outbox(ctx, "hdead").await;
    let table = outbox.table_name();
    let cancel = CancellationToken::new();
    let config = |id: &str| test_config(id).heartbeat_interval(HEARTBEAT);
    let (_, doomed) = start(
        ctx,
        &outbox,
        ScriptedPublisher::ok(),
        config("doomed"),
        &cancel,
    )
    .await;
    let (survivor, kept) = start(
        ctx,
        &outbox,
        ScriptedPublisher::ok(),
        config("survivor"),
        &cancel,
    )
    .await;
    assert!(
        alive(&ctx.db, &outbox, &["doomed", "survivor"]).await,
        "both beat"
    );
    assert!(
        common::wait_until(Duration::from_secs(5), POLL, || async {
            prom::gauge(handle, m::RELAYS_ALIVE, table) == Some(2.0)
        })
        .await,
        "the gauge counts both"
    );

    doomed.abort();
    let aborted = Instant::now();
    assert!(doomed.await.is_err_and(|e| e.is_cancelled()));
    let (mut listed_at, mut gauge_at) = (None, None);
    while (listed_at.is_none() || gauge_at.is_none())
        && aborted.elapsed() < TIMEOUT + HEARTBEAT + Duration::from_secs(2)
    {
        let relays = ops::relays(&outbox, &ctx.db).await.expect("relays");
        let state = |id: &str| relays.iter().find(|r| r.instance_id == id).map(|r| r.alive);
        if listed_at.is_none() && state("doomed") == Some(false) {
            assert_eq!(state("survivor"), Some(true), "the survivor lives");
            listed_at = Some(aborted.elapsed());
        }
        if gauge_at.is_none() && prom::gauge(handle, m::RELAYS_ALIVE, table) == Some(1.0) {
            gauge_at = Some(aborted.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
    println!(
        "{:?}: the aborted worker was listed stopped after {listed_at:?}, the gauge said 1 \
         after {gauge_at:?} (heartbeat {HEARTBEAT:?}, timeout {TIMEOUT:?})",
        ctx.backend
    );
    let slack = Duration::from_millis(500);
    assert!(
        listed_at.is_some_and(|d| d <= TIMEOUT + slack),
        "ops::relays within the heartbeat timeout: {listed_at:?}"
    );
    assert!(
        gauge_at.is_some_and(|d| d <= TIMEOUT + slack),
        "the survivor's gauge within the heartbeat timeout: {gauge_at:?}"
    );
    let h = survivor.health().await.expect("worker health");
    assert!(
        h.reasons.iter().all(|r| r.code != HealthCode::NoRelayAlive),
        "{h:?}"
    );

    cancel.cancel();
    kept.await.expect("survivor task");
    let relays = ops::relays(&outbox, &ctx.db).await.expect("relays");
    let ids: Vec<(&str, bool)> = relays
        .iter()
        .map(|r| (r.instance_id.as_str(), r.alive))
        .collect();
    assert_eq!(ids, [("doomed", false)], "a clean stop deletes its own row");
    let h = ops::health(&outbox, &ctx.db, &HealthThresholds::default())
        .await
        .expect("health");
    assert_eq!(h.status, HealthStatus::Failing, "{h:?}");
    let dead = h
        .reasons
        .iter()
        .find(|r| r.code == HealthCode::NoRelayAlive)
        .unwrap_or_else(|| panic!("no relay alive: {h:?}"));
    assert!(dead.message.contains("doomed"), "{}", dead.message);
}

/// A publisher refusing every send for its own credentials.
struct Refusing;

#[async_trait]
impl Publisher for Refusing {
    async fn publish(&self, _: &OutboxMessage) -> Result<(), PublishError> {
        Err(PublishError::configuration("access key refused"))
    }
}

/// `Worker::health` is failing while the worker's publisher refuses sends for its
/// configuration; the table's own verdict (`ops::health`) knows nothing of it.
async fn worker_health_reports_a_misconfigured_publisher(ctx: &TestContext) {
    let outbox = own_outbox(ctx, "hconf").await;
    let cancel = CancellationToken::new();
    let config = test_config("refused").heartbeat_interval(HEARTBEAT);
    let (worker, task) = start(ctx, &outbox, Arc::new(Refusing), config, &cancel).await;
    outbox
        .with_event(&ctx.db, NewEvent::raw("C-1", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    assert!(
        common::wait_until(Duration::from_secs(10), POLL, || async {
            worker.summary().config_faults > 0
        })
        .await,
        "the publisher refused a send"
    );
    let h = worker.health().await.expect("worker health");
    cancel.cancel();
    task.await.expect("worker task");
    assert_eq!(h.status, HealthStatus::Failing, "{h:?}");
    let r = h
        .reasons
        .iter()
        .find(|r| r.code == HealthCode::PublisherMisconfigured)
        .unwrap_or_else(|| panic!("{h:?}"));
    assert!(r.message.contains("refused"), "{}", r.message);
    assert!(
        !r.message.contains("access key refused"),
        "no publisher text"
    );
}

/// An event the publisher refuses for good becomes a dead letter: `ops::health` is degraded
/// for it within the dead-letter window, and not once the window is shorter than its age.
async fn recent_dead_letters_degrade_health(ctx: &TestContext) {
    let outbox = own_outbox(ctx, "hdlq").await;
    let cancel = CancellationToken::new();
    let config = test_config("dlq").heartbeat_interval(HEARTBEAT);
    let publisher = ScriptedPublisher::failing_all(true);
    let (_, task) = start(ctx, &outbox, publisher, config, &cancel).await;
    assert!(alive(&ctx.db, &outbox, &["dlq"]).await, "a relay beats");
    outbox
        .with_event(&ctx.db, NewEvent::raw("D-1", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    let dead = common::wait_until(Duration::from_secs(10), POLL, || async {
        ops::backlog(&outbox, &ctx.db).await.expect("backlog").fail == 1
    })
    .await;
    assert!(dead, "a dead letter");
    let h = ops::health(&outbox, &ctx.db, &HealthThresholds::default())
        .await
        .expect("health");
    assert_eq!(h.status, HealthStatus::Degraded, "{h:?}");
    let r = &h.reasons[0];
    assert_eq!(r.code, HealthCode::RecentDeadLetters, "{h:?}");
    assert!(r.message.starts_with("1 event(s)"), "{}", r.message);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = HealthThresholds::default().dead_letter_window(Duration::from_millis(200));
    let h = ops::health(&outbox, &ctx.db, &short).await.expect("health");
    cancel.cancel();
    task.await.expect("worker task");
    assert_eq!(h.status, HealthStatus::Healthy, "{h:?}");
}

/// Another connection opens a REPEATABLE READ transaction and reads (MariaDB: and locks what
/// it read; its snapshot holds back vacuum or purge): once it is older than 2 s, `ops::health` is degraded for it, naming its
/// connection id (`pg_backend_pid()`, `CONNECTION_ID()`) and an age of at least 2 s.
async fn a_long_transaction_degrades_health(ctx: &TestContext) {
    let outbox = own_outbox(ctx, "hltx").await;
    let cancel = CancellationToken::new();
    let config = test_config("beside").heartbeat_interval(HEARTBEAT);
    let (_, task) = start(ctx, &outbox, ScriptedPublisher::ok(), config, &cancel).await;
    assert!(alive(&ctx.db, &outbox, &["beside"]).await, "a relay beats");

    // A transaction on a connection of its own that reads (Postgres, REPEATABLE READ: the
    // snapshot is the transaction's) and, for InnoDB to list it, locks what it read (a read-only
    // InnoDB transaction is not always in `innodb_trx`): the application's `orders`, empty.
    let holder = ctx.pool(1).await;
    let txn = holder
        .begin_with_config(Some(IsolationLevel::RepeatableRead), None)
        .await
        .expect("begin");
    let (pid_sql, read) = match ctx.backend {
        Backend::Postgres => (
            "SELECT pg_backend_pid()::int8 AS pid",
            "SELECT COUNT(*) AS n FROM orders",
        ),
        _ => (
            "SELECT CAST(CONNECTION_ID() AS SIGNED) AS pid",
            "SELECT COUNT(*) AS n FROM orders FOR UPDATE",
        ),
    };
    let row = txn.query_one_raw(stmt(ctx, pid_sql)).await.expect("pid");
    let pid: i64 = row.expect("a row").try_get("", "pid").expect("pid");
    txn.query_one_raw(stmt(ctx, read)).await.expect("a read");
    let opened = Instant::now();

    let limit = Duration::from_secs(2);
    let thresholds = HealthThresholds::default().transaction_age(limit);
    let named = format!("connection {pid} (");
    let mut found = None;
    let mut last = None;
    while found.is_none() && opened.elapsed() < limit + Duration::from_secs(5) {
        let h = ops::health(&outbox, &ctx.db, &thresholds)
            .await
            .expect("health");
        last = Some(h.clone());
        found = h
            .reasons
            .iter()
            .find(|r| r.code == HealthCode::LongTransaction && r.message.contains(&named))
            .map(|r| (h.status, r.status, r.message.clone()));
        if found.is_none() {
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }
    let reported_after = opened.elapsed();
    txn.rollback().await.expect("rollback");
    cancel.cancel();
    task.await.expect("worker task");
    let (status, reason_status, message) =
        found.unwrap_or_else(|| panic!("connection {pid} never named: {last:?}"));
    println!(
        "{:?}: named after {reported_after:?}: {message}",
        ctx.backend
    );
    assert_eq!(
        (status, reason_status),
        (HealthStatus::Degraded, HealthStatus::Degraded)
    );
    let age: f64 = message
        .split(&named)
        .nth(1)
        .and_then(|rest| rest.split(" open for ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|age| age.parse().ok())
        .unwrap_or_else(|| panic!("an age in: {message}"));
    assert!(age >= limit.as_secs_f64(), "{age} s in: {message}");
}

/// `sql` as a statement of `ctx`'s backend.
fn stmt(ctx: &TestContext, sql: &str) -> sea_orm::Statement {
    sea_orm::Statement::from_string(ctx.db_backend(), sql)
}
