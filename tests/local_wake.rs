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
use common::{order, test_config, TestContext};
use sea_orm::TransactionTrait;
use sea_orm_migration::SchemaManager;
use sea_orm_outbox::{
    CancellationToken, EventStatus, NewEvent, Outbox, OutboxMessage, PublishError, Publisher,
    Worker, WorkerConfig, WorkerSummary,
};
use tokio::task::JoinHandle;

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

/// An outbox table of this test's own (`<name>_<backend>`): the local wake-up is per table
/// name in a process, and the other tests of this binary write into tables of their own.
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

/// One idle worker of `outbox` with the default poll delay, in a task of its own, after its
/// first round; `config` adjusts its settings. Stopped by cancelling `cancel`.
async fn idle_worker(
    ctx: &TestContext,
    outbox: &Outbox,
    publisher: Arc<Timed>,
    config: impl FnOnce(WorkerConfig) -> WorkerConfig,
) -> (Arc<Worker>, CancellationToken, JoinHandle<WorkerSummary>) {
    let config = config(test_config("idle").poll_delay(POLL));
    let worker = Arc::new(
        outbox
            .worker(ctx.pool(5).await, publisher, config)
            .expect("worker"),
    );
    let cancel = CancellationToken::new();
    let (w, c) = (worker.clone(), cancel.clone());
    let handle = tokio::spawn(async move { w.run(c).await });
    let started = common::wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        let rounds = worker.summary().rounds;
        async move { rounds >= 1 }
    })
    .await;
    assert!(started, "first round");
    (worker, cancel, handle)
}

/// Stops a worker of [`idle_worker`].
async fn stop(w: (Arc<Worker>, CancellationToken, JoinHandle<WorkerSummary>)) {
    w.1.cancel();
    w.2.await.expect("worker task");
}

/// Events written in a transaction that commits 0 to 300 ms later: each is published within
/// 1 s of its commit (the follow-up rounds after the write find the commit).
async fn a_commit_after_the_write_wakes_the_relay(ctx: &TestContext) {
    let sent = Arc::new(Timed::default());
    let outbox = own_outbox(ctx, "wake_later").await;
    let worker = idle_worker(ctx, &outbox, sent.clone(), |c| c).await;
    let mut latencies = Vec::new();
    for (i, gap_ms) in [0u64, 0, 1, 2, 5, 10, 20, 50, 100, 300]
        .into_iter()
        .enumerate()
    {
        let txn = ctx.db.begin().await.expect("begin");
        let id = outbox
            .with_event(&txn, NewEvent::raw(format!("W-{i}"), "ORDER_CREATED", "{}"))
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
    stop(worker).await;
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
    let outbox = own_outbox(ctx, "wake_tp").await;
    let worker = idle_worker(ctx, &outbox, sent.clone(), |c| c).await;
    let mut latencies = Vec::new();
    for i in 0..5 {
        let (_, id) = outbox
            .transactional_publish(
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
    stop(worker).await;
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
    let outbox = own_outbox(ctx, "wake_none").await;
    let worker = idle_worker(ctx, &outbox, sent.clone(), |c| c.wake_on_commit(false)).await;
    let id = outbox
        .with_event(&ctx.db, NewEvent::raw("POLLED", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status(ctx, &outbox, id).await, EventStatus::Wait);
    stop(worker).await;

    let worker = idle_worker(ctx, &outbox, sent.clone(), |c| c).await;
    // The first worker's event went in the new worker's first round.
    assert!(sent.latency(id, Instant::now()).await.is_some());
    // On Postgres a new `LISTEN` connection starts a round and its follow-ups (doubling from
    // 20 ms, the longest 2.56 s): wait until none came for 3 s, so the next round is the poll.
    let mut last = (worker.0.summary().rounds, Instant::now());
    let settled = common::wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        let rounds = worker.0.summary().rounds;
        if rounds != last.0 {
            last = (rounds, Instant::now());
        }
        let quiet_for = last.1.elapsed();
        async move { quiet_for >= Duration::from_secs(3) }
    })
    .await;
    assert!(settled, "the worker never went quiet");
    let quiet = outbox
        .with_event(
            &ctx.db,
            NewEvent::raw("QUIET", "ORDER_CREATED", "{}").notify_relays(false),
        )
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status(ctx, &outbox, quiet).await, EventStatus::Wait);
    stop(worker).await;
}

/// The status of the event `id` of `outbox`'s table.
async fn status(ctx: &TestContext, outbox: &Outbox, id: i64) -> EventStatus {
    let found = sea_orm_outbox::ops::find_events(outbox, &ctx.db, &id.to_string(), 10)
        .await
        .expect("read");
    let e = found.into_iter().find(|e| e.id == id).expect("the event");
    e.status
}
