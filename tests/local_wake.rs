//! The wake-up on commit on Postgres, MariaDB and SQLite (see `tests/common`), with the
//! default 5 s poll delay, so that only a wake-up explains a delivery within a second: an
//! event written in a transaction that commits later is published soon after the commit
//! (Postgres: `LISTEN`/`NOTIFY`; elsewhere the process-local wake-up and its follow-up rounds),
//! `transactional_publish` wakes after its own commit, and nothing wakes a worker with
//! `wake_on_commit(false)` or for an event with `notify_relays(false)`.
//!
//! Latencies are measured commit → publish and printed; the assertions are bounds far below
//! the poll delay.
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::events::event;
use common::{order, test_config, Fleet, TestContext};
use sea_orm::TransactionTrait;
use sea_orm_outbox::{
    transactional_publish, EventStatus, NewEvent, OutboxExt, OutboxMessage, PublishError,
    Publisher, WorkerConfig,
};

backend_tests!(
    a_commit_after_the_write_wakes_the_relay,
    transactional_publish_wakes_the_relay_after_its_commit,
    nothing_wakes_without_wake_on_commit_or_with_notify_off,
);

/// The default poll delay: a delivery well under it was woken.
const POLL: Duration = Duration::from_secs(5);

/// A publisher that records when each event id arrived.
#[derive(Default)]
struct Timed(Mutex<HashMap<i64, Instant>>);

#[async_trait]
impl Publisher for Timed {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let mut at = self.0.lock().expect("lock");
        at.entry(m.event_id).or_insert_with(Instant::now);
        Ok(())
    }
}

impl Timed {
    /// How long after `since` the event `id` was published, waiting up to 10 s.
    async fn latency(&self, id: i64, since: Instant) -> Option<Duration> {
        let deadline = since + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(at) = self.0.lock().expect("lock").get(&id) {
                return Some(at.saturating_duration_since(since));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }
}

/// One idle worker with the default poll delay, started; `config` adjusts its settings.
async fn idle_worker(
    ctx: &TestContext,
    publisher: Arc<Timed>,
    config: impl FnOnce(WorkerConfig) -> WorkerConfig,
) -> Fleet {
    let fleet = Fleet::start(
        ctx,
        5,
        publisher,
        [config(test_config("idle").poll_delay(POLL))],
    )
    .await;
    assert!(fleet.started(Duration::from_secs(10)).await, "first round");
    fleet
}

/// Events written in a transaction that commits 0 to 300 ms later: each is published within
/// 1 s of its commit (the follow-up rounds after the write find the commit).
async fn a_commit_after_the_write_wakes_the_relay(ctx: &TestContext) {
    let sent = Arc::new(Timed::default());
    let fleet = idle_worker(ctx, sent.clone(), |c| c).await;
    let mut latencies = Vec::new();
    for (i, gap_ms) in [0u64, 0, 1, 2, 5, 10, 20, 50, 100, 300]
        .into_iter()
        .enumerate()
    {
        let txn = ctx.db.begin().await.expect("begin");
        let id = txn
            .with_event(NewEvent::raw(format!("W-{i}"), "ORDER_CREATED", "{}"))
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        txn.commit().await.expect("commit");
        let committed = Instant::now();
        let latency = sent.latency(id, committed).await;
        latencies.push((gap_ms, latency));
        // The next write after the follow-ups of this one have run out.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fleet.stop().await;
    println!(
        "{:?}: (commit after the write in ms, commit → publish) {latencies:?}",
        ctx.backend
    );
    for (gap, latency) in latencies {
        assert!(
            latency.is_some_and(|l| l < Duration::from_secs(1)),
            "an event committed {gap} ms after its write: {latency:?}"
        );
    }
}

/// `transactional_publish` commits and then wakes: the event is published within 200 ms.
async fn transactional_publish_wakes_the_relay_after_its_commit(ctx: &TestContext) {
    let sent = Arc::new(Timed::default());
    let fleet = idle_worker(ctx, sent.clone(), |c| c).await;
    let mut latencies = Vec::new();
    for i in 0..5 {
        let (_, id) = transactional_publish(
            &ctx.db,
            order::new(&format!("TP-{i}"), 10),
            order::created_event,
        )
        .await
        .expect("publish");
        let returned = Instant::now();
        latencies.push(sent.latency(id, returned).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fleet.stop().await;
    println!(
        "{:?}: transactional_publish → publish {latencies:?}",
        ctx.backend
    );
    assert!(
        latencies
            .iter()
            .all(|l| l.is_some_and(|l| l < Duration::from_millis(200))),
        "{latencies:?}"
    );
}

/// A worker with `wake_on_commit(false)`, and an event with `notify_relays(false)`: still
/// `WAIT` a second after the commit, the worker polling every 5 s.
async fn nothing_wakes_without_wake_on_commit_or_with_notify_off(ctx: &TestContext) {
    let sent = Arc::new(Timed::default());
    let fleet = idle_worker(ctx, sent.clone(), |c| c.wake_on_commit(false)).await;
    let id = ctx
        .db
        .with_event(NewEvent::raw("POLLED", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(event(&ctx.db, id).await.status, EventStatus::Wait);
    fleet.stop().await;

    let fleet = idle_worker(ctx, sent.clone(), |c| c).await;
    // The first worker's event went in the new worker's first round.
    assert!(sent.latency(id, Instant::now()).await.is_some());
    // On Postgres a new `LISTEN` connection starts a round and its follow-ups (doubling from
    // 20 ms, the longest 2.56 s): wait until none came for 3 s, so the next round is the poll.
    let worker = &fleet.workers()[0];
    let mut last = (worker.summary().rounds, Instant::now());
    let settled = common::wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let rounds = worker.summary().rounds;
        if rounds != last.0 {
            last = (rounds, Instant::now());
        }
        let quiet_for = last.1.elapsed();
        async move { quiet_for >= Duration::from_secs(3) }
    })
    .await;
    assert!(settled, "the worker never went quiet");
    let quiet = ctx
        .db
        .with_event(NewEvent::raw("QUIET", "ORDER_CREATED", "{}").notify_relays(false))
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(event(&ctx.db, quiet).await.status, EventStatus::Wait);
    fleet.stop().await;
}
