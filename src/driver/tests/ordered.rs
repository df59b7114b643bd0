//! The ordered claim statement by statement, on Postgres, MariaDB and SQLite: raced claims
//! never hold two events of one key, a dead letter retried under `Skip` waits for the event
//! out, and the deep scan finds a head behind a full window. Deliveries are completed as
//! `OUTBOX_TEST_COMPLETION` says (`tests/common/completion.rs`).
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_orm::ConnectionTrait;

use super::relay;
use crate::common::ordered::{flaky, ordered_config};
use crate::common::{completion, count, insert_keys, wait_until, Fleet, TestContext};
use crate::driver::HeadScan;
use crate::{ops, EventStatus, InMemoryPublisher, OrderedPolicy};

crate::backend_tests!(
    racing_claims_never_hold_two_events_of_one_key,
    a_dead_letter_retried_under_skip_waits_for_the_event_out,
    a_head_behind_a_full_window_is_found_by_a_deep_scan,
);

/// The claim alone, raced: 4 claimers on pools of their own call `driver::claim_ordered` in a
/// loop over 50 keys × 10 events and mark what they got `SUCCESS` (the [`flaky`] heads back off
/// once instead, their runs handed back). No key is ever held by two
/// claims at once, a claim of a key is its next events in id order, and every event claimed
/// had all earlier events of its key marked before.
async fn racing_claims_never_hold_two_events_of_one_key(ctx: &TestContext) {
    use crate::driver;
    let keys: Vec<String> = (0..50).map(|k| format!("R{k:02}")).collect();
    let ids = Arc::new(insert_keys(&ctx.db, &keys, 10).await);
    let held: Arc<Mutex<HashSet<String>>> = Arc::default();
    let marked: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let failed: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let mut claimers = Vec::new();
    for c in 0..4 {
        let db = ctx.pool(2).await;
        let (ids, held, marked, violations, failed) = (
            ids.clone(),
            held.clone(),
            marked.clone(),
            violations.clone(),
            failed.clone(),
        );
        claimers.push(tokio::spawn(async move {
            for round in 0.. {
                let owner = format!("racer-{c}#{round}");
                let got = driver::claim_ordered(
                    &relay(&db),
                    &owner,
                    OrderedPolicy::Block,
                    5,
                    10,
                    HeadScan::for_heads(5),
                )
                .await
                .expect("claim");
                if got.is_empty() {
                    if count(&db, EventStatus::Wait).await == 0 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let mut by_key: HashMap<String, Vec<i64>> = HashMap::new();
                for e in &got {
                    by_key.entry(e.biz_no.clone()).or_default().push(e.id);
                }
                for (key, run) in &by_key {
                    let mut v = violations.lock().expect("lock");
                    if !held.lock().expect("lock").insert(key.clone()) {
                        v.push(format!("{key} held twice"));
                    }
                    let all = &ids[key];
                    let start = all.iter().position(|id| *id == run[0]).expect("known id");
                    if all[start..start + run.len()] != run[..] {
                        v.push(format!("{key}: {run:?} is not a run of {all:?}"));
                    }
                    let m = marked.lock().expect("lock");
                    if let Some(early) = all[..start].iter().find(|id| !m.contains(id)) {
                        v.push(format!(
                            "{key}: {} claimed before {early} was marked",
                            run[0]
                        ));
                    }
                }
                tokio::task::yield_now().await;
                // Released from the bookkeeping before the mark commits, so that a claim right
                // after the commit is never taken for a double hold.
                for key in by_key.keys() {
                    held.lock().expect("lock").remove(key);
                }
                // A "failed send" of each flaky head on its first claim: it backs off 20 ms
                // (its followers, due earlier now, must still wait) and its run goes back.
                let mut got_ids = Vec::new();
                for run in by_key.values() {
                    if flaky(run[0]) && failed.lock().expect("lock").insert(run[0]) {
                        let backoff = Duration::from_millis(20);
                        let t = relay(&db)
                            .transition(|d| {
                                d.release_for_retry(run[0], &owner, backoff, "flaky", true)
                            })
                            .await
                            .expect("release for retry");
                        assert_eq!(t, driver::Transition::Applied);
                        relay(&db)
                            .run(|d| d.release_unsent(&run[1..], &owner))
                            .await
                            .expect("hand back");
                    } else {
                        got_ids.extend(run);
                    }
                }
                marked.lock().expect("lock").extend(&got_ids);
                let n = relay(&db)
                    .run(|d| d.complete(&got_ids, &owner, completion()))
                    .await
                    .expect("mark");
                assert_eq!(n, got_ids.len() as u64);
            }
        }));
    }
    let all = async {
        for c in claimers {
            c.await.expect("claimer");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("the claimers drained the table");
    assert_eq!(
        violations.lock().expect("lock").clone(),
        Vec::<String>::new()
    );
    assert_eq!(count(&ctx.db, EventStatus::Success).await, 500);
}

/// `Skip`: A0 is a dead letter and A1 went on; A0 retried while A1 is still out is not
/// claimed (two events of A would be held at once) until A1 is done, then it is.
async fn a_dead_letter_retried_under_skip_waits_for_the_event_out(ctx: &TestContext) {
    use crate::driver::{self, Transition};
    let db = &ctx.db;
    let ids = insert_keys(db, &["A".to_owned()], 2).await;
    let (a0, a1) = (ids["A"][0], ids["A"][1]);
    let claim = async |owner: &str| -> Vec<i64> {
        driver::claim_ordered(&relay(db), owner, OrderedPolicy::Skip, 5, 5, HeadScan::Deep)
            .await
            .expect("claim")
            .iter()
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(claim("r#1").await, [a0, a1], "the head and its run");
    assert_eq!(
        relay(db)
            .transition(|d| d.mark_fail(a0, "r#1", "refused"))
            .await
            .expect("fail"),
        Transition::Applied
    );
    assert_eq!(
        relay(db)
            .run(|d| d.release_unsent(&[a1], "r#1"))
            .await
            .expect("back"),
        1
    );
    assert_eq!(claim("r#2").await, [a1], "Skip goes past the dead letter");
    assert_eq!(
        ops::retry_dead(&crate::Outbox::default(), db, a0)
            .await
            .expect("retry"),
        ops::DeadLetterOutcome::Applied
    );
    assert!(claim("r#3").await.is_empty(), "A0 waits while A1 is out");
    assert_eq!(
        relay(db)
            .transition(|d| d.complete(&[a1], "r#2", completion()))
            .await
            .expect("mark"),
        Transition::Applied
    );
    assert_eq!(
        claim("r#4").await,
        [a0],
        "then the retried dead letter goes"
    );
}

/// Review finding S1: a key with a backlog (here 300 due events of `H`, older than anything
/// else) fills the claim's window of the oldest due rows (`HeadScan::Window`), so the head of
/// another key behind it (`C`) is not in the window; the deep scan finds it. The worker asks
/// for a deep scan as soon as a windowed claim found fewer heads than it had free slots: `C`
/// goes out in the worker's second claim, long before `H` has drained.
async fn a_head_behind_a_full_window_is_found_by_a_deep_scan(ctx: &TestContext) {
    use crate::driver;
    let db = &ctx.db;
    let h = insert_keys(db, &["H".to_owned()], 300).await;
    let c = insert_keys(db, &["C".to_owned()], 1).await["C"][0];
    let ids =
        |got: Vec<crate::event_record::Model>| -> Vec<i64> { got.iter().map(|e| e.id).collect() };
    let window = driver::claim_ordered(
        &relay(db),
        "w#1",
        OrderedPolicy::Block,
        2,
        2,
        HeadScan::Window(256),
    )
    .await
    .expect("windowed claim");
    assert_eq!(
        ids(window),
        h["H"][..2],
        "the window holds only H's backlog"
    );
    let deep = driver::claim_ordered(
        &relay(db),
        "w#2",
        OrderedPolicy::Block,
        2,
        2,
        HeadScan::Deep,
    )
    .await
    .expect("deep claim");
    assert_eq!(
        ids(deep),
        [c],
        "the deep scan finds C's head behind the window"
    );
    // Back to WAIT, and a worker does the same by itself.
    db.execute_unprepared(
        "UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL",
    )
    .await
    .expect("reset");
    let publisher = Arc::new(InMemoryPublisher::new());
    let config = ordered_config("deep", OrderedPolicy::Block)
        .send_concurrency(2)
        .batch_size(10);
    let fleet = Fleet::start(ctx, 1, publisher.clone(), [config]).await;
    let done = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async { count(&ctx.db, EventStatus::Success).await == 301 },
    )
    .await;
    fleet.stop().await;
    assert!(done, "not every event was delivered before the deadline");
    let sent: Vec<i64> = publisher.messages().iter().map(|m| m.event_id).collect();
    let at = sent.iter().position(|&id| id == c).expect("C delivered");
    assert!(
        at < 40,
        "C went out as delivery {at} of {}: it waited for H's backlog",
        sent.len()
    );
}
