//! Where the batch claim's scan starts (MariaDB/MySQL resume it after a full claim,
//! `mysql/resume.rs`): an event due before the resume point is still claimed, after a claim
//! that was not full, or once the scan from the start is due; on every backend each event is
//! claimed once.
use std::collections::HashSet;
use std::time::Duration;

use super::relay;
use crate::common::{insert_many, TestContext};
use crate::driver;
use crate::driver::mysql::resume::FULL_SCAN_EVERY;
use crate::{NewEvent, OutboxExt};

crate::backend_tests!(
    an_event_due_before_the_resume_point_is_claimed_after_a_partial_claim,
    an_event_due_before_the_resume_point_is_claimed_by_the_periodic_full_scan,
);

/// A straggler (due an hour ago, written after the first claim) under full claims of 10.
async fn straggler(ctx: &TestContext) -> i64 {
    ctx.db
        .with_event(
            NewEvent::raw("LATE", "ORDER_CREATED", "{}")
                .deliver_at(chrono::Utc::now() - chrono::Duration::hours(1)),
        )
        .await
        .expect("straggler")
}

async fn an_event_due_before_the_resume_point_is_claimed_after_a_partial_claim(ctx: &TestContext) {
    let ids = insert_many(&ctx.db, "ORD", 30).await;
    let r = relay(&ctx.db);
    let first = driver::claim_batch(&r, "w#1", 10).await.expect("claim");
    assert_eq!(first.iter().map(|e| e.id).collect::<Vec<_>>(), ids[..10]);
    let late = straggler(ctx).await;
    let mut seen: HashSet<i64> = first.iter().map(|e| e.id).collect();
    let mut rounds = Vec::new();
    for k in 2..8 {
        let got = driver::claim_batch(&r, &format!("w#{k}"), 10)
            .await
            .expect("claim");
        for e in &got {
            assert!(seen.insert(e.id), "event {} claimed twice", e.id);
        }
        rounds.push(got.iter().map(|e| e.id).collect::<Vec<_>>());
        if seen.contains(&late) && seen.len() == 31 {
            break;
        }
    }
    assert!(
        seen.contains(&late),
        "the straggler was never claimed: {rounds:?}"
    );
    assert_eq!(seen.len(), 31, "{rounds:?}");
    if ctx.db_backend() == sea_orm::DbBackend::MySql {
        // The resumed scans took the rest of the backlog first.
        assert_eq!(rounds[0], ids[10..20], "{rounds:?}");
        assert!(!rounds[0].contains(&late), "{rounds:?}");
    }
}

async fn an_event_due_before_the_resume_point_is_claimed_by_the_periodic_full_scan(
    ctx: &TestContext,
) {
    let ids = insert_many(&ctx.db, "ORD", 40).await;
    let r = relay(&ctx.db);
    let first = driver::claim_batch(&r, "w#1", 10).await.expect("claim");
    assert_eq!(first.iter().map(|e| e.id).collect::<Vec<_>>(), ids[..10]);
    let late = straggler(ctx).await;
    tokio::time::sleep(FULL_SCAN_EVERY + Duration::from_millis(100)).await;
    // Full claims all along, but the last scan from the start is over a second old.
    let next = driver::claim_batch(&r, "w#2", 10).await.expect("claim");
    assert_eq!(next.len(), 10);
    assert_eq!(next[0].id, late, "{next:?}");
}
