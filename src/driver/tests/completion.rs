//! Completion by delete (`Completion::Delete`) and the delivered counter `t_outbox_counter`,
//! on Postgres, MariaDB and SQLite: a late acknowledgement deletes nothing, the Postgres
//! delete-and-claim statement deletes only the delivering claim's rows, and the counter's
//! additions sum per outbox table.
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, EntityTrait};

use super::relay;
use crate::common::{age, event, insert_many, new_event, TestContext};
use crate::driver::{self, Claim, Transition};
use crate::event_record::{Column, Entity as Events};
use crate::{Completion, EventStatus};

crate::backend_tests!(
    late_delete_deletes_nothing,
    delete_with_claim_is_owner_guarded,
    counter_additions_sum_per_table,
);

/// Whether the row `id` is still in the table.
async fn exists(db: &impl ConnectionTrait, id: i64) -> bool {
    Events::find_by_id(id)
        .one(db)
        .await
        .expect("read")
        .is_some()
}

async fn late_delete_deletes_nothing(ctx: &TestContext) {
    let db = &ctx.db;
    let id = new_event(db, "ORD-D").await;
    let claim = |owner: &'static str, n: i32| async move {
        relay(db)
            .run(|d| d.claim(id, n, owner))
            .await
            .map(Claim::from)
    };
    assert_eq!(claim("a", 0).await.expect("claim"), Claim::Won);
    age(db, id, Column::ClaimedAt, Duration::from_secs(60)).await;
    let lease = Duration::from_secs(30);
    let reclaimed = driver::reclaim_stuck(&relay(db), lease, 3, driver::RECLAIM_BATCH)
        .await
        .expect("reclaim");
    assert_eq!(reclaimed.requeued, 1);
    let complete = |owner: &'static str| async move {
        relay(db)
            .transition(|d| d.complete(&[id], owner, Completion::Delete))
            .await
            .expect("complete")
    };
    // Reclaimed, not yet claimed again: `a`'s late acknowledgement leaves it waiting.
    assert_eq!(complete("a").await, Transition::LeaseLost);
    assert_eq!(event(db, id).await.status, EventStatus::Wait);
    assert_eq!(claim("b", 1).await.expect("claim"), Claim::Won);
    let before = event(db, id).await;
    assert_eq!(complete("a").await, Transition::LeaseLost);
    assert_eq!(event(db, id).await, before, "b's row is untouched");
    assert_eq!(complete("b").await, Transition::Applied);
    assert!(!exists(db, id).await, "b's delivery deleted the row");
    assert_eq!(complete("b").await, Transition::LeaseLost, "deleted once");
}

/// The Postgres delete-and-claim statement deletes only the rows still the delivering claim's
/// and claims only `WAIT` rows; the other backends have no such statement.
async fn delete_with_claim_is_owner_guarded(ctx: &TestContext) {
    let db = &ctx.db;
    if ctx.db_backend() != DbBackend::Postgres {
        return;
    }
    let all = insert_many(db, "ORD-DC", 3).await;
    let first: Vec<i64> = driver::claim_batch(&relay(db), "a#1", 2)
        .await
        .expect("claim")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(first, all[..2]);
    // The second event's lease went to another claim meanwhile.
    db.execute_unprepared(&format!(
        "UPDATE t_event_record SET claim_owner = 'b#1' WHERE id = {}",
        first[1]
    ))
    .await
    .expect("steal");
    let stolen = event(db, first[1]).await;
    let r = driver::mark_success_and_claim_batch(
        &relay(db),
        &first,
        "a#1",
        Completion::Delete,
        "a#2",
        9,
    )
    .await
    .expect("delete and claim");
    assert_eq!(r.marked, 1, "only the row still a#1's");
    assert_eq!(r.claimed.iter().map(|e| e.id).collect::<Vec<_>>(), all[2..]);
    assert!(!exists(db, first[0]).await);
    assert_eq!(event(db, first[1]).await, stolen, "b#1's row is untouched");
}

async fn counter_additions_sum_per_table(ctx: &TestContext) {
    let db = &ctx.db;
    let d = relay(db).driver();
    let other = d.with_table(driver::Table::new(None, "orders_outbox").expect("a valid name"));
    assert_eq!(driver::counter::delivered(db, d).await.expect("read"), 0);
    for (driver, n) in [(d, 3), (d, 4), (other, 5)] {
        db.execute(&driver.add_delivered(n)).await.expect("add");
    }
    assert_eq!(driver::counter::delivered(db, d).await.expect("read"), 7);
    assert_eq!(
        driver::counter::delivered(db, other).await.expect("read"),
        5
    );
}
