//! The per-process window in front of the notify slot's lock attempt
//! (`NewEvent::notify_process_window`), Postgres only. A test binary of its own: the window's
//! state belongs to the process, and another test's database would turn it off.
//!
//! The events use a window of an hour and slots of 100 years, so that no boundary of either can
//! fall inside the test; as in tests/notify.rs, a `NOTIFY` committed after the insert under test
//! that arrives FIRST shows that the insert queued none.
mod common;

use std::time::Duration;

use common::{Backend, TestContext};
use sea_orm::sqlx::postgres::PgListener;
use sea_orm::ConnectionTrait;
use sea_orm_outbox::{EventStatus, NewEvent, OutboxExt};

/// The channel event inserts notify.
const CHANNEL: &str = "sea_orm_outbox";
/// A bound on every wait: far above any delivery time, never reached when the test passes.
const WAIT: Duration = Duration::from_secs(10);
/// One slot for the whole test.
const ONE_SLOT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// A window no step of the test outlasts.
const HOUR: Duration = Duration::from_secs(3600);

backend_test!(
    postgres_the_process_window_skips_tries_on_one_database_never_across_two:
        Postgres, "notify_gate" => the_process_window_skips_tries_on_one_database_never_across_two;
);

/// An event of the test's single slot behind a window of an hour.
fn gated(biz_no: &str) -> NewEvent {
    NewEvent::raw(biz_no, "ORDER_CREATED", "{}")
        .notify_interval(ONE_SLOT)
        .notify_process_window(HOUR)
}

async fn listener(url: &str) -> PgListener {
    let mut l = PgListener::connect(url).await.expect("listener");
    l.listen(CHANNEL).await.expect("LISTEN");
    l
}

async fn assert_next(l: &mut PgListener, payload: &str, why: &str) {
    let n = tokio::time::timeout(WAIT, l.recv())
        .await
        .expect("a notification within the bound")
        .expect("listener connection");
    assert_eq!((n.channel(), n.payload()), (CHANNEL, payload), "{why}");
}

async fn sentinel(ctx: &TestContext, payload: &str) {
    ctx.db
        .execute_unprepared(&format!("NOTIFY {CHANNEL}, '{payload}'"))
        .await
        .expect("NOTIFY");
}

async fn the_process_window_skips_tries_on_one_database_never_across_two(ctx: &TestContext) {
    assert_eq!(
        NewEvent::raw("A", "T", "{}").notification_process_window(),
        sea_orm_outbox::DEFAULT_NOTIFY_PROCESS_WINDOW
    );
    let mut l = listener(&ctx.url).await;
    // The process's first insert tries the slot (free: it notifies) and learns the database.
    ctx.db.with_event(gated("ORD-1")).await.expect("insert");
    assert_next(&mut l, "", "the first insert tries the slot and notifies").await;
    // Within the window the next insert sends no try, although the slot is free again (the
    // first insert committed): it relies on the first one's notification.
    ctx.db.with_event(gated("ORD-2")).await.expect("insert");
    sentinel(ctx, "after-skip").await;
    assert_next(&mut l, "after-skip", "the skipping insert queued no notify").await;
    // A window of zero tries as before (and the free slot lets it notify).
    ctx.db
        .with_event(gated("ORD-3").notify_process_window(Duration::ZERO))
        .await
        .expect("insert");
    assert_next(&mut l, "", "a zero window always tries").await;

    // A second database: its first insert skips too (the window is the process's), finds
    // another database than the tries', queues its own notify and turns the window off.
    let other = TestContext::new(Backend::Postgres, "notify_gate_other").await;
    let mut l2 = listener(&other.url).await;
    other.db.with_event(gated("ORD-4")).await.expect("insert");
    assert_next(
        &mut l2,
        "",
        "the other database's insert notified in a statement of its own",
    )
    .await;
    // With the window off, the first database's inserts try the slot again.
    ctx.db.with_event(gated("ORD-5")).await.expect("insert");
    assert_next(&mut l, "", "with the window off, inserts try the slot").await;
    assert_eq!(common::count(&ctx.db, EventStatus::Wait).await, 4);
    assert_eq!(common::count(&other.db, EventStatus::Wait).await, 1);
    other.cleanup().await;
}
