//! Operations: the library's ops functions and the idempotent consumer helper (the `outbox`
//! tool's suite is the cli crate's `tests/ops.rs`). Runs on Postgres, MariaDB and SQLite (see
//! `tests/common`).
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{insert_many, order, Fleet, TestContext};
use sea_orm::{ConnectionTrait, DatabaseConnection, EntityTrait, PaginatorTrait};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::consumer::consume_once;
use sea_orm_outbox::consumer::consumed_message::Entity as Consumed;
use sea_orm_outbox::consumer::Consumed as Outcome;
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{ops, EventStatus, Migrator, OutboxError, WorkerConfig};

backend_tests!(
    consume_once_runs_the_handler_once,
    failing_handler_leaves_no_record,
    concurrent_duplicates_run_the_handler_once,
    consume_once_rejects_bad_ids_and_missing_table,
    retry_all_dead_retries_each_dead_letter_once_while_relays_fail_them_again,
);

fn fast_config(owner: &str) -> WorkerConfig {
    common::test_config(owner)
}

// ---------------------------------------------------------------------------------------------
// idempotent consumer

#[derive(Debug)]
enum HandlerError {
    Outbox(#[allow(dead_code)] OutboxError),
    Boom,
}

impl From<OutboxError> for HandlerError {
    fn from(e: OutboxError) -> Self {
        HandlerError::Outbox(e)
    }
}

impl From<sea_orm::DbErr> for HandlerError {
    fn from(e: sea_orm::DbErr) -> Self {
        HandlerError::Outbox(e.into())
    }
}

/// The handler of the tests: "adds points" by inserting an order row named after the message.
async fn add_points<C: ConnectionTrait>(txn: &C, msg_id: &str) -> Result<(), sea_orm::DbErr> {
    order::Entity::insert(order::new(&format!("points-{msg_id}"), 10))
        .exec(txn)
        .await
        .map(|_| ())
}

async fn orders(db: &DatabaseConnection) -> u64 {
    order::Entity::find().count(db).await.expect("count")
}

async fn consumed(db: &DatabaseConnection) -> u64 {
    Consumed::find().count(db).await.expect("count")
}

async fn consume_once_runs_the_handler_once(ctx: &TestContext) {
    let db = &ctx.db;
    let runs = AtomicUsize::new(0);
    let mut outcomes = Vec::new();
    // The same eventId delivered three times (a re-send by another relay instance).
    for _ in 0..3 {
        let outcome = consume_once(db, "points", "42", async |txn| {
            runs.fetch_add(1, Ordering::SeqCst);
            add_points(txn, "42").await?;
            Ok::<_, HandlerError>("added")
        })
        .await
        .expect("consume");
        outcomes.push(outcome);
    }
    assert_eq!(
        outcomes,
        vec![
            Outcome::Processed("added"),
            Outcome::Duplicate,
            Outcome::Duplicate
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(orders(db).await, 1);
    let rows = Consumed::find().all(db).await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].consumer_group.as_str(), rows[0].msg_id.as_str()),
        ("points", "42")
    );

    // Another consumer group processes the same message for itself.
    let other = consume_once(db, "sms", "42", async |_| Ok::<_, HandlerError>(()))
        .await
        .expect("consume");
    assert_eq!(other, Outcome::Processed(()));
    assert_eq!(consumed(db).await, 2);

    // Inside the caller's transaction: the nested transaction is a savepoint.
    use sea_orm::TransactionTrait;
    let txn = db.begin().await.expect("begin");
    let inner = consume_once(&txn, "points", "43", async |t| {
        add_points(t, "43").await?;
        Ok::<_, HandlerError>(())
    })
    .await
    .expect("consume");
    assert_eq!(inner, Outcome::Processed(()));
    txn.rollback().await.expect("rollback");
    assert_eq!(
        (orders(db).await, consumed(db).await),
        (1, 2),
        "outer rollback undoes both"
    );
}

async fn failing_handler_leaves_no_record(ctx: &TestContext) {
    let db = &ctx.db;
    let err = consume_once(db, "points", "7", async |txn| {
        add_points(txn, "7").await?;
        Err::<(), _>(HandlerError::Boom)
    })
    .await
    .expect_err("handler fails");
    assert!(matches!(err, HandlerError::Boom), "{err:?}");
    assert_eq!(orders(db).await, 0, "handler's write rolled back");
    assert_eq!(consumed(db).await, 0, "no t_consumed_message row");

    // The redelivery is processed.
    let runs = AtomicUsize::new(0);
    let outcome = consume_once(db, "points", "7", async |txn| {
        runs.fetch_add(1, Ordering::SeqCst);
        add_points(txn, "7").await?;
        Ok::<_, HandlerError>(())
    })
    .await
    .expect("consume");
    assert_eq!(outcome, Outcome::Processed(()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((orders(db).await, consumed(db).await), (1, 1));
}

async fn concurrent_duplicates_run_the_handler_once(ctx: &TestContext) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let db = ctx.pool(2).await;
        let runs = runs.clone();
        tasks.push(tokio::spawn(async move {
            consume_once(&db, "points", "99", async |txn| {
                runs.fetch_add(1, Ordering::SeqCst);
                add_points(txn, "99").await?;
                // Hold the transaction open so the others arrive meanwhile.
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, HandlerError>(())
            })
            .await
        }));
    }
    let mut processed = 0;
    for t in tasks {
        match t.await.expect("task").expect("consume") {
            Outcome::Processed(()) => processed += 1,
            Outcome::Duplicate => {}
        }
    }
    assert_eq!(processed, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((orders(&ctx.db).await, consumed(&ctx.db).await), (1, 1));
}

async fn consume_once_rejects_bad_ids_and_missing_table(ctx: &TestContext) {
    let db = &ctx.db;
    let long = "x".repeat(65);
    for (group, id) in [
        ("", "1"),
        ("g", " "),
        ("g", long.as_str()),
        (long.as_str(), "1"),
    ] {
        let err = consume_once(db, group, id, async |_| Ok::<_, OutboxError>(()))
            .await
            .expect_err("invalid");
        assert!(matches!(err, OutboxError::InvalidArgument(_)), "{err}");
    }
    let max = "x".repeat(64);
    let first = consume_once(db, &max, &max, async |_| Ok::<_, OutboxError>(()))
        .await
        .expect("64 characters fit");
    assert!(matches!(first, Outcome::Processed(())), "{first:?}");
    assert_eq!(consumed(db).await, 1);
    // The newest four: the heartbeat table, the biz_no index, the headers column, then the
    // consumer's table.
    common::unobserve_deletions(db, &sea_orm_outbox::Outbox::default()).await;
    Migrator::down(db, Some(4)).await.expect("down");
    let err = consume_once(db, "g", "1", async |_| Ok::<_, OutboxError>(()))
        .await
        .expect_err("no table");
    assert!(matches!(err, OutboxError::TableMissing(_)), "{err}");
    assert!(err.to_string().contains("run the migration"), "{err}");
}

/// `retry_all_dead` over more dead letters than one batch, while two relays whose publisher
/// refuses everything (permanently) turn the retried events straight back into dead letters:
/// each dead letter is retried exactly once by the call (it pages by id), and the call ends.
async fn retry_all_dead_retries_each_dead_letter_once_while_relays_fail_them_again(
    ctx: &TestContext,
) {
    use common::ScriptedPublisher;
    const N: usize = 2_500;
    let db = &ctx.db;
    insert_many(db, "DEAD", N).await;
    Events::update_many()
        .col_expr(
            Column::Status,
            sea_orm::sea_query::Expr::val(EventStatus::Fail.as_str()),
        )
        .exec(db)
        .await
        .expect("dead-letter all");
    // Both relays' publisher refuses everything for good.
    let configs = ["a", "b"].map(|owner| fast_config(owner).batch_size(100));
    let relays = Fleet::start(ctx, 4, ScriptedPublisher::failing_all(true), configs).await;
    let retried = ops::retry_all_dead(&sea_orm_outbox::Outbox::default(), db)
        .await
        .expect("retry all");
    relays.stop().await;
    assert_eq!(retried, N as u64, "each dead letter retried exactly once");
}
