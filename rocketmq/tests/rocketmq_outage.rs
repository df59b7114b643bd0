//! Broker outage against a REAL RocketMQ broker that this test binary owns.
//!
//! It starts its own name server and broker with `scripts/rocketmq.sh` on other ports (name
//! server 19876, broker 20911/20909, HA 20912, health 20990; state in a fresh temp dir), so
//! stopping the broker never disturbs the suites that share the default broker, even when they
//! run at the same time. It needs the `rocketmq-namesrv-rust` and `rocketmq-broker-rust`
//! binaries (the script installs them when missing); without them the test FAILS under
//! `CI=true` and is skipped otherwise.
//!
//! The whole drill is one test function that runs Postgres, then MariaDB, one after the other
//! on the one private broker.
#[path = "../../tests/common/mod.rs"]
mod common;
mod rmq_support;

use common::wait_until;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{event_by_biz_no, insert_many, wait_for_success, Backend, Fleet, TestContext};
use rmq_support::cluster::{Ports, PrivateCluster};
use rmq_support::{count, worker_config, Clients};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{EventStatus, OutboxMessage, Publisher, RetryPolicy};

/// Name server 19876, broker 20911 (and 20909, HA 20912), health 20990.
const PORTS: Ports = Ports {
    namesrv: 19876,
    broker: 20911,
    health: 20990,
    broker_name: "outbox-outage-broker",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_backs_off_then_delivers_everything() {
    common::init_tracing();
    let Some(cluster) = PrivateCluster::start("outbox-rocketmq-outage", PORTS) else {
        return;
    };
    for backend in [Backend::Postgres, Backend::MySql] {
        if !backend.enabled() {
            eprintln!("outage: {backend:?} not selected by OUTBOX_TEST_BACKENDS");
            continue;
        }
        let ctx = TestContext::new(backend, "rmq_outage").await;
        outage_drill(&ctx, &cluster).await;
        ctx.cleanup().await;
        let ctx = TestContext::new(backend, "rmq_outage_mid_batch").await;
        mid_batch_drill(&ctx, &cluster).await;
        ctx.cleanup().await;
    }
}

/// A retry budget far longer than the outage plus the client's 30 s circuit breaker: 60
/// retries, back-off n² × 100 ms capped at 2 s (about two minutes in all).
fn outage_retry() -> RetryPolicy {
    RetryPolicy::new(60, Duration::from_millis(100), Duration::from_secs(2))
}

/// `n` events `<prefix>-<i>` in one transaction: their ids.
async fn insert(ctx: &TestContext, prefix: &str, n: usize) -> HashSet<i64> {
    insert_many(&ctx.db, prefix, n).await.into_iter().collect()
}

/// Fails the test on any dead letter: the retry budget outlasts the outage.
async fn assert_no_fail(db: &sea_orm::DatabaseConnection) {
    assert_eq!(
        count(db, EventStatus::Fail).await,
        0,
        "no FAIL within the retry budget"
    );
}

async fn outage_drill(ctx: &TestContext, cluster: &PrivateCluster) {
    const N: usize = 100;
    let addr = cluster.addr();
    let db = &ctx.db;
    let send_timeout = Duration::from_secs(2);
    let clients = Clients::start(&addr, "OUTBOX_OUTAGE", send_timeout).await;

    // Phase A: broker up, everything flows.
    let mut ids = insert(ctx, "A", N).await;
    let configs = (0..2).map(|w| worker_config(&format!("outage-w{w}"), outage_retry()));
    let fleet = Fleet::start(ctx, 3, clients.publisher.clone(), configs).await;
    assert!(
        wait_for_success(db, N as u64, Duration::from_secs(60)).await,
        "phase A not delivered"
    );

    // The broker goes away (a crash: SIGKILL, its route stays on the name server).
    assert!(cluster.script("kill-broker"), "kill-broker");
    let outage_started = Instant::now();
    ids.extend(insert(ctx, "B", N).await);

    // Sends fail fast (connection refused or circuit open), far below the send timeout.
    let probe = OutboxMessage::new(-1, "PROBE", "PROBE", "{}");
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        let err = clients
            .publisher
            .publish(&probe)
            .await
            .expect_err("broker is down");
        slowest = slowest.max(t.elapsed());
        assert!(err.is_retryable(), "{err}");
    }
    eprintln!(
        "{:?}: while the broker is down a send fails in at most {slowest:?}",
        ctx.backend
    );
    assert!(
        slowest < send_timeout / 2,
        "sends fail fast: slowest {slowest:?}"
    );

    // Events back off: retry_count grows, nothing is dead-lettered. The outage lasts at least
    // OUTAGE, and until every phase-B event failed three times.
    const OUTAGE: Duration = Duration::from_secs(5);
    let backed_off = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            assert_no_fail(db).await;
            let b_rows = Events::find()
                .filter(Column::BizNo.starts_with("B-"))
                .all(db)
                .await
                .expect("rows");
            outage_started.elapsed() >= OUTAGE
                && b_rows.len() == N
                && b_rows.iter().all(|r| r.retry_count >= 3)
        },
    )
    .await;
    assert!(backed_off, "phase B events did not reach retry_count >= 3");
    let sample = event_by_biz_no(db, "B-0").await;
    eprintln!(
        "{:?}: after {:?} of outage B-0 is {:?} retry_count={} last_error={:?}",
        ctx.backend,
        outage_started.elapsed(),
        sample.status,
        sample.retry_count,
        sample.last_error
    );
    assert_eq!(
        count(db, EventStatus::Success).await,
        N as u64,
        "nothing new succeeds while the broker is down"
    );

    // The broker comes back; everything is delivered, still without a FAIL.
    assert!(cluster.script("start"), "broker restart");
    let restarted = Instant::now();
    let delivered = wait_until(
        Duration::from_secs(180),
        Duration::from_millis(200),
        || async {
            assert_no_fail(db).await;
            count(db, EventStatus::Success).await == 2 * N as u64
        },
    )
    .await;
    let recovery = restarted.elapsed();
    let (received, summaries) = clients.receive_and_stop(fleet, &ids).await;
    let mut retried = 0;
    for s in summaries {
        assert_eq!(s.dead_lettered, 0, "{s:?}");
        retried += s.retried;
    }

    assert!(
        delivered,
        "not all delivered after the restart: {} SUCCESS",
        count(db, EventStatus::Success).await
    );
    // Read one by one: with completion by delete the delivered rows are in the log of
    // deletions (`tests/common/completion.rs`).
    let mut max_retries = 0;
    for id in &ids {
        max_retries = max_retries.max(common::event(db, *id).await.retry_count);
    }
    eprintln!(
        "{:?}: broker back, all {} SUCCESS {:.1} s after the restart; {retried} retries, max retry_count {max_retries}; \
         consumer got {} messages ({} duplicates)",
        ctx.backend,
        2 * N,
        recovery.as_secs_f64(),
        received.all.len(),
        received.duplicates()
    );
    assert!(retried >= N as u64, "every phase-B event was retried");
    received.assert_all_arrived(&ids);
}

/// The broker killed (SIGKILL) while 3 relays send batches of 100:
/// the batches in flight fail and their events back off; after the restart every event is
/// delivered, none is lost and none is a dead letter.
async fn mid_batch_drill(ctx: &TestContext, cluster: &PrivateCluster) {
    const N: usize = 10_000;
    let addr = cluster.addr();
    let db = &ctx.db;
    let clients = Clients::start(&addr, "OUTBOX_MID_BATCH", Duration::from_secs(2)).await;
    let ids = insert(ctx, "C", N).await;
    let configs =
        (0..3).map(|w| worker_config(&format!("mid-batch-w{w}"), outage_retry()).batch_size(100));
    let fleet = Fleet::start(ctx, 3, clients.publisher.clone(), configs).await;
    let flowing = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(5),
        || async { count(db, EventStatus::Success).await >= 500 },
    )
    .await;
    assert!(flowing, "the batches did not start flowing");
    assert!(cluster.script("kill-broker"), "kill-broker");
    let at_kill = count(db, EventStatus::Success).await;
    assert!(
        at_kill < N as u64,
        "everything was delivered before the kill: nothing was in flight"
    );
    // Batches fail while the broker is down: their events back off (retry_count >= 1).
    let failed = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            assert_no_fail(db).await;
            Events::find()
                .filter(Column::RetryCount.gte(1))
                .one(db)
                .await
                .expect("rows")
                .is_some()
        },
    )
    .await;
    assert!(failed, "no send failed while the broker was down");
    assert!(cluster.script("start"), "broker restart");
    let delivered = wait_until(
        Duration::from_secs(180),
        Duration::from_millis(200),
        || async {
            assert_no_fail(db).await;
            count(db, EventStatus::Success).await == N as u64
        },
    )
    .await;
    let (received, summaries) = clients.receive_and_stop(fleet, &ids).await;
    assert!(
        delivered,
        "not all delivered after the restart: {} SUCCESS",
        count(db, EventStatus::Success).await
    );
    let retried: u64 = summaries.iter().map(|s| s.retried).sum();
    for s in &summaries {
        assert_eq!(s.dead_lettered, 0, "{s:?}");
    }
    eprintln!(
        "{:?}: broker killed mid-batch at {at_kill} of {N} SUCCESS; all delivered after the \
         restart; {retried} retries; consumer got {} messages ({} duplicates)",
        ctx.backend,
        received.all.len(),
        received.duplicates()
    );
    received.assert_all_arrived(&ids);
}
