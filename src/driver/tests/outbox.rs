//! The owner-guarded transitions of claimed rows (late acknowledgements, the Postgres
//! mark-and-claim statement) and the rows the claims return, on Postgres, MariaDB and SQLite.
//! Deliveries are completed as `OUTBOX_TEST_COMPLETION` says (`tests/common/completion.rs`).
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend};

use super::relay;
use crate::common::{age, completion, event, insert_many, new_event, TestContext};
use crate::driver::{self, Claim, Transition};
use crate::event_record::Column;
use crate::{EventStatus, NewEvent, OutboxExt, StatementProtocol};

crate::backend_tests!(
    late_ack_changes_nothing,
    mark_with_claim_is_owner_guarded,
    claims_return_the_rows_as_stored,
);

async fn late_ack_changes_nothing(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-L").await;
    assert_eq!(
        relay(db)
            .run(|d| d.claim(id, 0, "a"))
            .await
            .map(Claim::from)
            .expect("claim"),
        Claim::Won
    );
    age(db, id, Column::ClaimedAt, Duration::from_secs(60)).await;
    let reclaimed = driver::reclaim_stuck(
        &relay(db),
        Duration::from_secs(30),
        3,
        driver::RECLAIM_BATCH,
    )
    .await
    .expect("reclaim");
    assert_eq!((reclaimed.requeued, reclaimed.dead_lettered), (1, 0));
    // The reclaim counted as an attempt.
    assert_eq!(event(db, id).await.retry_count, 1);
    assert_eq!(
        relay(db)
            .run(|d| d.claim(id, 1, "b"))
            .await
            .map(Claim::from)
            .expect("claim"),
        Claim::Won
    );
    assert_eq!(
        relay(db)
            .run(|d| d.claim(id, 1, "c"))
            .await
            .map(Claim::from)
            .expect("claim"),
        Claim::Lost
    );
    let before = event(db, id).await;
    assert_eq!(
        (before.status, before.claim_owner.as_deref()),
        (EventStatus::Sending, Some("b"))
    );

    assert_eq!(
        relay(db)
            .transition(|d| d.complete(&[id], "a", completion()))
            .await
            .expect("ack"),
        Transition::LeaseLost
    );
    assert_eq!(
        relay(db)
            .transition(|d| d.release_for_retry(id, "a", Duration::from_secs(5), "late", true))
            .await
            .expect("release"),
        Transition::LeaseLost
    );
    assert_eq!(
        relay(db)
            .transition(|d| d.mark_fail(id, "a", "late"))
            .await
            .expect("fail"),
        Transition::LeaseLost
    );
    assert_eq!(event(db, id).await, before, "B's row is untouched");
    assert_eq!(
        relay(db)
            .transition(|d| d.complete(&[id], "b", completion()))
            .await
            .expect("ack"),
        Transition::Applied
    );
    assert_eq!(event(db, id).await.status, EventStatus::Success);
}

/// `driver::mark_success_and_claim_batch` (Postgres; the others have no such statement): the
/// mark is guarded by the delivering claim's owner and counted by its own `rows_affected`, the
/// claim takes only `WAIT` rows (never the ones being marked), both in one statement.
async fn mark_with_claim_is_owner_guarded(ctx: &TestContext) {
    let db = &ctx.db;
    let backend = db.get_database_backend();
    let all = insert_many(db, "ORD-MC", 3).await;
    let first: Vec<i64> = driver::claim_batch(&relay(db), "a#1", 2)
        .await
        .expect("claim")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(first.len(), 2);
    let rest: Vec<i64> = all
        .iter()
        .copied()
        .filter(|id| !first.contains(id))
        .collect();
    if backend != DbBackend::Postgres {
        assert!(!driver::Driver::of(backend)
            .expect("a known backend")
            .mark_and_claim_in_one());
        assert!(driver::mark_success_and_claim_batch(
            &relay(db),
            &first,
            "a#1",
            completion(),
            "a#2",
            9
        )
        .await
        .is_err());
        return;
    }
    // The second event's lease went to another claim meanwhile.
    db.execute_unprepared(&format!(
        "UPDATE t_event_record SET claim_owner = 'b#1' WHERE id = {}",
        first[1]
    ))
    .await
    .expect("steal");
    let stolen = event(db, first[1]).await;
    let r = driver::mark_success_and_claim_batch(&relay(db), &first, "a#1", completion(), "a#2", 9)
        .await
        .expect("mark and claim");
    assert_eq!(r.marked, 1, "only the row still a#1's");
    assert_eq!(r.claimed.iter().map(|e| e.id).collect::<Vec<_>>(), rest);
    assert_eq!(
        (r.claimed[0].status, r.claimed[0].claim_owner.as_deref()),
        (EventStatus::Sending, Some("a#2"))
    );
    assert_eq!(event(db, first[0]).await.status, EventStatus::Success);
    assert_eq!(event(db, first[1]).await, stolen, "b#1's row is untouched");
    assert_eq!(event(db, rest[0]).await, r.claimed[0]);
    // Nothing left to claim: the mark alone; a row of another claim is not marked.
    let r = driver::mark_success_and_claim_batch(
        &relay(db),
        &[rest[0], first[0]],
        "a#2",
        completion(),
        "a#3",
        9,
    )
    .await
    .expect("mark only");
    assert_eq!((r.marked, r.claimed.len()), (1, 0));
    assert_eq!(event(db, rest[0]).await.status, EventStatus::Success);
}

/// Every claim returns each event exactly as the table now holds it, also the columns a claim
/// does not set (`last_error` and `headers` here not `NULL`, a retry count above 0) and those the
/// Postgres batch claim does not return but fills in (`status`, `claim_owner`, `update_time`):
/// `claim_batch` on every backend; on Postgres also the mark-and-claim statement, and both
/// through the simple protocol (values inlined, results in text format).
async fn claims_return_the_rows_as_stored(ctx: &TestContext) {
    let db = &ctx.db;
    let backend = db.get_database_backend();
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            db.with_event(
                NewEvent::raw(
                    format!("ORD-RS-{i}"),
                    "ORDER_PAID",
                    format!(r#"{{"n":{i}}}"#),
                )
                .header("tenant", "acme")
                .header("trace", format!("t-{i}")),
            )
            .await
            .expect("insert"),
        );
    }
    // An earlier failed attempt: a reason kept and a retry count, as a back-off leaves them.
    db.execute_unprepared(&format!(
        "UPDATE t_event_record SET last_error = 'broker said no', retry_count = 2 WHERE id IN ({}, {})",
        ids[0], ids[3]
    ))
    .await
    .expect("earlier attempt");
    // Every timestamp column a value of its own, so that no two can be read in each other's place.
    // (Due in id order: the claims take the oldest due first.)
    for (i, id) in (0u64..).zip(&ids) {
        age(db, *id, Column::CreateTime, Duration::from_secs(7200 - i)).await;
        age(db, *id, Column::NextRetryTime, Duration::from_secs(60 - i)).await;
    }
    let same = |claimed: &[crate::event_record::Model], owner: &str| {
        let claimed = claimed.to_vec();
        let owner = owner.to_owned();
        async move {
            assert!(!claimed.is_empty());
            for e in &claimed {
                assert_eq!(
                    (e.status, e.claim_owner.as_deref()),
                    (EventStatus::Sending, Some(owner.as_str()))
                );
                assert_eq!(*e, event(db, e.id).await, "claimed as stored");
                assert!(e.headers.as_deref().is_some_and(|h| h.contains("acme")));
            }
        }
    };
    let first = driver::claim_batch(&relay(db), "rs#1", 2)
        .await
        .expect("claim");
    assert_eq!(first.iter().map(|e| e.id).collect::<Vec<_>>(), ids[..2]);
    assert_eq!(first[0].last_error.as_deref(), Some("broker said no"));
    assert_eq!(first[0].retry_count, 2);
    same(&first, "rs#1").await;
    if backend != DbBackend::Postgres {
        return;
    }
    let done: Vec<i64> = first.iter().map(|e| e.id).collect();
    let r =
        driver::mark_success_and_claim_batch(&relay(db), &done, "rs#1", completion(), "rs#2", 2)
            .await
            .expect("mark and claim");
    assert_eq!(r.marked, 2);
    assert_eq!(
        r.claimed.iter().map(|e| e.id).collect::<Vec<_>>(),
        ids[2..4]
    );
    assert_eq!(r.claimed[1].last_error.as_deref(), Some("broker said no"));
    same(&r.claimed, "rs#2").await;
    // The same two statements as simple-protocol queries.
    let simple = driver::RelayDb::new(db.clone(), StatementProtocol::Simple).expect("simple");
    let claimed = driver::claim_batch(&simple, "rs#3", 1)
        .await
        .expect("simple claim");
    assert_eq!(claimed.iter().map(|e| e.id).collect::<Vec<_>>(), ids[4..5]);
    same(&claimed, "rs#3").await;
    let r =
        driver::mark_success_and_claim_batch(&simple, &[ids[4]], "rs#3", completion(), "rs#4", 5)
            .await
            .expect("simple mark and claim");
    assert_eq!((r.marked, r.claimed.len()), (1, 1));
    same(&r.claimed, "rs#4").await;
    // Nothing left: the one row of the LEFT JOIN's empty side is not an event.
    let r =
        driver::mark_success_and_claim_batch(&simple, &[ids[5]], "rs#4", completion(), "rs#5", 5)
            .await
            .expect("simple mark only");
    assert_eq!((r.marked, r.claimed.len()), (1, 0));
}
