//! SQLite as the embedded default: business transactions that read
//! and then write, next to running relays, must wait for the database's one write lock, never
//! fail at once with `database is locked`.
//!
//! Each scenario runs on a fresh file database in WAL mode (as `TestContext` and the demo make
//! it): W writer tasks on the application's pool (connected with the README's options: a busy
//! timeout on every connection), each doing many transactions of `SELECT` (count its orders),
//! insert an order, `with_event`, commit; R relays (`Worker`s with their own
//! pools, 20 ms polls) publishing to an in-memory publisher. Afterwards every committed event
//! must be published exactly once and nothing else may exist.
//!
//! The deferred figures (`db.begin()`, what an adopter writes first) are printed for the notes
//! (`figure: ...` lines; RELIABILITY.md), not asserted: they depend on timing.
//! `cargo test --test sqlite_locking -- --test-threads=1 --nocapture` shows them.
mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{order, test_config, Backend, Fleet, TestContext};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, TransactionTrait,
};
use sea_orm_outbox::event_record::Entity as Events;
use sea_orm_outbox::{
    begin_write, DbErrorKind, EventStatus, InMemoryPublisher, NewEvent, OutboxError, OutboxExt,
    Publisher,
};

/// The kind of a database error, as the library judges it ([`OutboxError::db_kind`]).
fn db_error_kind(err: &DbErr) -> DbErrorKind {
    OutboxError::Db(err.clone())
        .db_kind()
        .expect("a database error has a kind")
}

/// Transactions each writer runs per scenario.
const PER_WRITER: usize = 100;

backend_tests!(begin_write_is_a_plain_transaction);

/// How a writer begins its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    /// `db.begin()`: SQLite `BEGIN` (deferred).
    Deferred,
    /// `sea_orm_outbox::begin_write`: SQLite `BEGIN IMMEDIATE`.
    Write,
}

/// What the writers of one scenario saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Event ids of the transactions whose commit returned Ok.
    committed: Vec<i64>,
    /// `database is locked` failures (SQLite busy / locked), by the step that failed and the
    /// extended result code.
    locked: BTreeMap<String, usize>,
    /// Any other failure, with its step.
    other: Vec<String>,
    /// Wall time of the writers.
    elapsed: Duration,
    /// The longest committed transaction, waits for the lock included.
    longest_ok: Duration,
    /// The longest time a transaction took to fail with `database is locked`.
    longest_locked: Duration,
    /// Database errors the relays met (their statements wait for the lock too).
    relay_errors: u64,
}

impl Outcome {
    fn locked_total(&self) -> usize {
        self.locked.values().sum()
    }
}

/// A failed step of a writer transaction.
struct Failed {
    step: &'static str,
    locked: bool,
    /// SQLite's extended result code, named: 5 `SQLITE_BUSY` (another connection holds the
    /// write lock), 517 `SQLITE_BUSY_SNAPSHOT` (another connection committed since this
    /// transaction's read).
    code: String,
    text: String,
}

impl Failed {
    /// The key of [`Outcome::locked`].
    fn key(&self) -> String {
        format!("{} {}", self.step, self.code)
    }
}

/// The named SQLite result code of `e`, if it carries one.
fn sqlite_code(e: &DbErr) -> String {
    use sea_orm::RuntimeErr;
    let code = match e {
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => e
            .as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.into_owned()),
        _ => None,
    };
    match code.as_deref() {
        Some("5") => "SQLITE_BUSY".into(),
        Some("517") => "SQLITE_BUSY_SNAPSHOT".into(),
        Some(c) => format!("code {c}"),
        None => "no code".into(),
    }
}

fn db_failed(step: &'static str) -> impl Fn(DbErr) -> Failed {
    move |e| Failed {
        step,
        locked: db_error_kind(&e) == DbErrorKind::LockTimeout
            || e.to_string().contains("database is locked"),
        code: sqlite_code(&e),
        text: e.to_string(),
    }
}

fn outbox_failed(step: &'static str) -> impl Fn(OutboxError) -> Failed {
    move |e| Failed {
        step,
        locked: e.db_kind() == Some(DbErrorKind::LockTimeout)
            || e.to_string().contains("database is locked"),
        code: match &e {
            OutboxError::Db(d) | OutboxError::TableMissing(d) => sqlite_code(d),
            _ => "no code".into(),
        },
        text: e.to_string(),
    }
}

/// One business transaction of writer `w`: select, insert order `W<w>-<i>`, `with_event`,
/// commit. Returns the event id.
async fn business_transaction(
    db: &DatabaseConnection,
    begin: Begin,
    w: usize,
    i: usize,
) -> Result<i64, Failed> {
    let txn = match begin {
        Begin::Deferred => db.begin().await,
        Begin::Write => begin_write(db).await,
    }
    .map_err(db_failed("begin"))?;
    // The read that makes the transaction a reader first (a deferred one then has a snapshot).
    let mine = order::Entity::find()
        .filter(order::Column::OrderNo.starts_with(format!("W{w}-")))
        .count(&txn)
        .await
        .map_err(db_failed("select"))?;
    let saved = order::new(&format!("W{w}-{i:04}"), 100 + mine as i64)
        .insert(&txn)
        .await
        .map_err(db_failed("insert order"))?;
    let event = order::created_event(&saved).map_err(outbox_failed("event"))?;
    let id = txn
        .with_event(event)
        .await
        .map_err(outbox_failed("with_event"))?;
    txn.commit().await.map_err(db_failed("commit"))?;
    Ok(id)
}

/// Busy timeout of the writers' connections: the README's connect options, with room for the
/// fsync stalls of a shared, loaded machine (one run there saw 4 `BEGIN IMMEDIATE` of 400
/// starve past sqlx's default 5 s).
const WRITER_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The writers' pool of `max` connections to `url`, connected as the README recommends: the
/// busy timeout set on every connection ([`WRITER_BUSY_TIMEOUT`]; the file is already in WAL
/// mode).
async fn writers_pool(url: &str, max: u32) -> DatabaseConnection {
    let mut opt = sea_orm::ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| o.busy_timeout(WRITER_BUSY_TIMEOUT));
    sea_orm::Database::connect(opt)
        .await
        .expect("writers' pool")
}

/// `writers` writers beginning with `begin` next to `relays` relays, on a fresh database;
/// checks that every committed event (and only those) was published exactly once, and
/// returns what the writers saw.
async fn scenario(label: &str, begin: Begin, writers: usize, relays: usize) -> Outcome {
    let ctx = TestContext::new(Backend::Sqlite, label).await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(
        &ctx,
        4,
        publisher.clone() as Arc<dyn Publisher>,
        (0..relays).map(|r| test_config(&format!("relay-{r}"))),
    )
    .await;
    assert!(fleet.started(Duration::from_secs(10)).await, "relays start");

    let db = writers_pool(&ctx.url, writers as u32).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut results = Vec::with_capacity(PER_WRITER);
                for i in 0..PER_WRITER {
                    let t = Instant::now();
                    let r = business_transaction(&db, begin, w, i).await;
                    results.push((r, t.elapsed()));
                }
                results
            })
        })
        .collect();
    let mut out = Outcome::default();
    for t in tasks {
        for (r, took) in t.await.expect("writer task") {
            match r {
                Ok(id) => {
                    out.committed.push(id);
                    out.longest_ok = out.longest_ok.max(took);
                }
                Err(f) if f.locked => {
                    *out.locked.entry(f.key()).or_default() += 1;
                    out.longest_locked = out.longest_locked.max(took);
                }
                Err(f) => out.other.push(format!("{}: {}", f.step, f.text)),
            }
        }
    }
    out.elapsed = started.elapsed();
    db.close().await.ok();

    // Without relays during the writes (the writers-alone figure), one relay delivers after.
    let fleet = if relays == 0 {
        fleet.stop().await;
        let drain = [test_config("relay-drain")];
        Fleet::start(&ctx, 4, publisher.clone() as Arc<dyn Publisher>, drain).await
    } else {
        fleet
    };
    let n = out.committed.len() as u64;
    let delivered = common::wait_for_success(&ctx.db, n, Duration::from_secs(60)).await;
    let summaries = fleet.stop().await;
    out.relay_errors = summaries.iter().map(|s| s.errors).sum();
    assert!(
        delivered,
        "{label}: {n} committed events SUCCESS; relays: {summaries:?}"
    );
    // Nothing of a failed transaction exists: no order, no event.
    assert_eq!(common::count_written(&ctx.db).await, n);
    assert_eq!(
        order::Entity::find().count(&ctx.db).await.expect("count"),
        n
    );
    assert_eq!(common::count(&ctx.db, EventStatus::Success).await, n);
    // Every committed event published exactly once.
    let committed: HashSet<i64> = out.committed.iter().copied().collect();
    assert_eq!(
        publisher.distinct_ids(),
        committed,
        "{label}: published ids"
    );
    assert_eq!(publisher.len(), committed.len(), "{label}: no duplicates");
    ctx.cleanup().await;
    out
}

/// The `figure:` line of one scenario.
fn figure(begin: Begin, writers: usize, relays: usize, out: &Outcome) {
    println!(
        "figure: sqlite {begin:?} writers={writers} relays={relays} transactions={} \
         committed={} database_is_locked={} {:?} other_errors={} writers_elapsed_ms={} \
         longest_committed_ms={} longest_failed_ms={} relay_errors={}",
        writers * PER_WRITER,
        out.committed.len(),
        out.locked_total(),
        out.locked,
        out.other.len(),
        out.elapsed.as_millis(),
        out.longest_ok.as_millis(),
        out.longest_locked.as_millis(),
        out.relay_errors,
    );
}

/// 4 writers that begin with `begin_write` (`BEGIN IMMEDIATE`) next to 3 relays:
/// no `database is locked` reaches a writer; every event is published exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_immediate_writers_wait_for_relays() {
    if !common::selected(Backend::Sqlite, "sqlite_immediate_writers_wait_for_relays") {
        return;
    }
    let out = scenario("sqlite_immediate_run", Begin::Write, 4, 3).await;
    figure(Begin::Write, 4, 3, &out);
    assert_eq!(
        out.locked_total(),
        0,
        "no `database is locked` reaches a writer: {:?}",
        out.locked
    );
    assert!(out.other.is_empty(), "other writer errors: {:?}", out.other);
    assert_eq!(out.committed.len(), 4 * PER_WRITER);
    assert_eq!(
        out.relay_errors, 0,
        "the relays' statements wait for the lock too"
    );
}

/// The same scenario with `db.begin()` (deferred), for the figures: how many writer
/// transactions fail with `database is locked` with 4 writers + 3 relays, 1 writer + 3 relays
/// and 4 writers alone. Asserts only what holds whatever the timing: the failures are
/// `database is locked` alone, and every committed event is published exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deferred_writers_figures() {
    if !common::selected(Backend::Sqlite, "sqlite_deferred_writers_figures") {
        return;
    }
    for (writers, relays) in [(4, 3), (1, 3), (4, 0)] {
        let out = scenario("sqlite_deferred_run", Begin::Deferred, writers, relays).await;
        figure(Begin::Deferred, writers, relays, &out);
        // A deferred writer may fail with `database is locked`, with nothing else.
        assert!(out.other.is_empty(), "other writer errors: {:?}", out.other);
    }
}

/// `begin_write` is `BEGIN` on Postgres and MariaDB and `BEGIN IMMEDIATE` on SQLite: a commit
/// keeps the event, a rollback drops it, and inside a transaction it opens a savepoint.
async fn begin_write_is_a_plain_transaction(ctx: &TestContext) {
    let db = &ctx.db;
    let txn = begin_write(db).await.expect("begin_write");
    let kept = txn
        .with_event(NewEvent::raw("BW-1", "ORDER_CREATED", "{}"))
        .await
        .expect("event");
    let inner = begin_write(&txn).await.expect("savepoint");
    inner
        .with_event(NewEvent::raw("BW-2", "ORDER_CREATED", "{}"))
        .await
        .expect("event");
    inner.rollback().await.expect("rollback to savepoint");
    txn.commit().await.expect("commit");

    let txn = begin_write(db).await.expect("begin_write");
    txn.with_event(NewEvent::raw("BW-3", "ORDER_CREATED", "{}"))
        .await
        .expect("event");
    txn.rollback().await.expect("rollback");

    let ids: Vec<i64> = Events::find()
        .all(db)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, vec![kept]);
}

/// An idle relay's rounds take no write lock: 3 relays polling an empty outbox every 20 ms
/// while 1 writer runs deferred transactions (select, insert an order, commit; no event, so
/// the relays stay idle) for 1.5 s: none fails with `database is locked`. (A claim `UPDATE`
/// takes the lock even when it matches no row; the relay reads first whether anything is
/// due.) The relays' first heartbeats are written before the writer starts: a heartbeat is
/// the one write of an idle relay, once per heartbeat interval (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_idle_relays_take_no_write_lock() {
    if !common::selected(Backend::Sqlite, "sqlite_idle_relays_take_no_write_lock") {
        return;
    }
    let ctx = TestContext::new(Backend::Sqlite, "sqlite_idle").await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(
        &ctx,
        4,
        publisher.clone() as Arc<dyn Publisher>,
        (0..3).map(|r| test_config(&format!("relay-{r}"))),
    )
    .await;
    assert!(fleet.started(Duration::from_secs(10)).await, "relays start");
    let beating = common::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let relays = sea_orm_outbox::ops::relays(&sea_orm_outbox::Outbox::default(), &ctx.db)
                .await
                .expect("relays");
            relays.iter().filter(|r| r.alive).count() == 3
        },
    )
    .await;
    assert!(beating, "the relays wrote their first heartbeats");
    let (mut transactions, mut locked, mut other) = (0usize, BTreeMap::new(), Vec::new());
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let result = async {
            let txn = ctx.db.begin().await.map_err(db_failed("begin"))?;
            let n = order::Entity::find()
                .count(&txn)
                .await
                .map_err(db_failed("select"))?;
            order::new(&format!("IDLE-{transactions:05}"), n as i64)
                .insert(&txn)
                .await
                .map_err(db_failed("insert order"))?;
            txn.commit().await.map_err(db_failed("commit"))
        }
        .await;
        transactions += 1;
        match result {
            Ok(()) => {}
            Err(f) if f.locked => *locked.entry(f.key()).or_default() += 1,
            Err(f) => other.push(format!("{}: {}", f.step, f.text)),
        }
    }
    let summaries = fleet.stop().await;
    let rounds: u64 = summaries.iter().map(|s| s.rounds).sum();
    println!(
        "figure: sqlite idle relays=3 relay_rounds={rounds} deferred writer transactions={transactions} \
         database_is_locked={} {locked:?}",
        locked.values().sum::<usize>()
    );
    assert!(other.is_empty(), "other writer errors: {other:?}");
    assert!(
        locked.is_empty(),
        "an idle relay held the write lock: {locked:?}"
    );
    assert!(rounds >= 30, "the relays polled meanwhile: {summaries:?}");
    assert!(publisher.is_empty());
    ctx.cleanup().await;
}
