//! Faults and hostile timing: a relay whose clock is 15 minutes ahead, and a business
//! transaction that commits long after later events were published.
mod common;

use common::event;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Backend, TestContext};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, TransactionTrait};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::store::{self, dialect, Claim};
use sea_orm_outbox::{
    wait_until, CancellationToken, EventStatus, InMemoryPublisher, NewEvent, OutboxExt,
    RetryPolicy, Worker, WorkerConfig,
};

// Postgres and MariaDB only: SQLite runs inside the relay process, so its "database clock" is
// that process's clock (faking it fakes the database's too). SQLite instances share one host
// and so one kernel clock; only a per-process fake could set them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_relay_with_clock_ahead_reclaims_nothing_early() {
    common::run_on(
        Backend::Postgres,
        "clock_ahead",
        relay_with_clock_ahead_reclaims_nothing_early,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_relay_with_clock_ahead_reclaims_nothing_early() {
    common::run_on(
        Backend::MySql,
        "clock_ahead",
        relay_with_clock_ahead_reclaims_nothing_early,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_late_transaction_is_still_published() {
    common::run_on(
        Backend::Postgres,
        "late_txn",
        late_transaction_is_still_published,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_late_transaction_is_still_published() {
    common::run_on(
        Backend::MySql,
        "late_txn",
        late_transaction_is_still_published,
    )
    .await
}

/// A relay process started under libfaketime with its clock 15 minutes ahead runs reclaim
/// passes with a 10-minute lease: a lease taken just now by another instance stays untouched
/// (leases are judged by the database clock alone), while a lease that really is 11 minutes old
/// is reclaimed and published, which shows the skewed relay did run.
async fn relay_with_clock_ahead_reclaims_nothing_early(ctx: &TestContext) {
    let db = &ctx.db;
    let fresh = db
        .with_event(NewEvent::raw("FRESH", "T", "{}"))
        .await
        .expect("insert");
    let stale = db
        .with_event(NewEvent::raw("STALE", "T", "{}"))
        .await
        .expect("insert");
    for id in [fresh, stale] {
        assert_eq!(
            store::claim(db, id, 0, "alive-elsewhere")
                .await
                .expect("claim"),
            Claim::Won
        );
    }
    Events::update_many()
        .col_expr(
            Column::ClaimedAt,
            dialect::now_minus(db.get_database_backend(), Duration::from_secs(11 * 60)),
        )
        .filter(Column::Id.eq(stale))
        .exec(db)
        .await
        .expect("age");

    // libfaketime, preloaded into the relay itself (not through the `faketime` wrapper, so that
    // the signal below reaches the relay).
    let libfaketime = LIBFAKETIME
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.is_file())
        .expect("libfaketime (Debian package faketime) is needed; .ci/run installs it");
    let child = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("relay")
        .env("LD_PRELOAD", libfaketime)
        .env("FAKETIME", "+15m")
        .args([
            "--lease",
            "10m",
            "--reclaim-interval",
            "100ms",
            "--poll-delay",
            "100ms",
        ])
        .args(["--instance-id", "skewed-relay"])
        .env("DATABASE_URL", &ctx.url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the skewed relay");
    let published = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async { event(db, stale).await.status == EventStatus::Success },
    )
    .await;
    // Several more reclaim passes of the skewed relay.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().expect("relay output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(published, "the skewed relay did not run; stderr:\n{stderr}");
    let stale = event(db, stale).await;
    assert_eq!(
        (stale.retry_count, stale.claim_owner.as_deref()),
        (1, Some("skewed-relay")),
        "the really expired lease was reclaimed (one attempt) and sent by the skewed relay"
    );
    let fresh = event(db, fresh).await;
    assert_eq!(
        (
            fresh.status,
            fresh.retry_count,
            fresh.claim_owner.as_deref()
        ),
        (EventStatus::Sending, 0, Some("alive-elsewhere")),
        "a fresh lease was reclaimed early by a relay whose clock is ahead"
    );
}

/// Where Debian puts libfaketime.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// No cursor can skip an event: one whose transaction stays open while later events commit and
/// are published is published once it commits.
async fn late_transaction_is_still_published(ctx: &TestContext) {
    let db = &ctx.db;
    let publisher = std::sync::Arc::new(InMemoryPublisher::new());
    let cfg = WorkerConfig::default()
        .poll_delay(Duration::from_millis(20))
        .retry(RetryPolicy::default())
        .instance_id("relay");
    let worker = Worker::new(ctx.pool(4).await, publisher.clone(), cfg).expect("worker");
    let cancel = CancellationToken::new();
    let late = db.begin().await.expect("begin");
    let late_id = late
        .with_event(NewEvent::raw("LATE", "T", "{}"))
        .await
        .expect("insert");
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move { worker.run(cancel).await }
    });
    let mut later = Vec::new();
    for i in 0..5 {
        later.push(
            db.with_event(NewEvent::raw(format!("LATER-{i}"), "T", "{}"))
                .await
                .expect("insert"),
        );
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
    cancel.cancel();
    task.await.expect("task");
    assert!(published, "the late event was skipped");
    assert_eq!(event(db, late_id).await.status, EventStatus::Success);
    assert_eq!(publisher.duplicates(), 0);
}
