//! Pool faults, on Postgres and MariaDB (SQLite keeps the application's pool: one writer, and
//! an in-memory database exists once per pool; see docs/pools.md):
//!
//! - the guard of the relay's pool closes a connection given back inside a transaction;
//! - an application that cancels its transactions mid-`begin` on the pool it hands the worker
//!   (sqlx 0.9.0 then returns connections with a transaction still open) does not reach the
//!   relay: nothing is published twice, nothing is left `SENDING`;
//! - an application holding every connection of its pool for twice the lease starves neither
//!   the lease renewal nor the outcome marks.
//!
//! A missing database fails the tests (see `tests/common`).
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::wait_until;
use common::{count, new_event, TestContext};
use sea_orm::sqlx::{self, Row};
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};
use sea_orm_outbox::{
    guarded_pool, CancellationToken, EventStatus, InMemoryPublisher, NewEvent, OutboxExt,
    OutboxMessage, PublishError, Publisher, Worker,
};
use tokio::sync::Notify;

backend_test!(
    postgres_guard_closes_a_connection_left_in_a_transaction:
        Postgres, "guard_leak" => guard_closes_a_connection_left_in_a_transaction;
    mariadb_guard_closes_a_connection_left_in_a_transaction:
        MySql, "guard_leak" => guard_closes_a_connection_left_in_a_transaction;
    postgres_guard_replaces_a_connection_that_died_while_idle:
        Postgres, "guard_idle" => guard_replaces_a_connection_that_died_while_idle;
    mariadb_guard_replaces_a_connection_that_died_while_idle:
        MySql, "guard_idle" => guard_replaces_a_connection_that_died_while_idle;
    postgres_cancelled_begins_do_not_reach_the_relay:
        Postgres, "cancelled_begins" => cancelled_begins_do_not_reach_the_relay;
    mariadb_cancelled_begins_do_not_reach_the_relay:
        MySql, "cancelled_begins" => cancelled_begins_do_not_reach_the_relay;
    postgres_cancelled_begins_on_a_guarded_shared_pool:
        Postgres, "cancelled_guarded" => cancelled_begins_on_a_guarded_shared_pool;
    mariadb_cancelled_begins_on_a_guarded_shared_pool:
        MySql, "cancelled_guarded" => cancelled_begins_on_a_guarded_shared_pool;
    postgres_a_full_application_pool_starves_no_renewal:
        Postgres, "full_pool" => a_full_application_pool_starves_no_renewal;
    mariadb_a_full_application_pool_starves_no_renewal:
        MySql, "full_pool" => a_full_application_pool_starves_no_renewal;
);

/// A bound on every wait: far above the time any of them takes when the test passes.
const WAIT: Duration = Duration::from_secs(60);

/// The server's id of the connection a statement on `db` runs on.
async fn session_id(db: &DatabaseConnection) -> i64 {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT) AS id",
        _ => "SELECT CAST(CONNECTION_ID() AS SIGNED) AS id",
    };
    db.query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("session id")
        .expect("a row")
        .try_get("", "id")
        .expect("id")
}

/// Whether the server still has a session `id`.
async fn session_exists(db: &DatabaseConnection, id: i64) -> bool {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => {
            format!("SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = {id}")
        }
        _ => format!("SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = {id}"),
    };
    let n: i64 = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("sessions")
        .expect("a row")
        .try_get("", "n")
        .expect("n");
    n > 0
}

/// Sends `sql` on one connection of `db`'s pool outside sqlx's transaction bookkeeping (as a
/// cancelled `begin()` leaves it), then gives the connection back.
async fn raw_on_one_connection(db: &DatabaseConnection, sql: &'static str) -> i64 {
    match db.get_database_backend() {
        DbBackend::Postgres => {
            let mut c = db
                .get_postgres_connection_pool()
                .acquire()
                .await
                .expect("acquire");
            let row = sqlx::raw_sql("SELECT CAST(pg_backend_pid() AS BIGINT)")
                .fetch_one(&mut *c)
                .await
                .expect("pid");
            sqlx::raw_sql(sql).execute(&mut *c).await.expect(sql);
            row.try_get(0).expect("pid")
        }
        _ => {
            let mut c = db
                .get_mysql_connection_pool()
                .acquire()
                .await
                .expect("acquire");
            let row = sqlx::raw_sql("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .fetch_one(&mut *c)
                .await
                .expect("id");
            sqlx::raw_sql(sql).execute(&mut *c).await.expect(sql);
            row.try_get(0).expect("id")
        }
    }
}

/// The guard: a connection given back inside a transaction is closed (its session ends); one
/// given back after a complete transaction is kept.
async fn guard_closes_a_connection_left_in_a_transaction(ctx: &TestContext) {
    let app = ctx.pool(2).await;
    let relay = guarded_pool(&app, 1).expect("pool");
    let kept = raw_on_one_connection(&relay, "BEGIN; SELECT 1; COMMIT").await;
    assert_eq!(
        session_id(&relay).await,
        kept,
        "a clean connection is reused"
    );
    let leaked = raw_on_one_connection(&relay, "BEGIN").await;
    assert_eq!(leaked, kept);
    let next = session_id(&relay).await;
    assert_ne!(
        next, leaked,
        "the leaked connection was not handed out again"
    );
    let gone = wait_until(WAIT, Duration::from_millis(20), || async {
        !session_exists(&ctx.db, leaked).await
    })
    .await;
    assert!(gone, "the leaked session {leaked} was closed");
}

/// The check before acquire: a connection idle for a second or longer whose session
/// ended meanwhile (a database restart, a pooler closing idle connections) is replaced before
/// it is handed out, so the statement does not fail.
async fn guard_replaces_a_connection_that_died_while_idle(ctx: &TestContext) {
    let app = ctx.pool(2).await;
    let relay = guarded_pool(&app, 1).expect("pool");
    let first = session_id(&relay).await;
    let kill = match ctx.backend {
        common::Backend::Postgres => format!("SELECT pg_terminate_backend({first})"),
        _ => format!("KILL {first}"),
    };
    ctx.db.execute_unprepared(&kill).await.expect("kill");
    let gone = wait_until(WAIT, Duration::from_millis(20), || async {
        !session_exists(&ctx.db, first).await
    })
    .await;
    assert!(gone, "the session {first} ended");
    // Not a race: the pool hands out a connection unchecked only while it has been idle for
    // less than a second (the guard's recheck after idling); this waits that long on purpose.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let next = session_id(&relay).await;
    assert_ne!(next, first, "a new connection replaced the dead one");
}

/// The application shares its pool of 2 with a worker (as the README's
/// `Worker::new(db.clone(), ..)` does) and runs 2,000 transactions (an order and its event),
/// each `begin()` under a timeout of 0 to 3 ms (up to twice the median `begin()`), so that many
/// are cancelled mid-`begin`. Every event whose commit returned Ok is published, none twice,
/// none is left `SENDING`, the relay meets no error, and no relay session is left inside a
/// transaction (Postgres: none of its sessions, named by `application_name`, idle in
/// transaction; MariaDB: no session of the database inside an InnoDB transaction).
async fn cancelled_begins_do_not_reach_the_relay(ctx: &TestContext) {
    let app = ctx.pool(2).await;
    cancelled_begins(ctx, app, common::test_config("leaky")).await
}

/// The README's advice for an application that wants one pool: build it with
/// `guarded_pool`, and hand it to the worker as `RelayPool::Shared`. The same 2,000 cancelled
/// begins on a pool of 3: the guard closes every connection left in a transaction before anyone
/// (the application or the relay) uses it again, and every connection whose cancelled command
/// left it out of step (it never answers the check), so the relay publishes each event once, as
/// on a pool of its own, and the pool never runs dry.
async fn cancelled_begins_on_a_guarded_shared_pool(ctx: &TestContext) {
    let app = guarded_pool(&ctx.pool(3).await, 3).expect("guarded pool");
    let config =
        common::test_config("guarded-shared").relay_pool(sea_orm_outbox::RelayPool::Shared);
    cancelled_begins(ctx, app, config).await
}

/// [`cancelled_begins_do_not_reach_the_relay`] with the application's pool `app` and the
/// worker's `config`.
async fn cancelled_begins(
    ctx: &TestContext,
    app: DatabaseConnection,
    config: sea_orm_outbox::WorkerConfig,
) {
    const N: usize = 2000;
    let publisher = Arc::new(InMemoryPublisher::new());
    let worker = Arc::new(Worker::new(app.clone(), publisher.clone(), config).expect("worker"));
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (w, c) = (worker.clone(), cancel.clone());
        async move { w.run(c).await }
    });
    // Timeouts up to twice the median `begin()` (at most 3 ms), so that about half of them
    // fire while the `BEGIN` is on its way (a fixed 0-3 ms cancels almost none on a quiet
    // machine, and almost all while the pool is still connecting on a busy one).
    let mut took = Vec::new();
    for _ in 0..50 {
        let t = std::time::Instant::now();
        let txn = app.begin().await.expect("begin");
        took.push(t.elapsed().as_micros() as u64);
        txn.rollback().await.expect("rollback");
    }
    took.sort_unstable();
    let span = (took[took.len() / 2] * 2).clamp(50, 3000);
    println!(
        "figure: cancelled_begins median_begin_us={} timeout_us=0..{span}",
        took[25]
    );
    let mut committed = HashSet::new();
    let mut cancelled = 0;
    // At least N begins, and on until 101 were cancelled (at most 5 N): how many timeouts
    // fire while the `BEGIN` is on its way depends on the machine's load.
    let mut i = 0;
    while i < N || (cancelled <= 100 && i < 5 * N) {
        i += 1;
        let biz_no = format!("LEAK-{i}");
        let micros = uuid::Uuid::new_v4().as_u128() as u64 % span;
        // The timeout covers the `begin()` alone: a web handler dropped while it waits.
        let txn = match tokio::time::timeout(Duration::from_micros(micros), app.begin()).await {
            Ok(Ok(txn)) => txn,
            Ok(Err(e)) => panic!("begin: {e}"),
            Err(_) => {
                cancelled += 1;
                continue;
            }
        };
        common::order::new(&biz_no, i as i64)
            .insert(&txn)
            .await
            .expect("order");
        txn.with_event(NewEvent::raw(biz_no.as_str(), "ORDER_CREATED", "{}"))
            .await
            .expect("event");
        if txn.commit().await.is_ok() {
            committed.insert(biz_no);
        }
    }
    println!(
        "figure: cancelled_begins backend={:?} committed={} cancelled={cancelled}",
        ctx.backend,
        committed.len()
    );
    assert!(
        cancelled > 100,
        "too few cancellations to prove anything: {cancelled}"
    );
    let published = wait_until(WAIT, Duration::from_millis(50), || async {
        let got: HashSet<String> = publisher.messages().into_iter().map(|m| m.biz_no).collect();
        committed.is_subset(&got)
            && count(&ctx.db, EventStatus::Wait).await == 0
            && count(&ctx.db, EventStatus::Sending).await == 0
    })
    .await;
    cancel.cancel();
    let s = run.await.expect("worker task");
    assert!(
        published,
        "committed events unpublished or rows left: {s:?}"
    );
    assert_eq!(publisher.duplicates(), 0, "nothing published twice: {s:?}");
    assert_eq!((s.errors, s.late_acks, s.reclaimed), (0, 0, 0), "{s:?}");
    if ctx.backend == common::Backend::Postgres {
        let rows = ctx
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!(
                    "SELECT COUNT(*) FILTER (WHERE application_name = '{relay}') AS relay, \
                     COUNT(*) FILTER (WHERE application_name <> '{relay}') AS app \
                     FROM pg_stat_activity WHERE datname = current_database() \
                     AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
                    relay = "sea-orm-outbox relay"
                ),
            ))
            .await
            .expect("sessions")
            .expect("row");
        let relay: i64 = rows.try_get("", "relay").expect("relay");
        let leaked: i64 = rows.try_get("", "app").expect("app");
        println!("figure: application sessions left idle in transaction={leaked}");
        assert_eq!(relay, 0, "no relay session idle in transaction");
    } else {
        // MariaDB names no sessions; count every session of this database still inside an
        // InnoDB transaction. The application's leaked `BEGIN`s leave none (its next `BEGIN`
        // on that connection commits the empty one), so any would be the relay's.
        let n: i64 = ctx
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::MySql,
                "SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t \
                 JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
                 WHERE p.DB = DATABASE() AND p.ID <> CONNECTION_ID()",
            ))
            .await
            .expect("transactions")
            .expect("row")
            .try_get("", "n")
            .expect("n");
        assert_eq!(n, 0, "no session left inside a transaction");
    }
}

/// Blocks the first send until released, counting every send.
struct Held {
    inner: InMemoryPublisher,
    in_flight: Notify,
    release: Notify,
    first: Mutex<bool>,
}

#[async_trait]
impl Publisher for Held {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let first = std::mem::replace(&mut *self.first.lock().expect("first"), false);
        if first {
            self.in_flight.notify_one();
            self.release.notified().await;
        }
        self.inner.publish(m).await
    }
}

/// The worker was handed the application's pool of 2; while a send is
/// in flight the application holds both connections (two open transactions) for twice the
/// lease. The lease renewal and the mark still run (on the relay's own pool), so a second
/// instance reclaims nothing: the event is delivered once, and no acknowledgement is late.
async fn a_full_application_pool_starves_no_renewal(ctx: &TestContext) {
    let lease = Duration::from_secs(2);
    let app = ctx.pool(2).await;
    let id = new_event(&ctx.db, "HELD").await;
    let publisher = Arc::new(Held {
        inner: InMemoryPublisher::new(),
        in_flight: Notify::new(),
        release: Notify::new(),
        first: Mutex::new(true),
    });
    let config = |owner: &str| {
        common::test_config(owner)
            .lease(lease)
            .send_timeout(lease * 4)
    };
    let sender =
        Arc::new(Worker::new(app.clone(), publisher.clone(), config("sender")).expect("w"));
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (w, c) = (sender.clone(), cancel.clone());
        async move { w.run(c).await }
    });
    tokio::time::timeout(WAIT, publisher.in_flight.notified())
        .await
        .expect("the send started");
    // The application takes every connection of its pool...
    let a = app.begin().await.expect("first");
    let b = app.begin().await.expect("second");
    // ...while another instance watches for an expired lease.
    let thief = Arc::new(
        Worker::new(ctx.pool(2).await, publisher.clone(), config("thief")).expect("thief"),
    );
    let thief_run = tokio::spawn({
        let (w, c) = (thief.clone(), cancel.clone());
        async move { w.run(c).await }
    });
    // The fault lasts twice the lease (a duration of the scenario, not a synchronisation).
    tokio::time::sleep(lease * 2).await;
    a.rollback().await.expect("rollback");
    b.rollback().await.expect("rollback");
    publisher.release.notify_one();
    let done = wait_until(WAIT, Duration::from_millis(20), || async {
        common::event(&ctx.db, id).await.status == EventStatus::Success
    })
    .await;
    cancel.cancel();
    let (s, t) = (run.await.expect("sender"), thief_run.await.expect("thief"));
    assert!(done, "{s:?} {t:?}");
    assert_eq!(publisher.inner.len(), 1, "delivered once");
    assert_eq!(
        (s.late_acks, t.late_acks, t.reclaimed, s.reclaimed),
        (0, 0, 0, 0),
        "{s:?} {t:?}"
    );
    assert_eq!(s.published, 1, "{s:?}");
}
