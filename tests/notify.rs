//! The per-event notify option (`NewEvent::notify_relays`), Postgres only: MariaDB and SQLite
//! have no `LISTEN`/`NOTIFY` and always poll. Like every suite, a missing Postgres fails the
//! tests (see `tests/common`).
//!
//! The listener tests are deterministic without sleeps: Postgres delivers the notifications of
//! committed transactions in commit order, so when a `NOTIFY sea_orm_outbox, 'sentinel'`
//! committed after the transaction under test is the FIRST notification received, that
//! transaction queued none.
//!
//! The notify interval's rule (`NewEvent::notify_interval`: an insert notifies only when no
//! other open transaction holds the current slot) is shown with slots of 100 years, so that no
//! slot boundary can fall inside the test; the relay's side (its follow-up rounds) is tested in
//! tests/listen.rs.
mod common;

use common::wait_until;

use std::sync::Arc;
use std::time::Duration;

use common::{count, Fleet, TestContext};
use sea_orm::sqlx::postgres::{PgListener, PgNotification};
use sea_orm::{ConnectionTrait, EntityTrait, PaginatorTrait, TransactionTrait};
use sea_orm_outbox::event_record::Entity as Events;
use sea_orm_outbox::{EventStatus, InMemoryPublisher, NewEvent, OutboxExt};

/// The channel event inserts notify.
const CHANNEL: &str = "sea_orm_outbox";
/// A bound on every wait: far above any delivery time, never reached when the test passes.
const WAIT: Duration = Duration::from_secs(10);

backend_test!(
    postgres_default_event_notifies_at_commit:
        Postgres, "notify_default" => default_event_notifies_at_commit;
    postgres_events_of_one_transaction_notify_once:
        Postgres, "notify_once" => events_of_one_transaction_notify_once;
    postgres_event_with_notify_off_queues_nothing:
        Postgres, "notify_off" => event_with_notify_off_queues_nothing;
    postgres_rolled_back_event_queues_nothing:
        Postgres, "notify_rollback" => rolled_back_event_queues_nothing;
    postgres_relay_polls_for_events_with_notify_off:
        Postgres, "notify_off_relay" => relay_polls_for_events_with_notify_off;
    postgres_an_open_slot_holder_takes_the_notify_of_its_slot:
        Postgres, "notify_slot" => an_open_slot_holder_takes_the_notify_of_its_slot;
    postgres_an_insert_that_waited_for_a_connection_notifies_on_its_own:
        Postgres, "notify_stale_key" => an_insert_that_waited_for_a_connection_notifies_on_its_own;
);

/// A raw listener on [`CHANNEL`] (its own connection, not the test's pool).
async fn listener(ctx: &TestContext) -> PgListener {
    let mut l = PgListener::connect(&ctx.url).await.expect("listener");
    l.listen(CHANNEL).await.expect("LISTEN");
    l
}

/// The next notification, within [`WAIT`].
async fn next(l: &mut PgListener) -> PgNotification {
    tokio::time::timeout(WAIT, l.recv())
        .await
        .expect("a notification within the bound")
        .expect("listener connection")
}

/// Commits `NOTIFY sea_orm_outbox, '<payload>'` on a pooled connection (autocommit).
async fn sentinel(ctx: &TestContext, payload: &str) {
    ctx.db
        .execute_unprepared(&format!("NOTIFY {CHANNEL}, '{payload}'"))
        .await
        .expect("NOTIFY");
}

async fn assert_next(l: &mut PgListener, payload: &str, why: &str) {
    let n = next(l).await;
    assert_eq!((n.channel(), n.payload()), (CHANNEL, payload), "{why}");
}

async fn default_event_notifies_at_commit(ctx: &TestContext) {
    let mut l = listener(ctx).await;
    let txn = ctx.db.begin().await.expect("begin");
    let event = NewEvent::raw("ORD-1", "ORDER_CREATED", "{}");
    assert!(event.notifies_relays(), "notify is on by default");
    txn.with_event(event).await.expect("insert");
    // Nothing is delivered while the transaction is open: a notification committed now comes
    // first.
    sentinel(ctx, "before-commit").await;
    assert_next(
        &mut l,
        "before-commit",
        "the insert's notification waits for the commit",
    )
    .await;
    txn.commit().await.expect("commit");
    assert_next(&mut l, "", "the commit delivers the insert's notification").await;

    // An event written outside a transaction (its own autocommit) notifies as well.
    ctx.db
        .with_event(NewEvent::raw("ORD-2", "ORDER_CREATED", "{}"))
        .await
        .expect("insert");
    assert_next(&mut l, "", "an autocommitted insert notifies").await;
    assert_eq!(Events::find().count(&ctx.db).await.expect("count"), 2);
}

async fn events_of_one_transaction_notify_once(ctx: &TestContext) {
    let mut l = listener(ctx).await;
    let txn = ctx.db.begin().await.expect("begin");
    for i in 0..3 {
        txn.with_event(NewEvent::raw(format!("ORD-{i}"), "ORDER_CREATED", "{}"))
            .await
            .expect("insert");
    }
    // One notifying event among silent ones is enough to wake the relays.
    txn.with_event(NewEvent::raw("ORD-Q", "ORDER_CREATED", "{}").notify_relays(false))
        .await
        .expect("insert");
    txn.commit().await.expect("commit");
    sentinel(ctx, "sentinel").await;
    // Identical notifications of one transaction are delivered once.
    assert_next(&mut l, "", "the transaction's one notification").await;
    assert_next(&mut l, "sentinel", "and no second one").await;
}

async fn event_with_notify_off_queues_nothing(ctx: &TestContext) {
    let mut l = listener(ctx).await;
    let txn = ctx.db.begin().await.expect("begin");
    let event = NewEvent::raw("ORD-1", "ORDER_CREATED", "{}").notify_relays(false);
    assert!(!event.notifies_relays());
    txn.with_event(event).await.expect("insert");
    txn.commit().await.expect("commit");
    // The same off autocommitted.
    ctx.db
        .with_event(NewEvent::raw("ORD-2", "ORDER_CREATED", "{}").notify_relays(false))
        .await
        .expect("insert");
    sentinel(ctx, "sentinel").await;
    assert_next(
        &mut l,
        "sentinel",
        "the committed events with notify off queued no notification",
    )
    .await;
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, 2, "both written");
}

async fn rolled_back_event_queues_nothing(ctx: &TestContext) {
    let mut l = listener(ctx).await;
    let txn = ctx.db.begin().await.expect("begin");
    txn.with_event(NewEvent::raw("ORD-RB", "ORDER_CREATED", "{}"))
        .await
        .expect("insert");
    txn.rollback().await.expect("rollback");
    sentinel(ctx, "sentinel").await;
    assert_next(
        &mut l,
        "sentinel",
        "the rolled-back insert's notification was dropped",
    )
    .await;
    assert_eq!(Events::find().count(&ctx.db).await.expect("count"), 0);
}

async fn relay_polls_for_events_with_notify_off(ctx: &TestContext) {
    // A poll delay of a second: an event with notify off waits for the next poll.
    let cfg = common::test_config("notify-off").poll_delay(Duration::from_secs(1));
    let publisher = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(ctx, 4, publisher.clone(), [cfg]).await;
    assert!(fleet.started(WAIT).await, "the worker ran a first round");

    let quiet = ctx
        .db
        .with_event(NewEvent::raw("ORD-QUIET", "ORDER_CREATED", "{}").notify_relays(false))
        .await
        .expect("insert");
    let polled = wait_until(WAIT, Duration::from_millis(10), || async {
        publisher.len() == 1
    })
    .await;
    assert!(polled, "the event with notify off is published by a poll");

    let loud = ctx
        .db
        .with_event(NewEvent::raw("ORD-LOUD", "ORDER_CREATED", "{}"))
        .await
        .expect("insert");
    let woken = wait_until(WAIT, Duration::from_millis(2), || async {
        publisher.len() == 2
    })
    .await;
    assert!(woken, "the default event is published");

    let s = fleet.stop().await.remove(0);
    assert_eq!((s.published, s.errors), (2, 0), "{s:?}");
    let mut ids = publisher.distinct_ids().into_iter().collect::<Vec<_>>();
    ids.sort_unstable();
    assert_eq!(ids, [quiet, loud]);
    assert_eq!(count(&ctx.db, EventStatus::Success).await, 2);
}

/// One slot for the whole test (boundaries at multiples of 100 years since 1970).
const ONE_SLOT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// An event of the test's single slot.
fn slotted(biz_no: &str) -> NewEvent {
    NewEvent::raw(biz_no, "ORDER_CREATED", "{}").notify_interval(ONE_SLOT)
}

async fn an_open_slot_holder_takes_the_notify_of_its_slot(ctx: &TestContext) {
    assert_eq!(
        NewEvent::raw("A", "T", "{}").notification_interval(),
        sea_orm_outbox::NewEvent::DEFAULT_NOTIFY_INTERVAL
    );
    let mut l = listener(ctx).await;
    // The holder: the first insert of the slot notifies (no one holds the slot).
    let holder = ctx.db.begin().await.expect("begin");
    holder.with_event(slotted("ORD-H")).await.expect("insert");
    // While it is open, the other writers of the slot queue no notification of their own: an
    // autocommitted insert, a transaction of two events, both committed before the holder.
    ctx.db.with_event(slotted("ORD-S1")).await.expect("insert");
    let txn = ctx.db.begin().await.expect("begin");
    txn.with_event(slotted("ORD-S2")).await.expect("insert");
    txn.with_event(slotted("ORD-S3")).await.expect("insert");
    txn.commit().await.expect("commit");
    // An event with the interval zero notifies whatever the slot.
    ctx.db
        .with_event(slotted("ORD-Z").notify_interval(Duration::ZERO))
        .await
        .expect("insert");
    sentinel(ctx, "skippers-committed").await;
    assert_next(&mut l, "", "the interval-zero event notified").await;
    assert_next(
        &mut l,
        "skippers-committed",
        "the events of the held slot queued no notification",
    )
    .await;
    // The holder's commit notifies for them all; the slot is free again afterwards.
    holder.commit().await.expect("commit");
    assert_next(&mut l, "", "the holder's commit notifies").await;
    ctx.db.with_event(slotted("ORD-F")).await.expect("insert");
    // A rolled-back holder frees the slot as well (and its notification is dropped).
    let rolled = ctx.db.begin().await.expect("begin");
    rolled.with_event(slotted("ORD-RB")).await.expect("insert");
    rolled.rollback().await.expect("rollback");
    ctx.db.with_event(slotted("ORD-G")).await.expect("insert");
    sentinel(ctx, "end").await;
    assert_next(&mut l, "", "the first event after the holder notifies").await;
    assert_next(&mut l, "", "and so does the first after a rollback").await;
    assert_next(&mut l, "end", "and nothing else").await;
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, 7, "all written");
}

/// The slot's key is taken when the statement is built, before the pool hands out a
/// connection. An insert that waits longer than the interval for one runs under a later slot
/// with its earlier key; when a transaction of that earlier slot still holds the key, the
/// insert skips its notification, and if that holder then rolls back nothing would wake the
/// relays (found by a review trying it as an adopter: pool of 2, a holder, a connection busy
/// for a second). Such an insert notifies on its own afterwards.
async fn an_insert_that_waited_for_a_connection_notifies_on_its_own(ctx: &TestContext) {
    use sea_orm::{ConnectOptions, Database};
    use std::time::{SystemTime, UNIX_EPOCH};

    const SLOT: Duration = Duration::from_secs(1);
    let slotted = |b: &str| NewEvent::raw(b, "ORDER_CREATED", "{}").notify_interval(SLOT);
    let mut options = ConnectOptions::new(ctx.url.clone());
    options
        .max_connections(2)
        .min_connections(2)
        .sqlx_logging(false);
    let pool = Database::connect(options).await.expect("pool of 2");
    let mut l = listener(ctx).await;
    // Start early in a slot, so that the holder's insert and the waiting insert's key fall in
    // the same one.
    let into_slot = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
        % SLOT.as_millis();
    if into_slot > 100 {
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(SLOT.as_millis() - into_slot).expect("ms") + 10,
        ))
        .await;
    }
    // The holder takes the slot's key and stays open.
    let holder = pool.begin().await.expect("begin");
    holder.with_event(slotted("ORD-H")).await.expect("insert");
    // The pool's other connection is busy for longer than a slot.
    let busy = pool.begin().await.expect("begin");
    let release = tokio::spawn(async move {
        busy.execute_unprepared("SELECT pg_sleep(1.3)")
            .await
            .expect("sleep");
        busy.commit().await.expect("commit");
    });
    // This insert waits for a connection, then runs with the holder's key: it skips the
    // shared notification and sends one of its own (autocommitted: delivered at once).
    pool.with_event(slotted("ORD-W")).await.expect("insert");
    release.await.expect("busy connection");
    sentinel(ctx, "after-the-waiting-insert").await;
    assert_next(
        &mut l,
        "",
        "the insert that waited for a connection notified on its own",
    )
    .await;
    assert_next(&mut l, "after-the-waiting-insert", "and nothing else").await;
    // The holder rolls back: its notification is dropped, the waiting insert's event stays.
    holder.rollback().await.expect("rollback");
    assert_eq!(count(&ctx.db, EventStatus::Wait).await, 1);
    pool.close().await.expect("close");
}
