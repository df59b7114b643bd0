//! The maintenance services' `run_once`, called directly (issue 11): the reclaimer works in
//! bounded batches, the lease renewer reports lost leases, the gauge refresher reads the
//! backlog. Run on Postgres, MariaDB and SQLite (see `tests/common`).
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{count, event, TestContext};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::maintenance::{
    GaugeRefresher, LeaseRenewer, LeaseRenewerConfig, Reclaimer, ReclaimerConfig,
};
use sea_orm_outbox::{EventStatus, NewEvent, OutboxExt, WorkerConfig};

backend_tests!(
    reclaimer_reclaims_more_than_a_batch_in_several_statements,
    lease_renewer_renews_and_reports_lost_leases,
    gauge_refresher_reads_the_backlog,
    bad_arguments_are_refused_not_panicked_on,
);

/// Limits no database takes and an owner the column cannot hold are clear errors (found by an
/// adopter: `dead_letters(u64::MAX)` panicked in the driver).
async fn bad_arguments_are_refused_not_panicked_on(ctx: &TestContext) {
    use sea_orm_outbox::{ops, OutboxError};
    let e = ops::dead_letters(&ctx.db, u64::MAX)
        .await
        .expect_err("limit");
    assert!(matches!(e, OutboxError::InvalidArgument(_)), "{e}");
    assert!(ops::dead_letters(&ctx.db, 0)
        .await
        .expect("zero")
        .is_empty());
    for batch in [0, u64::MAX] {
        let e = ops::purge_delivered(&ctx.db, Duration::from_secs(1), batch)
            .await
            .expect_err("batch");
        assert!(matches!(e, OutboxError::InvalidArgument(_)), "{e}");
    }
    let config = LeaseRenewerConfig::for_worker(&WorkerConfig::default());
    let renewer = LeaseRenewer::new(ctx.db.clone(), config).expect("renewer");
    for owner in ["", " ", &"x".repeat(129)] {
        let e = renewer.run_once(owner, &[1]).await.expect_err("owner");
        assert!(matches!(e, OutboxError::InvalidArgument(_)), "{e}");
    }
}

/// Writes `n` events and claims them all for `owner`; returns their ids.
async fn claimed(ctx: &TestContext, n: usize, owner: &str) -> Vec<i64> {
    let ids = common::insert_many(&ctx.db, "M", n).await;
    common::claim_by_hand(&ctx.db, &ids, owner).await;
    ids
}

/// Ages the leases of `ids` by a minute (database clock).
async fn expire(ctx: &TestContext, ids: &[i64]) {
    common::age_many(&ctx.db, ids, Column::ClaimedAt, Duration::from_secs(60)).await
}

/// 25 expired leases, batches of 10: all reclaimed by one `run_once`, in three batches (each a
/// read of the ids and two guarded updates), counted through SeaORM's metric callback.
async fn reclaimer_reclaims_more_than_a_batch_in_several_statements(ctx: &TestContext) {
    let ids = claimed(ctx, 26, "died").await;
    expire(ctx, &ids[..25]).await;
    let mut db = ctx.pool(2).await;
    let updates = Arc::new(AtomicUsize::new(0));
    db.set_metric_callback({
        let updates = updates.clone();
        move |info| {
            if info
                .statement
                .sql
                .trim_start()
                .to_uppercase()
                .starts_with("UPDATE")
            {
                updates.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let config = ReclaimerConfig::new(Duration::from_secs(30), 3).batch_size(10);
    let reclaimer = Reclaimer::new(db, config).expect("reclaimer");
    let r = reclaimer.run_once().await.expect("reclaim");
    assert_eq!((r.requeued, r.dead_lettered), (25, 0));
    assert_eq!(
        updates.load(Ordering::SeqCst),
        6,
        "two guarded UPDATEs per batch of 10, 10, 5"
    );
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, 25);
    assert_eq!(
        event(&ctx.db, ids[25]).await.status,
        EventStatus::Sending,
        "a fresh lease"
    );
    assert_eq!(reclaimer.run_once().await.expect("again").total(), 0);
    assert!(Reclaimer::new(
        ctx.db.clone(),
        ReclaimerConfig::new(Duration::from_secs(30), 3).batch_size(0)
    )
    .is_err());
}

/// The renewer extends the leases still ours and reports the one another instance reclaimed.
async fn lease_renewer_renews_and_reports_lost_leases(ctx: &TestContext) {
    let ids = claimed(ctx, 5, "me").await;
    expire(ctx, &ids).await;
    // Another instance reclaims (and re-claims) the third.
    Events::update_many()
        .col_expr(Column::ClaimOwner, sea_orm::sea_query::Expr::val("other"))
        .filter(Column::Id.eq(ids[2]))
        .exec(&ctx.db)
        .await
        .expect("steal");
    let mut config = LeaseRenewerConfig::for_worker(&WorkerConfig::default());
    config.batch_size = 2;
    let renewer = LeaseRenewer::new(ctx.db.clone(), config).expect("renewer");
    let r = renewer.run_once("me", &ids).await.expect("renew");
    assert_eq!((r.renewed, r.lost.clone()), (4, vec![ids[2]]));
    // Renewed by the database clock: no longer expired for a 30 s lease.
    let reclaimer = Reclaimer::new(
        ctx.db.clone(),
        ReclaimerConfig::new(Duration::from_secs(30), 3),
    )
    .expect("reclaimer");
    assert_eq!(
        reclaimer.run_once().await.expect("reclaim").total(),
        1,
        "only the stolen one"
    );
}

/// The gauge refresher reads the backlog by status.
async fn gauge_refresher_reads_the_backlog(ctx: &TestContext) {
    claimed(ctx, 3, "me").await;
    let e = NewEvent::raw("G-1", "ORDER_CREATED", "{}");
    ctx.db.with_event(e).await.expect("insert");
    let g = GaugeRefresher::new(ctx.db.clone(), Duration::from_secs(15)).expect("refresher");
    let b = g.run_once().await.expect("backlog");
    assert_eq!((b.wait, b.sending, b.fail), (1, 3, 0));
    assert!(GaugeRefresher::new(ctx.db.clone(), Duration::ZERO).is_err());
}
