//! Batch claiming, leases (renewal, reclaim as an attempt, hand-back) and metrics, run on
//! Postgres, MariaDB and SQLite (see `tests/common`).
mod common;

use common::wait_until;
use common::{age, claim_by_hand, count, event, insert_many, new_event, wait_for_success, Fleet};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{ScriptedPublisher, TestContext};
use sea_orm::TransactionTrait;
use sea_orm_outbox::event_record::Column;
use sea_orm_outbox::{
    CancellationToken, ClaimStrategy, EventStatus, InMemoryPublisher, NewEvent, OutboxExt,
    OutboxMessage, PublishError, Publisher, RetryPolicy, Worker, WorkerConfig,
};

backend_tests!(
    batch_race_publishes_each_event_once,
    message_that_kills_its_sender_ends_fail,
    renewal_keeps_a_long_send,
    a_send_that_stalls_its_worker_is_reclaimed_and_its_ack_is_late,
    metrics_count_every_outcome,
    a_panicking_publisher_fails_one_send_not_the_worker,
);

backend_test!(
    /// Wake-on-commit is Postgres-only (MariaDB and SQLite poll).
    postgres_commit_wakes_an_idle_relay: Postgres, "wake_on_commit" => wake_on_commit;
);

fn config(owner: &str) -> WorkerConfig {
    common::test_config(owner)
}

async fn batch_race_publishes_each_event_once(ctx: &TestContext) {
    const N: usize = 5000;
    insert_many(&ctx.db, "ORD", N).await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let configs = (0..3).map(|w| {
        config(&format!("batch-{w}"))
            .claim_strategy(ClaimStrategy::Batch)
            .batch_size(100)
            .send_concurrency(16)
    });
    let fleet = Fleet::start(ctx, 3, publisher.clone(), configs).await;
    let drained = wait_for_success(&ctx.db, N as u64, Duration::from_secs(240)).await;
    let mut claimed = 0;
    for s in fleet.stop().await {
        assert_eq!((s.errors, s.claim_lost, s.late_acks), (0, 0, 0), "{s:?}");
        claimed += s.claimed;
    }
    assert!(drained, "not drained: {} published", publisher.len());
    assert_eq!(publisher.distinct_ids().len(), N);
    assert_eq!(publisher.duplicates(), 0);
    assert_eq!(claimed, N as u64);
    assert_eq!(count(&ctx.db, EventStatus::Fail).await, 0);
}

/// Hangs forever on events whose biz_no is `poison`; publishes the rest.
struct HangsOn {
    poison: &'static str,
    inner: InMemoryPublisher,
    hung: AtomicUsize,
}

#[async_trait]
impl Publisher for HangsOn {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if m.biz_no == self.poison {
            self.hung.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.inner.publish(m).await
    }
}

/// Each instance that claims the poison event hangs on it and is then killed; the lease
/// expires, the reclaim counts the attempt, and after the limit the event is a dead letter.
async fn message_that_kills_its_sender_ends_fail(ctx: &TestContext) {
    let db = &ctx.db;
    let poison = new_event(db, "POISON").await;
    insert_many(&ctx.db, "ORD", 20).await;
    let publisher = Arc::new(HangsOn {
        poison: "POISON",
        inner: InMemoryPublisher::new(),
        hung: AtomicUsize::new(0),
    });
    let lease = Duration::from_secs(1);
    let reclaimer = Worker::new(
        ctx.pool(1).await,
        publisher.clone(),
        config("reclaimer").lease(lease),
    )
    .expect("reclaimer");
    for attempt in 1..=4 {
        let owner = format!("doomed-{attempt}");
        let cfg = config(&owner)
            .lease(lease)
            .send_timeout(Duration::from_secs(60))
            .send_concurrency(8);
        let worker = Worker::new(ctx.pool(3).await, publisher.clone(), cfg).expect("worker");
        let task = tokio::spawn(async move { worker.run(CancellationToken::new()).await });
        // Wait until it hangs on the poison event with every other event recorded.
        let claimed = wait_until(
            Duration::from_secs(20),
            Duration::from_millis(10),
            || async {
                // Every other event delivered and marked: with 7 of its 8 slots free the
                // worker claims the rest in its next claims, which must not race the kill
                // below. `SUCCESS` is final, so one count says it; separate counts of
                // `SENDING` (1) and `WAIT` (0) could both pass while a claim of the rest
                // committed between them, leaving those events leased to the killed worker.
                event(db, poison)
                    .await
                    .claim_owner
                    .as_deref()
                    .map(common::instance_of)
                    == Some(owner.as_str())
                    && count(db, EventStatus::Success).await == 20
            },
        )
        .await;
        assert!(claimed, "attempt {attempt}: poison not claimed");
        // The poison event kills its sender.
        task.abort();
        let _ = task.await;
        let reclaimed = wait_until(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || async {
                reclaimer.reclaim_once().await.expect("reclaim");
                event(db, poison).await.status != EventStatus::Sending
            },
        )
        .await;
        assert!(reclaimed, "attempt {attempt}: not reclaimed");
        let e = event(db, poison).await;
        assert_eq!(e.retry_count, attempt);
        let expected = if attempt <= 3 {
            EventStatus::Wait
        } else {
            EventStatus::Fail
        };
        assert_eq!(e.status, expected, "attempt {attempt}");
        assert_eq!(
            e.last_error.as_deref(),
            Some("lease-expired: the sender died or hung mid-send")
        );
    }
    // The other 20 are delivered: by the instances before they died, and by a next instance
    // that the dead letter no longer stops.
    let next = Worker::new(ctx.pool(3).await, publisher.clone(), config("next")).expect("worker");
    let delivered = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            next.run_once(&CancellationToken::new())
                .await
                .expect("round");
            count(db, EventStatus::Success).await == 20
        },
    )
    .await;
    assert!(
        delivered,
        "{} delivered",
        count(db, EventStatus::Success).await
    );
    assert_eq!(count(db, EventStatus::Fail).await, 1);
}

/// Takes `delay` per send.
struct Slow {
    delay: Duration,
    blocking: bool,
    inner: InMemoryPublisher,
}

#[async_trait]
impl Publisher for Slow {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if self.blocking {
            // A send stuck where the runtime cannot interrupt it (a blocking client, a GC-like
            // pause): the send timeout cannot fire.
            std::thread::sleep(self.delay);
        } else {
            tokio::time::sleep(self.delay).await;
        }
        self.inner.publish(m).await
    }
}

async fn renewal_keeps_a_long_send(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-LONG").await;
    let lease = Duration::from_secs(1);
    let slow = Arc::new(Slow {
        delay: lease * 3,
        blocking: false,
        inner: InMemoryPublisher::new(),
    });
    let sender = Worker::new(
        ctx.pool(3).await,
        slow.clone(),
        config("long-sender")
            .lease(lease)
            .send_timeout(Duration::from_secs(10)),
    )
    .expect("worker");
    // Another instance reclaims eagerly the whole time.
    let reclaimer = Worker::new(
        ctx.pool(2).await,
        ScriptedPublisher::ok(),
        config("reclaimer").lease(lease),
    )
    .expect("worker");
    let round = tokio::spawn(async move {
        let r = sender.run_once(&CancellationToken::new()).await;
        (r, sender)
    });
    let mut reclaimed = 0;
    while !round.is_finished() {
        reclaimed += reclaimer.reclaim_once().await.expect("reclaim");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (r, _) = round.await.expect("task");
    let r = r.expect("round");
    assert_eq!((r.published, r.late_acks, reclaimed), (1, 0, 0), "{r:?}");
    let e = event(db, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Success, 0));
    assert_eq!(slow.inner.len(), 1);
}

/// A publisher that blocks its worker's thread past the lease also stops the renewal: another
/// instance reclaims the event, and the stalled worker's acknowledgement is late.
async fn a_send_that_stalls_its_worker_is_reclaimed_and_its_ack_is_late(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-LONG").await;
    let lease = Duration::from_secs(1);
    let slow = Arc::new(Slow {
        delay: lease * 2,
        blocking: true,
        inner: InMemoryPublisher::new(),
    });
    let cfg = config("stalled")
        .lease(lease)
        .send_timeout(Duration::from_millis(300));
    let sender = Worker::new(ctx.pool(3).await, slow.clone(), cfg).expect("worker");
    let reclaimer = Worker::new(
        ctx.pool(2).await,
        ScriptedPublisher::ok(),
        config("reclaimer").lease(lease),
    )
    .expect("worker");
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let round = tokio::spawn(async move {
        let r = metrics::with_local_recorder(&recorder, || {
            // The blocking publisher keeps this thread busy; run the round to completion here.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current()
                    .block_on(sender.run_once(&CancellationToken::new()))
            })
        });
        r
    });
    let mut reclaimed = 0;
    while !round.is_finished() {
        reclaimed += reclaimer.reclaim_once().await.expect("reclaim");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = round.await.expect("task").expect("round");
    assert_eq!(
        reclaimed, 1,
        "the stalled send's lease expired and was reclaimed"
    );
    assert_eq!((r.published, r.late_acks), (0, 1), "{r:?}");
    let e = event(db, id).await;
    assert_eq!(
        (e.status, e.retry_count, e.claim_owner),
        (EventStatus::Wait, 1, None),
        "the late ack changed nothing"
    );
    let late: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| k.key().name() == sea_orm_outbox::metrics::LATE_ACKS)
        .map(|(_, _, _, v)| match v {
            metrics_util::debugging::DebugValue::Counter(c) => c,
            _ => 0,
        })
        .sum();
    assert_eq!(late, 1, "outbox_late_acks_total");
}

async fn wake_on_commit(ctx: &TestContext) {
    let db = &ctx.db;
    // A poll delay of an hour: only the notification can start the next round in time.
    let cfg = config("listener").poll_delay(Duration::from_secs(3600));
    let publisher = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(ctx, 4, publisher.clone(), [cfg]).await;
    assert!(fleet.started(Duration::from_secs(10)).await);
    // Give the LISTEN time to be registered after the first round started.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..5 {
        let txn = db.begin().await.expect("begin");
        txn.with_event(NewEvent::raw(format!("ORD-{i}"), "ORDER_CREATED", "{}"))
            .await
            .expect("insert");
        txn.commit().await.expect("commit");
        let published = wait_until(
            Duration::from_secs(10),
            Duration::from_millis(2),
            || async { publisher.len() == i + 1 },
        )
        .await;
        assert!(
            published,
            "event {i} not published after its commit woke the relay"
        );
    }
    // A rolled-back event wakes nobody and is never published.
    let txn = db.begin().await.expect("begin");
    txn.with_event(NewEvent::raw("ORD-RB", "ORDER_CREATED", "{}"))
        .await
        .expect("insert");
    txn.rollback().await.expect("rollback");
    let s = fleet.stop().await.remove(0);
    assert_eq!(s.published, 5, "{s:?}");
    assert_eq!(count(db, EventStatus::Success).await, 5);
}

/// Counter value of `name` in a debugging recorder snapshot (summed over labels).
fn counter(
    snapshot: &[(
        metrics_util::CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        metrics_util::debugging::DebugValue,
    )],
    name: &str,
) -> u64 {
    snapshot
        .iter()
        .filter(|(k, ..)| k.key().name() == name)
        .map(|(_, _, _, v)| match v {
            metrics_util::debugging::DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

async fn metrics_count_every_outcome(ctx: &TestContext) {
    use sea_orm_outbox::metrics as names;
    let db = &ctx.db;
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // The rounds below run on this thread (awaited, not spawned), so a thread-local recorder
    // sees every metric they record.
    let _guard = metrics::set_default_local_recorder(&recorder);

    // A reclaim: an instance died holding a lease.
    let dead = new_event(db, "DEAD").await;
    claim_by_hand(db, &[dead], "dead").await;
    age(db, dead, Column::ClaimedAt, Duration::from_secs(60)).await;
    // A success, a retry ("RETRY" fails retryably) and a dead letter ("PERM" fails for good).
    struct Mixed(InMemoryPublisher);
    #[async_trait]
    impl Publisher for Mixed {
        async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
            match m.biz_no.as_str() {
                "RETRY" => Err(PublishError::retryable("broker busy")),
                "PERM" => Err(PublishError::permanent("message too large")),
                _ => self.0.publish(m).await,
            }
        }
    }
    for biz in ["OK", "RETRY", "PERM"] {
        new_event(db, biz).await;
    }
    let publisher = Arc::new(Mixed(InMemoryPublisher::new()));
    let slow_retry = RetryPolicy::new(3, Duration::from_secs(60), Duration::from_secs(3600));
    let racer = async |owner: &str| {
        let cfg = config(owner)
            .lease(Duration::from_secs(30))
            .retry(slow_retry)
            .claim_strategy(ClaimStrategy::PerRow);
        Worker::new(ctx.pool(3).await, publisher.clone(), cfg).expect("worker")
    };
    let (a, b) = (racer("a").await, racer("b").await);
    assert_eq!(a.reclaim_once().await.expect("reclaim"), 1);
    // Lost claims: two instances race over the same candidates until one loses a claim.
    let cancel = CancellationToken::new();
    let mut lost = 0;
    for round in 0..50 {
        for i in 0..10 {
            new_event(db, &format!("RACE-{round}-{i}")).await;
        }
        let (ra, rb) = tokio::join!(a.run_once(&cancel), b.run_once(&cancel));
        lost += ra.expect("round").claim_lost + rb.expect("round").claim_lost;
        if lost > 0 {
            break;
        }
    }
    assert!(lost > 0, "no claim was lost in 50 racing rounds");
    let (sa, sb) = (a.summary(), b.summary());
    let snap = snapshotter.snapshot().into_vec();
    assert_eq!(
        counter(&snap, names::PUBLISHED),
        sa.published + sb.published
    );
    assert!(
        counter(&snap, names::PUBLISHED) >= 2,
        "OK and DEAD were published"
    );
    assert_eq!(counter(&snap, names::RETRIES), 1);
    assert_eq!(counter(&snap, names::DEAD_LETTERS), 1);
    assert_eq!(counter(&snap, names::CLAIM_LOST), lost);
    assert_eq!(counter(&snap, names::RECLAIMED), 1);
    assert_eq!(counter(&snap, names::LATE_ACKS), 0);
    let histograms: Vec<&str> = snap
        .iter()
        .filter(|(_, _, _, v)| matches!(v, metrics_util::debugging::DebugValue::Histogram(h) if !h.is_empty()))
        .map(|(k, ..)| k.key().name())
        .collect();
    assert!(
        histograms.contains(&names::SEND_DURATION) && histograms.contains(&names::SENDING_DWELL),
        "{histograms:?}"
    );
    // The backlog gauges, refreshed here by hand: RETRY waits, PERM is a dead letter.
    let backlog = sea_orm_outbox::ops::backlog(&sea_orm_outbox::Outbox::default(), db)
        .await
        .expect("backlog");
    assert_eq!((backlog.wait, backlog.sending, backlog.fail), (1, 0, 1));
}

struct Panics;

#[async_trait]
impl Publisher for Panics {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if m.biz_no == "BOOM" {
            panic!("publisher bug");
        }
        Ok(())
    }
}

async fn a_panicking_publisher_fails_one_send_not_the_worker(ctx: &TestContext) {
    let db = &ctx.db;
    let boom = new_event(db, "BOOM").await;
    let ok = new_event(db, "OK").await;
    let worker = Worker::new(ctx.pool(4).await, Arc::new(Panics), config("p")).expect("worker");
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("the round survives the panic");
    assert_eq!((round.published, round.retried), (1, 1), "{round:?}");
    let e = event(db, boom).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 1));
    assert!(e
        .last_error
        .as_deref()
        .is_some_and(|r| r.contains("publisher panicked: publisher bug")));
    assert_eq!(event(db, ok).await.status, EventStatus::Success);
}
