//! The maintenance services' `run_once`, called directly on an in-memory SQLite database: the
//! reclaimer works in bounded batches, the lease renewer reports lost leases, the monitor
//! writes the heartbeat and reads the backlog into the gauges. (Each statement runs on every backend in the driver's tests.)
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{
    ColumnTrait, ConnectOptions, Database, DatabaseConnection, EntityTrait, PaginatorTrait,
    QueryFilter,
};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox_entity::event_record::{Column, Entity as Events};
use sea_orm_outbox_entity::EventStatus;

use super::{LeaseRenewer, Monitor, Reclaimer};
use crate::driver::{self, Driver, RelayDb};
use crate::{NewEvent, OrderedPolicy, OutboxExt, RetryPolicy, WorkerConfig};

/// A migrated in-memory database (one connection: each would be a database of its own).
async fn database() -> DatabaseConnection {
    let mut opt = ConnectOptions::new("sqlite::memory:");
    opt.max_connections(1).sqlx_logging(false);
    let db = Database::connect(opt).await.expect("connect");
    sea_orm_outbox_migration::Migrator::up(&db, None)
        .await
        .expect("migrate");
    db
}

/// Writes `n` events and claims them all for `owner`; returns their ids.
async fn claimed(db: &DatabaseConnection, n: usize, owner: &str) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let event = NewEvent::raw(format!("M-{i}"), "ORDER_CREATED", "{}");
        ids.push(db.with_event(event).await.expect("insert"));
    }
    let got = driver::claim_batch(&RelayDb::extended(db.clone()), owner, n as u64)
        .await
        .expect("claim");
    assert_eq!(got.len(), n);
    ids
}

/// Ages the leases of `ids` by a minute (database clock).
async fn expire(db: &DatabaseConnection, ids: &[i64]) {
    let driver = Driver::of_db(db).expect("a known backend");
    Events::update_many()
        .col_expr(Column::ClaimedAt, driver.now_minus(Duration::from_secs(60)))
        .filter(Column::Id.is_in(ids.iter().copied()))
        .exec(db)
        .await
        .expect("age");
}

async fn count(db: &DatabaseConnection, status: EventStatus) -> u64 {
    Events::find()
        .filter(Column::Status.eq(status))
        .count(db)
        .await
        .expect("count")
}

fn reclaimer(db: &DatabaseConnection, batch_size: u64) -> Reclaimer {
    let config = WorkerConfig::default()
        .lease(Duration::from_secs(30))
        .retry(RetryPolicy::new(
            3,
            Duration::from_secs(5),
            Duration::from_secs(600),
        ));
    let mut reclaimer = Reclaimer::new(RelayDb::extended(db.clone()), &config);
    reclaimer.batch_size = batch_size;
    reclaimer
}

/// 25 expired leases, batches of 10: all reclaimed by one `run_once`, in three batches of two
/// guarded updates each.
#[tokio::test]
async fn reclaimer_reclaims_more_than_a_batch_in_several_statements() {
    let mut db = database().await;
    let ids = claimed(&db, 26, "died").await;
    expire(&db, &ids[..25]).await;
    let updates = Arc::new(AtomicUsize::new(0));
    db.set_metric_callback({
        let updates = updates.clone();
        move |info| {
            let sql = info.statement.sql.trim_start().to_lowercase();
            if sql.starts_with("update") {
                updates.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let reclaimer = reclaimer(&db, 10);
    let r = reclaimer.run_once().await.expect("reclaim");
    assert_eq!((r.requeued, r.dead_lettered), (25, 0));
    assert_eq!(updates.load(Ordering::SeqCst), 6, "batches of 10, 10, 5");
    assert_eq!(count(&db, EventStatus::Wait).await, 25);
    assert_eq!(count(&db, EventStatus::Sending).await, 1, "a fresh lease");
    assert_eq!(reclaimer.run_once().await.expect("again").total(), 0);
}

/// The renewer extends the leases still ours and reports the one another instance took.
#[tokio::test]
async fn lease_renewer_renews_and_reports_lost_leases() {
    let db = database().await;
    let ids = claimed(&db, 5, "me").await;
    expire(&db, &ids).await;
    Events::update_many()
        .col_expr(Column::ClaimOwner, sea_orm::sea_query::Expr::val("other"))
        .filter(Column::Id.eq(ids[2]))
        .exec(&db)
        .await
        .expect("steal");
    let mut renewer = LeaseRenewer::new(RelayDb::extended(db.clone()), &WorkerConfig::default());
    renewer.batch_size = 2;
    let r = renewer.run_once("me", &ids).await.expect("renew");
    assert_eq!((r.renewed, r.lost.clone()), (4, vec![ids[2]]));
    // Renewed by the database clock: only the stolen lease is still expired.
    let reclaimed = reclaimer(&db, 1000).run_once().await.expect("reclaim");
    assert_eq!(reclaimed.total(), 1);
}

#[test]
fn reclaims_every_tenth_of_the_lease_at_most_every_minute() {
    let interval = super::reclaimer::interval;
    assert_eq!(interval(Duration::from_secs(600)), Duration::from_secs(60));
    assert_eq!(interval(Duration::from_secs(3)), Duration::from_millis(300));
}

/// The monitor reads the backlog by status, and the keys blocked behind a dead letter; its
/// heartbeat makes the relay alive, and it counts the events backing off.
#[tokio::test]
async fn monitor_reads_the_backlog() {
    let db = database().await;
    let ids = claimed(&db, 3, "me").await;
    for _ in 0..2 {
        let event = NewEvent::raw("M-0", "ORDER_CREATED", "{}");
        db.with_event(event).await.expect("insert");
    }
    Events::update_many()
        .col_expr(
            Column::Status,
            sea_orm::sea_query::Expr::value(EventStatus::Fail),
        )
        .filter(Column::Id.eq(ids[0]))
        .exec(&db)
        .await
        .expect("dead letter");
    let relay_db = RelayDb::extended(db.clone());
    let config = WorkerConfig::default().ordered(Some(OrderedPolicy::Block));
    let g = Monitor::new(relay_db, &config, "me", Default::default());
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let b = {
        let _guard = metrics::set_default_local_recorder(&recorder);
        g.beat(true, false, false).await.expect("heartbeat");
        g.refresh_gauges().await.expect("backlog").0
    };
    assert_eq!((b.wait, b.sending, b.fail), (2, 2, 1));
    assert_eq!(b.backing_off, 0);
    let gauges = snapshotter.snapshot().into_vec();
    let gauge = |name: &str| {
        gauges.iter().find_map(|(key, _, _, v)| match v {
            metrics_util::debugging::DebugValue::Gauge(v) if key.key().name() == name => {
                Some(v.into_inner())
            }
            _ => None,
        })
    };
    assert_eq!(gauge(crate::metrics::BLOCKED_KEYS), Some(1.0));
    assert_eq!(gauge(crate::metrics::RELAYS_ALIVE), Some(1.0));
    assert!(gauge(crate::metrics::OLDEST_UNDELIVERED_AGE).is_some_and(|age| age >= 0.0));
    assert_eq!(gauge(crate::metrics::BACKOFF_EVENTS), Some(0.0));
}
