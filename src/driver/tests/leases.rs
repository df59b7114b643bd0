//! Batch claims and the reclaim of expired leases, statement by statement, on Postgres,
//! MariaDB and SQLite: disjoint claims, owner guards on batch-claimed rows (deliveries
//! completed as `OUTBOX_TEST_COMPLETION` says), the reclaim in bounded batches.
use std::time::Duration;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use super::relay;
use crate::common::{age_many, completion, count, event, insert_many, TestContext};
use crate::driver::{self, Transition};
use crate::event_record::{Column, Entity as Events};
use crate::EventStatus;

crate::backend_tests!(
    batch_claims_are_disjoint_and_guarded,
    reclaim_works_in_bounded_batches,
);

async fn batch_claims_are_disjoint_and_guarded(ctx: &TestContext) {
    let db = &ctx.db;
    let ids = insert_many(&ctx.db, "ORD", 30).await;
    let a = driver::claim_batch(&relay(db), "a", 20)
        .await
        .expect("claim a");
    let b = driver::claim_batch(&relay(db), "b", 20)
        .await
        .expect("claim b");
    assert_eq!((a.len(), b.len()), (20, 10));
    // Oldest due first, disjoint, each row SENDING under its owner.
    assert_eq!(
        a.iter().map(|e| e.id).collect::<Vec<_>>(),
        ids[..20].to_vec()
    );
    for (owner, claimed) in [("a", &a), ("b", &b)] {
        for e in claimed.iter() {
            assert_eq!(
                (e.status, e.claim_owner.as_deref()),
                (EventStatus::Sending, Some(owner))
            );
            assert!(e.claimed_at.is_some());
            // What the claim returns is what the database holds (MariaDB builds it in memory).
            assert_eq!(e, &event(db, e.id).await);
        }
    }
    assert!(driver::claim_batch(&relay(db), "c", 20)
        .await
        .expect("claim c")
        .is_empty());
    // Owner guards hold for batch-claimed rows.
    let first = a[0].id;
    assert_eq!(
        relay(db)
            .transition(|d| d.complete(&[first], "b", completion()))
            .await
            .expect("ack"),
        Transition::LeaseLost
    );
    assert_eq!(
        relay(db)
            .run(|d| d.complete(&[first, b[0].id], "a", completion()))
            .await
            .expect("ack"),
        1
    );
    assert_eq!(event(db, first).await.status, EventStatus::Success);
    assert_eq!(event(db, b[0].id).await.status, EventStatus::Sending);
    // Expired batch leases are reclaimed like per-row ones.
    let a_ids: Vec<i64> = a[1..].iter().map(|e| e.id).collect();
    age_many(db, &a_ids, Column::ClaimedAt, Duration::from_secs(60)).await;
    let r = driver::reclaim_stuck(
        &relay(db),
        Duration::from_secs(30),
        3,
        driver::RECLAIM_BATCH,
    )
    .await
    .expect("reclaim");
    assert_eq!((r.requeued, r.dead_lettered), (19, 0));
    // A reclaimed row is claimable again, and A's late ack changes nothing.
    let again = driver::claim_batch(&relay(db), "c", 50)
        .await
        .expect("claim c");
    assert_eq!(again.len(), 19);
    assert_eq!(
        relay(db)
            .run(|d| d.complete(&a_ids, "a", completion()))
            .await
            .expect("late"),
        0
    );
    assert_eq!(
        relay(db)
            .run(|d| d.release_unsent(&a_ids, "a"))
            .await
            .expect("late"),
        0
    );
    assert_eq!(
        relay(db)
            .run(|d| d.release_unsent(&a_ids, "c"))
            .await
            .expect("hand back"),
        19
    );
    assert_eq!(count(db, EventStatus::Wait).await, 19);
}

/// More expired leases than one reclaim batch: all are reclaimed, in several statements, and
/// those whose retries are used up become dead letters. A fresh lease is left alone.
async fn reclaim_works_in_bounded_batches(ctx: &TestContext) {
    let db = &ctx.db;
    let ids = insert_many(&ctx.db, "EXPIRED", 7).await;
    let claimed = driver::claim_batch(&relay(db), "died", 8)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 7);
    // Six leases expired, two of them with their retries used up; the seventh is fresh.
    age_many(db, &ids[..6], Column::ClaimedAt, Duration::from_secs(60)).await;
    Events::update_many()
        .col_expr(Column::RetryCount, sea_orm::sea_query::Expr::val(3))
        .filter(Column::Id.is_in(ids[..2].to_vec()))
        .exec(db)
        .await
        .expect("used up");
    let r = driver::reclaim_stuck(&relay(db), Duration::from_secs(30), 3, 4)
        .await
        .expect("reclaim");
    assert_eq!((r.requeued, r.dead_lettered), (4, 2));
    assert_eq!(count(db, EventStatus::Wait).await, 4);
    assert_eq!(count(db, EventStatus::Fail).await, 2);
    assert_eq!(event(db, ids[6]).await.status, EventStatus::Sending);
    assert!(
        driver::reclaim_stuck(&relay(db), Duration::from_secs(30), 3, 0)
            .await
            .is_err()
    );
}
