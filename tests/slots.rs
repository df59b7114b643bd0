//! The send slots: a send that hangs holds its own slot and nothing else, the worker
//! claims only as many events as it has free slots, and an event stays leased from its claim
//! until its outcome is recorded. Run on Postgres, MariaDB and SQLite (see `tests/common`).
mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::wait_until;
use common::{count, event, TestContext};
use sea_orm_outbox::{
    CancellationToken, ClaimStrategy, EventStatus, InMemoryPublisher, OutboxMessage, PublishError,
    Publisher, Worker,
};

backend_tests!(
    hung_sends_hold_only_their_own_slots,
    hung_sends_hold_only_their_own_slots_per_row,
    a_worker_claims_no_more_than_its_free_slots,
    a_round_sends_its_batch_through_the_slots,
    a_cancelled_round_claims_nothing,
);

backend_test! {
    /// Postgres only: the read is broken by changing a column's type under the worker.
    postgres_per_row_claims_won_before_a_failed_read_are_sent: Postgres, "slots_read_error" => per_row_claims_won_before_a_failed_read_are_sent;
}

/// Hangs on chosen biz_nos until released (30 s at most), publishes the others at once.
#[derive(Default)]
struct HangingPublisher {
    hang: HashSet<String>,
    /// Sends that started hanging.
    hanging: AtomicUsize,
    /// Set by the first hanging send that returned.
    returned: AtomicBool,
    release: tokio::sync::Notify,
    released: AtomicBool,
    sent: InMemoryPublisher,
    /// biz_nos published more than once.
    twice: Mutex<Vec<String>>,
}

impl HangingPublisher {
    fn new(hang: impl IntoIterator<Item = String>) -> Arc<Self> {
        Arc::new(HangingPublisher {
            hang: hang.into_iter().collect(),
            ..Default::default()
        })
    }

    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
        self.release.notify_waiters();
    }
}

#[async_trait]
impl Publisher for HangingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if self.hang.contains(&m.biz_no) {
            self.hanging.fetch_add(1, Ordering::SeqCst);
            let released = self.release.notified();
            if !self.released.load(Ordering::SeqCst) {
                let _ = tokio::time::timeout(Duration::from_secs(30), released).await;
            }
            self.returned.store(true, Ordering::SeqCst);
        }
        if self.sent.distinct_ids().contains(&m.event_id) {
            self.twice.lock().unwrap().push(m.biz_no.clone());
        }
        self.sent.publish(m).await
    }
}

/// Two workers, 500 events, a publisher that hangs (up to 30 s, until
/// the test releases it) on 2 of them, send timeout 60 s: every other event is SUCCESS while the
/// two still hang.
async fn hung_sends_hold_only_their_own_slots(ctx: &TestContext) {
    hung_sends_hold_only_their_own(ctx, ClaimStrategy::Batch).await
}

/// The same with the seed's per-row claim feeding the slots.
async fn hung_sends_hold_only_their_own_slots_per_row(ctx: &TestContext) {
    hung_sends_hold_only_their_own(ctx, ClaimStrategy::PerRow).await
}

async fn hung_sends_hold_only_their_own(ctx: &TestContext, strategy: ClaimStrategy) {
    const N: usize = 500;
    let ids = common::insert_many(&ctx.db, "SLOT", N).await;
    let publisher = HangingPublisher::new(["SLOT-7".to_owned(), "SLOT-300".to_owned()]);
    let configs = (0..2).map(|w| {
        common::test_config(&format!("slots-{w}"))
            .claim_strategy(strategy)
            .batch_size(20)
            .send_concurrency(8)
            .send_timeout(Duration::from_secs(60))
            .lease(Duration::from_secs(90))
    });
    let fleet = common::Fleet::start(ctx, 4, publisher.clone(), configs).await;
    let others_done = wait_until(
        Duration::from_secs(120),
        Duration::from_millis(50),
        || async { count(&ctx.db, EventStatus::Success).await == (N - 2) as u64 },
    )
    .await;
    // Checked before the hanging sends are released: they are still in flight.
    let returned_early = publisher.returned.load(Ordering::SeqCst);
    let hanging = publisher.hanging.load(Ordering::SeqCst);
    let sending = count(&ctx.db, EventStatus::Sending).await;
    publisher.release();
    let all_done = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async { count(&ctx.db, EventStatus::Success).await == N as u64 },
    )
    .await;
    for s in fleet.stop().await {
        assert_eq!((s.errors, s.late_acks), (0, 0), "{s:?}");
    }
    assert!(
        others_done,
        "the other {} events were not all published while two sends hung: {} SUCCESS",
        N - 2,
        count(&ctx.db, EventStatus::Success).await
    );
    assert!(
        !returned_early,
        "a hanging send returned before the others were done"
    );
    assert_eq!((hanging, sending), (2, 2), "hanging sends, SENDING rows");
    assert!(all_done, "not all published after the release");
    assert_eq!(event(&ctx.db, ids[7]).await.status, EventStatus::Success);
    assert_eq!(publisher.sent.distinct_ids().len(), N);
    assert!(
        publisher.twice.lock().unwrap().is_empty(),
        "{:?}",
        publisher.twice.lock().unwrap()
    );
}

/// A worker with 4 slots and sends that all hang holds 4 leases, not a batch of 20.
async fn a_worker_claims_no_more_than_its_free_slots(ctx: &TestContext) {
    common::insert_many(&ctx.db, "FREE", 30).await;
    let publisher = HangingPublisher::new((0..30).map(|i| format!("FREE-{i}")));
    let config = common::test_config("slots-free")
        .batch_size(20)
        .send_concurrency(4)
        .send_timeout(Duration::from_secs(60))
        .lease(Duration::from_secs(90));
    let fleet = common::Fleet::start(ctx, 4, publisher.clone(), [config]).await;
    let four = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async { publisher.hanging.load(Ordering::SeqCst) == 4 },
    )
    .await;
    // Several poll delays (20 ms) later, still only the four slots' events are claimed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sending = count(&ctx.db, EventStatus::Sending).await;
    let claimed = fleet.workers()[0].summary().claimed;
    publisher.release();
    let drained = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == 30 },
    )
    .await;
    let s = fleet.stop().await[0];
    assert!(four, "four sends did not start");
    assert_eq!(
        (sending, claimed),
        (4, 4),
        "SENDING rows and claims while 4 slots hang"
    );
    assert!(drained, "{s:?}");
    assert_eq!(s.published, 30);
}

/// `run_once` claims a batch and sends it through the slots: all of it is recorded when it
/// returns, with at most `send_concurrency` sends in flight.
async fn a_round_sends_its_batch_through_the_slots(ctx: &TestContext) {
    common::insert_many(&ctx.db, "ROUND", 25).await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let config = common::test_config("slots-round")
        .batch_size(20)
        .send_concurrency(3);
    let worker = Worker::new(ctx.pool(4).await, publisher.clone(), config).expect("worker");
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(
        (round.rounds, round.claimed, round.published),
        (1, 20, 20),
        "{round:?}"
    );
    assert_eq!(count(&ctx.db, EventStatus::Success).await, 20);
    assert_eq!(count(&ctx.db, EventStatus::Sending).await, 0);
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(round.published, 5);
    assert_eq!(worker.summary().published, 25);
}

/// `run_once` with a token already cancelled claims nothing.
async fn a_cancelled_round_claims_nothing(ctx: &TestContext) {
    common::insert_many(&ctx.db, "C", 3).await;
    let publisher = Arc::new(InMemoryPublisher::new());
    let worker =
        Worker::new(ctx.pool(4).await, publisher, common::test_config("slots-c")).expect("worker");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let round = worker.run_once(&cancel).await.expect("round");
    assert_eq!((round.claimed, round.released), (0, 0), "{round:?}");
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, 3);
}

/// Per-row claiming with cached candidates: 4 slots, batch 5, all sends held. When the slots
/// free up, the next claim wins the cached candidate and then its re-read of the table fails
/// (the candidate SELECT no longer decodes; the UPDATEs still work). The event it won is sent
/// all the same, never left `SENDING` unsent (found by review).
async fn per_row_claims_won_before_a_failed_read_are_sent(ctx: &TestContext) {
    use sea_orm::ConnectionTrait;
    common::insert_many(&ctx.db, "L", 5).await;
    let publisher = HangingPublisher::new((0..5).map(|i| format!("L-{i}")));
    let config = common::test_config("slots-read-error")
        .claim_strategy(ClaimStrategy::PerRow)
        .batch_size(5)
        .send_concurrency(4)
        .poll_delay(Duration::from_secs(10))
        .wake_on_commit(false);
    let fleet = common::Fleet::start(ctx, 5, publisher.clone(), [config]).await;
    let four = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(5),
        || async { publisher.hanging.load(Ordering::SeqCst) == 4 },
    )
    .await;
    assert!(four, "four sends did not start");
    common::new_event(&ctx.db, "late").await;
    ctx.db
        .execute_unprepared(
            "ALTER TABLE t_event_record ALTER COLUMN biz_no TYPE integer USING length(biz_no)",
        )
        .await
        .expect("break the candidate read");
    publisher.release();
    let all_five = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == 5 },
    )
    .await;
    let sending = count(&ctx.db, EventStatus::Sending).await;
    let s = fleet.stop().await[0];
    assert!(all_five, "the cached claim was not sent: {s:?}");
    assert_eq!(sending, 0, "a claimed event left SENDING: {s:?}");
    assert!(s.errors >= 1, "the failed read was counted: {s:?}");
}
