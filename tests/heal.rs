//! Healing of dead letters (`WorkerConfig::heal_dead_letters`): a dead letter of a transient
//! failure goes back to `WAIT` after a quiet period, round by round, and is delivered once the
//! broker is back; permanent failures, expired leases, failed marks and errors without a known
//! prefix stay dead; the round cap holds; several workers heal each row once; an ordered key
//! blocked by a dead letter flows again in order once it heals. Runs on Postgres, MariaDB and
//! SQLite (see `tests/common`) with a scripted broker in memory.
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{
    age, age_many, claim_by_hand, count, dead_letter, event, insert_keys, insert_many, wait_until,
    Fleet, TestContext,
};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{
    CancellationToken, EventStatus, FailureKind, HealPolicy, InMemoryPublisher, OrderedPolicy,
    OutboxMessage, PublishError, Publisher, RetryPolicy, Worker, WorkerConfig,
};

backend_tests!(
    a_transient_dead_letter_heals_and_is_delivered,
    other_dead_letters_are_never_healed,
    the_round_cap_holds,
    several_workers_heal_each_row_once,
    a_key_blocked_by_a_dead_letter_flows_in_order_once_it_heals,
);

/// Retries: 2 after the first attempt, 20 ms and 80 ms apart: a dead letter after about 0.1 s,
/// with `retry_count` 3.
const MAX_RETRIES: u32 = 2;

/// `common::test_config` with fast retries and healing by `heal`.
fn config(owner: &str, heal: Option<HealPolicy>) -> WorkerConfig {
    common::test_config(owner)
        .retry(RetryPolicy::new(
            MAX_RETRIES,
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
        .heal_dead_letters(heal)
}

/// Heals after 300 ms, 600 ms, 1.2 s, ... (`rounds` rounds).
fn quick(rounds: u32) -> Option<HealPolicy> {
    Some(HealPolicy::new(Duration::from_millis(300), rounds))
}

/// A broker in memory that refuses every send (of the key `only`, when set) while it is down,
/// as retryable failures (an outage) or permanent ones, and counts the attempts per event.
#[derive(Default)]
struct Broker {
    down: AtomicBool,
    permanent: bool,
    only: Option<String>,
    attempts: Mutex<HashMap<i64, u32>>,
    sent: InMemoryPublisher,
}

impl Broker {
    /// Down, refusing with retryable failures.
    fn down() -> Arc<Self> {
        Arc::new(Broker {
            down: AtomicBool::new(true),
            ..Default::default()
        })
    }

    /// Back up: every later send succeeds.
    fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// How many sends event `id` met.
    fn attempts(&self, id: i64) -> u32 {
        self.attempts.lock().unwrap().get(&id).copied().unwrap_or(0)
    }
}

#[async_trait]
impl Publisher for Broker {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        *self.attempts.lock().unwrap().entry(m.event_id).or_default() += 1;
        let refused = self.down.load(Ordering::SeqCst)
            && self.only.as_ref().is_none_or(|key| *key == m.biz_no);
        if !refused {
            return self.sent.publish(m).await;
        }
        // The variable parts of a real client's error: an address and the event's id.
        let why = format!(
            "broker 10.0.{}.{}:10911 busy, event {}",
            m.event_id / 256 % 256,
            m.event_id % 256,
            m.event_id
        );
        Err(if self.permanent {
            PublishError::permanent(why)
        } else {
            PublishError::retryable(why)
        })
    }
}

/// The events `ids`, in that order.
async fn events(ctx: &TestContext, ids: &[i64]) -> Vec<sea_orm_outbox::event_record::Model> {
    let mut out = Vec::new();
    for &id in ids {
        out.push(event(&ctx.db, id).await);
    }
    out
}

/// Sets the `retry_count` of the events `ids`.
async fn set_retry_count(ctx: &TestContext, ids: &[i64], n: i32) {
    Events::update_many()
        .col_expr(Column::RetryCount, Expr::val(n))
        .filter(Column::Id.is_in(ids.to_vec()))
        .exec(&ctx.db)
        .await
        .expect("retry_count");
}

/// An outage longer than the retries: the events become dead letters (`retryable: ...`), are
/// healed while the broker is still down (one attempt each, dead again at once, one round
/// further), and are delivered, each once, after the broker comes back, without a person.
async fn a_transient_dead_letter_heals_and_is_delivered(ctx: &TestContext) {
    let ids = insert_many(&ctx.db, "T", 5).await;
    let broker = Broker::down();
    let fleet = Fleet::start(ctx, 3, broker.clone(), [config("heal-t", quick(5))]).await;
    // Dead after the retries (3 attempts), healed after 300 ms, dead again after one attempt.
    let healed_once = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(10),
        || async {
            events(ctx, &ids)
                .await
                .iter()
                .all(|e| e.retry_count > MAX_RETRIES as i32 + 1)
        },
    )
    .await;
    let while_down = events(ctx, &ids).await;
    broker.up();
    assert!(healed_once, "{while_down:?}");
    for e in while_down {
        let error = e.last_error.as_deref().unwrap_or_default();
        assert_eq!(
            FailureKind::of(error),
            Some(FailureKind::Retryable),
            "{e:?}"
        );
        assert_ne!(e.status, EventStatus::Success, "{e:?}");
    }
    let delivered = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == 5 },
    )
    .await;
    let summaries = fleet.stop().await;
    assert!(delivered, "{:?} {summaries:?}", events(ctx, &ids).await);
    // Rounds 0 and 1 at least (the broker was down at the first), at most all five.
    let s = summaries[0];
    assert!((10..=25).contains(&s.healed), "{s:?}");
    assert_eq!(s.errors, 0, "{s:?}");
    assert_eq!(broker.sent.len(), 5, "each delivered once");
    assert_eq!(broker.sent.distinct_ids().len(), 5);
    for e in events(ctx, &ids).await {
        // Delivered in round 1 to 4: retry_count max + 1 + the rounds that failed.
        let rounds_failed = e.retry_count - (MAX_RETRIES as i32 + 1);
        assert!((1..=4).contains(&rounds_failed), "{e:?}");
        assert_eq!(broker.attempts(e.id), 3 + rounds_failed as u32 + 1, "{e:?}");
    }
}

/// Only a dead letter whose `last_error` says `retryable: ` is healed: a permanent failure (by
/// the relay), a message whose lease expired on every attempt (by the reclaim), a delivered
/// event whose `SUCCESS` mark failed, a configuration fault, an error of an older version and
/// a dead letter without an error all stay `FAIL`, however long ago they failed.
async fn other_dead_letters_are_never_healed(ctx: &TestContext) {
    let db = &ctx.db;
    let broker = Arc::new(Broker {
        down: AtomicBool::new(true),
        permanent: true,
        ..Default::default()
    });
    let worker =
        Worker::new(db.clone(), broker.clone(), config("heal-p", quick(3))).expect("worker");
    // A permanent failure: a dead letter at its first attempt.
    let permanent = insert_many(db, "P", 1).await[0];
    let round = worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round");
    assert_eq!(round.dead_lettered, 1, "{round:?}");
    // A message that kills its sender: its last lease expires with its retries used up.
    let killer = insert_many(db, "K", 1).await[0];
    set_retry_count(ctx, &[killer], MAX_RETRIES as i32).await;
    claim_by_hand(db, &[killer], "dead-relay#1").await;
    age(db, killer, Column::ClaimedAt, Duration::from_secs(60)).await;
    assert_eq!(worker.reclaim_once().await.expect("reclaim"), 1);
    // Written by hand: the other kinds, an older version's error, no error, and one
    // retryable dead letter, the control.
    let by_hand = insert_many(db, "H", 6).await;
    let errors = [
        Some("unmarked: delivered, but the SUCCESS mark failed: constraint violated"),
        Some("configuration: access denied"),
        Some("broker busy"),
        Some("Retryable broker busy"),
        None,
        Some("retryable: broker busy"),
    ];
    for (&id, error) in by_hand.iter().zip(errors) {
        dead_letter(db, &[id], error).await;
    }
    let control = by_hand[5];
    let dead: Vec<i64> = [permanent, killer].into_iter().chain(by_hand).collect();
    set_retry_count(ctx, &dead, MAX_RETRIES as i32 + 1).await;
    // Every round of every one of them is due.
    age_many(db, &dead, Column::UpdateTime, Duration::from_secs(3600)).await;
    let before = events(ctx, &dead).await;
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    {
        // Awaited on this thread, so a thread-local recorder sees what the passes record.
        let _guard = metrics::set_default_local_recorder(&recorder);
        assert_eq!(
            worker.heal_once().await.expect("heal"),
            1,
            "the control only"
        );
        assert_eq!(worker.heal_once().await.expect("heal"), 0, "once");
    }
    let healed_total: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == sea_orm_outbox::metrics::HEALED)
        .map(|(.., value)| value)
        .collect();
    assert_eq!(
        healed_total,
        [metrics_util::debugging::DebugValue::Counter(1)],
        "outbox_healed_total"
    );
    broker.up();
    for (b, a) in before.iter().zip(events(ctx, &dead).await) {
        if a.id == control {
            assert_eq!((a.status, a.retry_count), (EventStatus::Wait, 3), "{a:?}");
            assert_eq!((a.claim_owner, a.claimed_at), (None, None));
            assert_eq!(a.last_error, b.last_error);
        } else {
            assert_eq!(&a, b, "left as it was");
        }
    }
    let e = event(db, permanent).await;
    let error = e.last_error.unwrap_or_default();
    assert!(error.starts_with("permanent: broker 10.0."), "{error}");
    let error = event(db, killer).await.last_error.unwrap_or_default();
    assert_eq!(
        FailureKind::of(&error),
        Some(FailureKind::LeaseExpired),
        "{error}"
    );
    assert_eq!(broker.attempts(permanent), 1, "never sent again");
    assert_eq!(worker.summary().healed, 1);
}

/// After its last round a dead letter stays `FAIL`: with 2 rounds an event that fails every
/// time is sent 3 + 2 times and then left for a person, however long it waits.
async fn the_round_cap_holds(ctx: &TestContext) {
    let id = insert_many(&ctx.db, "C", 1).await[0];
    let broker = Broker::down();
    let fleet = Fleet::start(ctx, 3, broker.clone(), [config("heal-c", quick(2))]).await;
    let last = MAX_RETRIES as i32 + 1 + 2;
    let capped = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            let e = event(&ctx.db, id).await;
            (e.status, e.retry_count) == (EventStatus::Fail, last)
        },
    )
    .await;
    assert!(capped, "{:?}", event(&ctx.db, id).await);
    // However long ago it failed, no round is left.
    age(
        &ctx.db,
        id,
        Column::UpdateTime,
        Duration::from_secs(7 * 24 * 3600),
    )
    .await;
    assert_eq!(fleet.workers()[0].heal_once().await.expect("heal"), 0);
    let s = fleet.stop().await[0];
    assert_eq!(s.healed, 2, "{s:?}");
    let e = event(&ctx.db, id).await;
    assert_eq!(
        (e.status, e.retry_count),
        (EventStatus::Fail, last),
        "{e:?}"
    );
    assert_eq!(broker.attempts(id), 5);
}

/// 300 dead letters whose first round is due, healed by four workers at once: each row once
/// (the counts add up to 300, a second pass finds none), and then delivered once each.
async fn several_workers_heal_each_row_once(ctx: &TestContext) {
    const N: usize = 300;
    let ids = insert_many(&ctx.db, "S", N).await;
    for (i, chunk) in ids.chunks(100).enumerate() {
        let error = format!("retryable: broker 10.0.0.{i}:10911 busy");
        dead_letter(&ctx.db, chunk, Some(&error)).await;
    }
    set_retry_count(ctx, &ids, MAX_RETRIES as i32 + 1).await;
    age_many(&ctx.db, &ids, Column::UpdateTime, Duration::from_secs(1)).await;
    let broker = Arc::new(Broker::default());
    let mut workers = Vec::new();
    for w in 0..4 {
        let c = config(&format!("heal-s{w}"), quick(3));
        workers.push(Worker::new(ctx.pool(3).await, broker.clone(), c).expect("worker"));
    }
    let healed = futures::future::join_all(workers.iter().map(|w| w.heal_once())).await;
    let healed: Vec<u64> = healed.into_iter().map(|r| r.expect("heal")).collect();
    assert_eq!(healed.iter().sum::<u64>(), N as u64, "{healed:?}");
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, N as u64);
    let again = futures::future::join_all(workers.iter().map(|w| w.heal_once())).await;
    assert!(again.into_iter().all(|r| r.expect("heal") == 0));
    let configs = (0..3).map(|w| config(&format!("heal-r{w}"), quick(3)));
    let fleet = Fleet::start(ctx, 3, broker.clone(), configs).await;
    let delivered = common::wait_for_success(&ctx.db, N as u64, Duration::from_secs(60)).await;
    fleet.stop().await;
    assert!(delivered);
    assert_eq!(
        (broker.sent.len(), broker.sent.distinct_ids().len()),
        (N, N)
    );
}

/// Ordered mode with `Block`: the head of a key becomes a dead letter and holds back the key's
/// later events (another key flows); healed, it goes first, then the rest of its key, in id
/// order.
async fn a_key_blocked_by_a_dead_letter_flows_in_order_once_it_heals(ctx: &TestContext) {
    let keys = ["K".to_owned(), "L".to_owned()];
    let ids = insert_keys(&ctx.db, &keys, 3).await;
    let (k, l) = (&ids["K"], &ids["L"]);
    let broker = Arc::new(Broker {
        down: AtomicBool::new(true),
        only: Some("K".into()),
        ..Default::default()
    });
    // Healed 1 s after its failure: long enough to see the key held back meanwhile.
    let heal = HealPolicy::new(Duration::from_secs(1), 5);
    let c = config("heal-o", Some(heal)).ordered(Some(OrderedPolicy::Block));
    let fleet = Fleet::start(ctx, 4, broker.clone(), [c]).await;
    let blocked = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(10),
        || async {
            // The head dead, the rest of its run handed back (they were claimed with it).
            let key = events(ctx, k).await;
            key[0].status == EventStatus::Fail
                && key[1..].iter().all(|e| e.status == EventStatus::Wait)
                && events(ctx, l)
                    .await
                    .iter()
                    .all(|e| e.status == EventStatus::Success)
        },
    )
    .await;
    assert!(blocked, "{:?}", events(ctx, k).await);
    for e in events(ctx, &k[1..]).await {
        assert_eq!(broker.attempts(e.id), 0, "held back: {e:?}");
        assert_eq!(
            (e.status, e.retry_count),
            (EventStatus::Wait, 0),
            "held back: {e:?}"
        );
    }
    broker.up();
    let delivered = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == 6 },
    )
    .await;
    let s = fleet.stop().await[0];
    assert!(delivered, "{:?} {s:?}", events(ctx, k).await);
    assert!(s.healed >= 1, "{s:?}");
    let order: Vec<i64> = broker
        .sent
        .messages()
        .iter()
        .filter(|m| m.biz_no == "K")
        .map(|m| m.event_id)
        .collect();
    assert_eq!(&order, k, "the key's events in id order, each once");
    for &id in &k[1..] {
        assert_eq!(broker.attempts(id), 1, "sent only after its head");
    }
}
