//! Batch sends: with a publisher that batches, a claim's events go out in one
//! `publish_batch` call and each event's outcome is recorded as if it had been sent alone.
//! Run on Postgres, MariaDB and SQLite (see `tests/common`), with a publisher in memory; the
//! RocketMQ batches have their own tests in tests/rocketmq.rs.
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::wait_until;
use common::{count, event, TestContext};
use sea_orm_outbox::{EventStatus, InMemoryPublisher, OutboxMessage, PublishError, Publisher};

backend_tests!(
    each_event_of_a_batch_gets_its_own_outcome,
    a_batch_that_times_out_puts_each_event_back,
    results_missing_from_a_batch_are_retried,
);

/// Sends batches; what happens to each message is scripted by its biz_no:
/// `RETRY-*` fails (retryably) on its first attempt, `BAD-*` fails for good every time.
#[derive(Default)]
struct Batching {
    sent: InMemoryPublisher,
    /// The number of messages of every `publish_batch` call, in order.
    calls: Mutex<Vec<usize>>,
    /// `publish` calls (one message each).
    singles: AtomicUsize,
    /// Attempts per event id.
    attempts: Mutex<HashMap<i64, u32>>,
    /// The first `hang_calls` calls hang for this long (the worker's timeout gives up on them).
    hang: Option<Duration>,
    hang_calls: usize,
    /// Answer only this many results per call (the rest are missing), for the first call only.
    short_first: Option<usize>,
}

impl Batching {
    fn outcome(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let attempt = {
            let mut a = self.attempts.lock().unwrap();
            let n = a.entry(m.event_id).or_default();
            *n += 1;
            *n
        };
        if m.biz_no.starts_with("BAD-") {
            return Err(PublishError::permanent("scripted: refused for good"));
        }
        if m.biz_no.starts_with("RETRY-") && attempt == 1 {
            return Err(PublishError::retryable("scripted: first attempt fails"));
        }
        Ok(())
    }
}

#[async_trait]
impl Publisher for Batching {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        self.singles.fetch_add(1, Ordering::SeqCst);
        self.outcome(m)?;
        self.sent.publish(m).await
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(messages.len());
            calls.len()
        };
        if let Some(hang) = self.hang.filter(|_| call <= self.hang_calls) {
            tokio::time::sleep(hang).await;
        }
        let mut results = Vec::new();
        for m in messages {
            let r = self.outcome(m);
            if r.is_ok() {
                self.sent.publish(m).await.unwrap();
            }
            results.push(r);
        }
        if let Some(n) = self.short_first.filter(|_| call == 1) {
            // The messages not answered were not sent either.
            results.truncate(n);
        }
        results
    }

    fn batches(&self) -> bool {
        true
    }
}

/// 3 workers, batch 50: 600 good events, 30 that fail their first attempt, 10 refused for
/// good. Every good event is SUCCESS and published once; the retried ones once more after their
/// back-off (retry_count 1, SUCCESS); the refused ones are dead letters (FAIL) that did not
/// take their batch with them. The calls carried many events each.
async fn each_event_of_a_batch_gets_its_own_outcome(ctx: &TestContext) {
    let mut ids = common::insert_many(&ctx.db, "OK", 600).await;
    let retry = common::insert_many(&ctx.db, "RETRY", 30).await;
    let bad = common::insert_many(&ctx.db, "BAD", 10).await;
    ids.extend(common::insert_many(&ctx.db, "OK2", 60).await);
    let publisher = Arc::new(Batching::default());
    let configs = (0..3).map(|w| {
        common::test_config(&format!("batch-{w}"))
            .batch_size(50)
            .retry(sea_orm_outbox::RetryPolicy::new(
                3,
                Duration::from_millis(50),
                Duration::from_secs(1),
            ))
    });
    let fleet = common::Fleet::start(ctx, 4, publisher.clone(), configs).await;
    let total = (ids.len() + retry.len()) as u64;
    let done = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            count(&ctx.db, EventStatus::Success).await == total
                && count(&ctx.db, EventStatus::Fail).await == bad.len() as u64
        },
    )
    .await;
    let summaries = fleet.stop().await;
    assert!(
        done,
        "SUCCESS {} (want {total}), FAIL {} (want {})",
        count(&ctx.db, EventStatus::Success).await,
        count(&ctx.db, EventStatus::Fail).await,
        bad.len()
    );
    for s in &summaries {
        assert_eq!((s.errors, s.late_acks), (0, 0), "{s:?}");
    }
    let published: u64 = summaries.iter().map(|s| s.published).sum();
    let dead: u64 = summaries.iter().map(|s| s.dead_lettered).sum();
    let retried: u64 = summaries.iter().map(|s| s.retried).sum();
    assert_eq!((published, dead, retried), (total, 10, 30));
    for id in &ids {
        let e = event(&ctx.db, *id).await;
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Success, 0),
            "{e:?}"
        );
    }
    for id in &retry {
        let e = event(&ctx.db, *id).await;
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Success, 1),
            "{e:?}"
        );
    }
    for id in &bad {
        let e = event(&ctx.db, *id).await;
        assert_eq!(e.status, EventStatus::Fail, "{e:?}");
        assert!(
            e.last_error
                .as_deref()
                .unwrap_or("")
                .contains("refused for good"),
            "{e:?}"
        );
    }
    // Published exactly once each (no duplicates in a run without lost leases).
    assert_eq!(publisher.sent.len() as u64, total);
    assert_eq!(publisher.sent.distinct_ids().len() as u64, total);
    let calls = publisher.calls.lock().unwrap().clone();
    assert_eq!(
        publisher.singles.load(Ordering::SeqCst),
        0,
        "publish called"
    );
    assert!(calls.iter().all(|&n| (1..=50).contains(&n)), "{calls:?}");
    assert!(
        calls.iter().filter(|&&n| n > 1).count() >= 10,
        "few calls carried more than one event: {calls:?}"
    );
}

/// A batch call that outlasts the worker's send timeout (500 ms): every event of it goes back
/// with back-off and one counted attempt, none is lost or left SENDING, and the next attempt
/// delivers them.
async fn a_batch_that_times_out_puts_each_event_back(ctx: &TestContext) {
    let ids = common::insert_many(&ctx.db, "HANG", 40).await;
    let publisher = Arc::new(Batching {
        hang: Some(Duration::from_secs(5)),
        hang_calls: 1,
        ..Default::default()
    });
    let config = common::test_config("batch-hang")
        .batch_size(100)
        .send_timeout(Duration::from_millis(500))
        .retry(sea_orm_outbox::RetryPolicy::new(
            3,
            Duration::from_millis(50),
            Duration::from_secs(1),
        ));
    let fleet = common::Fleet::start(ctx, 4, publisher.clone(), [config]).await;
    let done = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == ids.len() as u64 },
    )
    .await;
    let summaries = fleet.stop().await;
    assert!(
        done,
        "SUCCESS {}",
        count(&ctx.db, EventStatus::Success).await
    );
    assert_eq!(summaries[0].retried, ids.len() as u64, "{:?}", summaries[0]);
    for id in &ids {
        let e = event(&ctx.db, *id).await;
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Success, 1),
            "{e:?}"
        );
    }
    assert_eq!(publisher.calls.lock().unwrap()[0], ids.len());
}

/// A publisher that answers fewer results than it was given messages: the events without a
/// result are retried (retryable, counted), not marked SUCCESS, and delivered later.
async fn results_missing_from_a_batch_are_retried(ctx: &TestContext) {
    let ids = common::insert_many(&ctx.db, "SHORT", 20).await;
    let publisher = Arc::new(Batching {
        short_first: Some(5),
        ..Default::default()
    });
    let config =
        common::test_config("batch-short")
            .batch_size(100)
            .retry(sea_orm_outbox::RetryPolicy::new(
                3,
                Duration::from_millis(50),
                Duration::from_secs(1),
            ));
    let fleet = common::Fleet::start(ctx, 4, publisher.clone(), [config]).await;
    let done = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == ids.len() as u64 },
    )
    .await;
    let summaries = fleet.stop().await;
    assert!(
        done,
        "SUCCESS {}",
        count(&ctx.db, EventStatus::Success).await
    );
    assert_eq!(summaries[0].retried, 15, "{:?}", summaries[0]);
    let retried: HashSet<i64> = ids[5..].iter().copied().collect();
    for id in &ids {
        let e = event(&ctx.db, *id).await;
        let want = i32::from(retried.contains(id));
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Success, want),
            "{e:?}"
        );
        if want == 1 {
            assert!(
                e.last_error
                    .as_deref()
                    .unwrap_or("")
                    .contains("5 results for 20"),
                "{e:?}"
            );
        }
    }
}
