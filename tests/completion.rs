//! What the relay does with a delivered row (`WorkerConfig::completion`), on Postgres, MariaDB
//! and SQLite (see `tests/common`), whatever `OUTBOX_TEST_COMPLETION` says (each test names its
//! completion): with `Completion::Delete` a delivered event leaves no row, and a late
//! acknowledgement (the row taken by another claim during the send) deletes nothing; with
//! `Completion::Update` the rows are `SUCCESS`. Either way `ops::stats(..).delivered` (the
//! relays' count in `t_outbox_counter`, added at each heartbeat and at a clean stop) equals the
//! number of events delivered once the workers have stopped.
//!
//! Each test runs a worker claiming in batches, then one claiming row by row (on Postgres the
//! batch claim completes a round's deliveries in the statement that claims the next batch).
mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{db_now, insert_many, test_config, wait_until, Fleet, TestContext};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder};
use sea_orm_outbox::event_record::{Column, Entity as Events, Model};
use sea_orm_outbox::{
    ops, ClaimStrategy, Completion, EventStatus, InMemoryPublisher, Outbox, OutboxMessage,
    PublishError, Publisher, WorkerConfig, WorkerSummary,
};

backend_tests!(
    completion_by_delete_leaves_no_row_and_counts_every_delivery,
    completion_by_update_leaves_success_rows_and_counts_every_delivery,
    a_late_ack_deletes_nothing,
);

/// Events each test writes per worker.
const N: usize = 150;
/// Of those, the events whose lease changes hands during their send in
/// [`a_late_ack_deletes_nothing`], and the claim that takes them.
const TAKEN: usize = 10;
const THIEF: &str = "thief#1";

/// The workers of each test, one after the other, completing as `completion`: one claiming in
/// batches, one row by row.
fn configs(completion: Completion) -> [WorkerConfig; 2] {
    [
        test_config("batch").claim_strategy(ClaimStrategy::Batch),
        test_config("per-row").claim_strategy(ClaimStrategy::PerRow),
    ]
    .map(|c| c.batch_size(20).completion(completion))
}

/// The rows of `t_event_record`, by id.
async fn rows(db: &DatabaseConnection) -> Vec<Model> {
    Events::find()
        .order_by_asc(Column::Id)
        .all(db)
        .await
        .expect("rows")
}

/// `ops::stats` of the default outbox.
async fn stats(ctx: &TestContext) -> ops::OutboxStats {
    ops::stats(&Outbox::default(), &ctx.db, Duration::from_secs(600))
        .await
        .expect("stats")
}

/// Runs the worker of `config` until `done` says so (60 s at most); returns its summary.
async fn run_until<F, Fut>(
    ctx: &TestContext,
    publisher: Arc<dyn Publisher>,
    config: WorkerConfig,
    done: F,
) -> WorkerSummary
where
    F: Fn(WorkerSummary) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let fleet = Fleet::start(ctx, 3, publisher, [config]).await;
    let w = fleet.workers()[0].clone();
    let finished = wait_until(Duration::from_secs(60), Duration::from_millis(20), || {
        done(w.summary())
    })
    .await;
    let summary = fleet.stop().await[0];
    assert!(finished, "{summary:?}: {:?}", rows(&ctx.db).await);
    summary
}

/// Delivers `N` events with each worker of [`configs`] in turn; returns the events' ids and
/// the workers' summed `published` once they have stopped. Every event is published once.
async fn deliver(ctx: &TestContext, completion: Completion) -> (HashSet<i64>, u64) {
    let publisher = Arc::new(InMemoryPublisher::new());
    let (mut ids, mut published) = (HashSet::new(), 0);
    for (i, config) in configs(completion).into_iter().enumerate() {
        ids.extend(insert_many(&ctx.db, &format!("C{i}"), N).await);
        let summary = run_until(ctx, publisher.clone(), config, |s| async move {
            s.published == N as u64
        })
        .await;
        assert_eq!(summary.published, N as u64, "{summary:?}");
        published += summary.published;
    }
    assert_eq!(publisher.distinct_ids(), ids);
    assert_eq!(publisher.duplicates(), 0);
    (ids, published)
}

/// `Completion::Delete`: no row is left, and the counter has every delivery.
async fn completion_by_delete_leaves_no_row_and_counts_every_delivery(ctx: &TestContext) {
    let (_, published) = deliver(ctx, Completion::Delete).await;
    assert_eq!(rows(&ctx.db).await, [], "delivered rows are deleted");
    let s = stats(ctx).await;
    assert_eq!(
        (s.wait, s.sending, s.success, s.fail, s.delivered),
        (0, 0, 0, 0, published)
    );
}

/// `Completion::Update`: every row is `SUCCESS`, and the counter has every delivery.
async fn completion_by_update_leaves_success_rows_and_counts_every_delivery(ctx: &TestContext) {
    let (ids, published) = deliver(ctx, Completion::Update).await;
    let rows = rows(&ctx.db).await;
    assert_eq!(rows.iter().map(|e| e.id).collect::<HashSet<_>>(), ids);
    assert!(
        rows.iter().all(|e| e.status == EventStatus::Success),
        "{rows:?}"
    );
    let s = stats(ctx).await;
    assert_eq!(
        (s.wait, s.sending, s.success, s.fail, s.delivered),
        (0, 0, 2 * N as u64, 0, published)
    );
}

/// Publishes everything; while sending an event whose key starts with `TAKEN`, gives the
/// event's lease to [`THIEF`] first, as a reclaim and another instance's claim would (the
/// event stays `SENDING`).
struct Thief {
    db: DatabaseConnection,
    inner: InMemoryPublisher,
}

#[async_trait]
impl Publisher for Thief {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if m.biz_no.starts_with("TAKEN") {
            let now = db_now(self.db.get_database_backend(), None);
            Events::update_many()
                .col_expr(Column::ClaimOwner, Expr::val(THIEF))
                .col_expr(Column::ClaimedAt, now)
                .filter(Column::Id.eq(m.event_id))
                .exec(&self.db)
                .await
                .expect("take the lease");
        }
        self.inner.publish(m).await
    }
}

/// `Completion::Delete`, each worker in turn: of its 150 events, 10 change hands during their
/// send. Their acknowledgements are late and delete nothing (the rows stay `SENDING` under
/// the other claim, as it left them); the other rows are deleted, and the counter has them.
async fn a_late_ack_deletes_nothing(ctx: &TestContext) {
    let publisher = Arc::new(Thief {
        db: ctx.pool(2).await,
        inner: InMemoryPublisher::new(),
    });
    let (mut taken, mut published) = (Vec::new(), 0);
    for (i, config) in configs(Completion::Delete).into_iter().enumerate() {
        // Written in between the others, so that claims mix them.
        insert_many(&ctx.db, &format!("KEPT{i}A"), (N - TAKEN) / 2).await;
        taken.extend(insert_many(&ctx.db, &format!("TAKEN{i}"), TAKEN).await);
        insert_many(&ctx.db, &format!("KEPT{i}B"), (N - TAKEN) / 2).await;
        let summary = run_until(ctx, publisher.clone(), config, |s| async move {
            s.published + s.late_acks == N as u64
        })
        .await;
        assert_eq!(
            (summary.published, summary.late_acks),
            ((N - TAKEN) as u64, TAKEN as u64),
            "{summary:?}"
        );
        published += summary.published;
    }
    assert_eq!(
        publisher.inner.distinct_ids().len(),
        2 * N,
        "every event sent"
    );
    // The rows of the late acknowledgements are the other claim's, as it left them.
    let left = rows(&ctx.db).await;
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), taken);
    for e in &left {
        assert_eq!(
            (e.status, e.claim_owner.as_deref(), e.retry_count),
            (EventStatus::Sending, Some(THIEF), 0),
            "{e:?}"
        );
    }
    let s = stats(ctx).await;
    assert_eq!(
        (s.wait, s.sending, s.success, s.delivered),
        (0, 2 * TAKEN as u64, 0, published)
    );
}
