//! Retention of delivered events (`WorkerConfig::retention`) on Postgres, MariaDB and SQLite
//! (see `tests/common`): a worker deletes the `SUCCESS` rows last updated longer ago than the
//! period, over several batches, and keeps the newer ones and every `WAIT`, `SENDING` and
//! `FAIL` row whatever its age; with `retention(None)` it deletes nothing.
mod common;

use std::time::Duration;

use common::{age_many, claim_by_hand, dead_letter, insert_many, test_config, TestContext};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{EventStatus, InMemoryPublisher, WorkerConfig};

backend_tests!(
    retention_deletes_only_delivered_events_past_the_period,
    retention_off_keeps_delivered_events,
);

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The rows of each kind this suite writes, by id.
struct Rows {
    old_delivered: Vec<i64>,
    new_delivered: Vec<i64>,
    kept: Vec<i64>,
}

/// 2,500 `SUCCESS` rows updated 8 days ago (three delete batches), 10 updated a day ago, and a
/// `WAIT` row (due tomorrow), a `SENDING` row (leased just now elsewhere) and a `FAIL` row, each
/// updated 8 days ago.
async fn rows(ctx: &TestContext) -> Rows {
    let db = &ctx.db;
    let old_delivered = insert_many(db, "OLD", 2_500).await;
    let new_delivered = insert_many(db, "NEW", 10).await;
    let delivered: Vec<i64> = old_delivered
        .iter()
        .chain(&new_delivered)
        .copied()
        .collect();
    for ids in delivered.chunks(1_000) {
        Events::update_many()
            .col_expr(Column::Status, Expr::val(EventStatus::Success.as_str()))
            .filter(Column::Id.is_in(ids.to_vec()))
            .exec(db)
            .await
            .expect("delivered");
    }
    for ids in old_delivered.chunks(1_000) {
        age_many(db, ids, Column::UpdateTime, 8 * DAY).await;
    }
    age_many(db, &new_delivered, Column::UpdateTime, DAY).await;
    let kept = insert_many(db, "KEPT", 3).await;
    let backend = db.get_database_backend();
    Events::update_many()
        .col_expr(
            Column::NextRetryTime,
            common::db_now(backend, Some(('+', DAY))),
        )
        .filter(Column::Id.eq(kept[0]))
        .exec(db)
        .await
        .expect("due tomorrow");
    claim_by_hand(db, &kept[1..2], "alive-elsewhere").await;
    dead_letter(db, &kept[2..], Some("refused")).await;
    age_many(db, &kept, Column::UpdateTime, 8 * DAY).await;
    Rows {
        old_delivered,
        new_delivered,
        kept,
    }
}

/// How many of `ids` are still in the table.
async fn remaining(ctx: &TestContext, ids: &[i64]) -> u64 {
    let mut n = 0;
    for chunk in ids.chunks(1_000) {
        n += Events::find()
            .filter(Column::Id.is_in(chunk.to_vec()))
            .count(&ctx.db)
            .await
            .expect("count");
    }
    n
}

/// A worker keeping 7 days: the old delivered rows are gone at its start, the rest stay.
async fn retention_deletes_only_delivered_events_past_the_period(ctx: &TestContext) {
    let rows = rows(ctx).await;
    let config = test_config("keeper").retention(Some(7 * DAY));
    let fleet = common::Fleet::start(
        ctx,
        5,
        std::sync::Arc::new(InMemoryPublisher::new()),
        [config],
    )
    .await;
    let gone = common::wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async { remaining(ctx, &rows.old_delivered).await == 0 },
    )
    .await;
    fleet.stop().await;
    assert!(
        gone,
        "{} old delivered rows left",
        remaining(ctx, &rows.old_delivered).await
    );
    assert_eq!(
        remaining(ctx, &rows.new_delivered).await,
        10,
        "newer delivered rows stay"
    );
    let kept: Vec<(i64, EventStatus)> = Events::find()
        .filter(Column::Id.is_in(rows.kept.clone()))
        .order_by_asc(Column::Id)
        .all(&ctx.db)
        .await
        .expect("read")
        .into_iter()
        .map(|e| (e.id, e.status))
        .collect();
    assert_eq!(
        kept,
        [
            (rows.kept[0], EventStatus::Wait),
            (rows.kept[1], EventStatus::Sending),
            (rows.kept[2], EventStatus::Fail)
        ],
        "rows not delivered stay, whatever their age"
    );
}

/// `retention(None)`: after the worker's first rounds, every row is still there.
async fn retention_off_keeps_delivered_events(ctx: &TestContext) {
    let rows = rows(ctx).await;
    let config: WorkerConfig = test_config("hoarder").retention(None);
    let fleet = common::Fleet::start(
        ctx,
        5,
        std::sync::Arc::new(InMemoryPublisher::new()),
        [config],
    )
    .await;
    assert!(fleet.started(Duration::from_secs(10)).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.stop().await;
    assert_eq!(remaining(ctx, &rows.old_delivered).await, 2_500);
    assert_eq!(remaining(ctx, &rows.kept).await, 3);
}
