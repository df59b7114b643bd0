//! Delayed events (`NewEvent::deliver_after`, `deliver_at`) on Postgres, MariaDB and SQLite
//! (see `tests/common`): a delayed event is claimed only once due on the database clock and
//! soon after; an instant already past goes at once; an application whose clock is 15 minutes
//! ahead (libfaketime) writes the same due time (Postgres, MariaDB: SQLite's clock is the
//! application's); a due time past the limit is refused with
//! nothing written; in ordered mode a delayed event holds back its key's later events.
//!
//! The skewed application is this test binary run again with `OUTBOX_TEST_SKEWED_WRITER_URL`
//! set and libfaketime preloaded: its test `skewed_writer` then writes one delayed event.
mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::events::event;
use common::fleet::Fleet;
use common::ordered::ordered_config;
use common::{test_config, TestContext};
use sea_orm::{EntityTrait, PaginatorTrait};
use sea_orm_outbox::event_record::{Entity as Events, Model};
use sea_orm_outbox::{
    EventError, EventStatus, InMemoryPublisher, NewEvent, OrderedPolicy, OutboxError, OutboxExt,
};

backend_tests!(
    a_delayed_event_goes_once_due_on_the_database_clock,
    an_instant_already_past_goes_at_once,
    an_instant_before_any_a_backend_stores_goes_at_once,
    a_delay_past_the_limit_is_refused_and_nothing_is_written,
    in_ordered_mode_a_delayed_event_holds_back_its_key,
);

// SQLite's clock is the clock of the process that runs the statement: an embedded database
// has no clock apart from the application's.
backend_test!(
    postgres_a_writer_clock_ahead_changes_no_due_time:
        Postgres, "skewed_writer" => a_writer_clock_ahead_changes_no_due_time;
    mariadb_a_writer_clock_ahead_changes_no_due_time:
        MySql, "skewed_writer" => a_writer_clock_ahead_changes_no_due_time;
);

/// The delay of these tests.
const DELAY: Duration = Duration::from_secs(3);
/// The workers' poll delay (`test_config`), and the slack on a loaded machine.
const POLL: Duration = Duration::from_millis(20);
const SLACK: Duration = Duration::from_secs(1);

/// `later - earlier`, both from the database clock.
fn between(earlier: DateTime<Utc>, later: DateTime<Utc>) -> Duration {
    (later - earlier).to_std().unwrap_or_else(|_| {
        panic!("{later} is before {earlier}");
    })
}

/// The event's delivery as the database recorded it: delivered, its due time `delay` after
/// its insert, claimed (then published) once due and within `POLL + SLACK` after. Returns
/// when it was claimed after its insert.
fn assert_delivered_when_due(e: &Model, delay: Duration) -> Duration {
    assert_eq!(e.status, EventStatus::Success, "{e:?}");
    assert_eq!(between(e.create_time, e.next_retry_time), delay, "{e:?}");
    let claimed = e.claimed_at.expect("claimed");
    assert!(claimed >= e.next_retry_time, "claimed before due: {e:?}");
    let after = between(e.create_time, claimed);
    assert!(
        after <= delay + POLL + SLACK,
        "claimed {after:?} after its insert"
    );
    after
}

/// A 3 s delay: still `WAIT` 2.5 s after the insert, then published; the claim came after the
/// due time, by the database clock, and within a poll (and the slack) of it.
async fn a_delayed_event_goes_once_due_on_the_database_clock(ctx: &TestContext) {
    let sent = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(ctx, 5, sent.clone(), [test_config("delayed")]).await;
    let now = ctx
        .db
        .with_event(NewEvent::raw("NOW", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    let later = ctx
        .db
        .with_event(NewEvent::raw("LATER", "ORDER_PAYMENT_DUE", "{}").deliver_after(DELAY))
        .await
        .expect("write");
    let written = std::time::Instant::now();
    assert!(
        common::wait_until(Duration::from_secs(5), POLL, || async {
            event(&ctx.db, now).await.status == EventStatus::Success
        })
        .await,
        "the event without a delay goes at once"
    );
    tokio::time::sleep((DELAY - Duration::from_millis(500)).saturating_sub(written.elapsed()))
        .await;
    assert_eq!(event(&ctx.db, later).await.status, EventStatus::Wait);
    assert!(
        common::wait_until(Duration::from_secs(10), POLL, || async {
            event(&ctx.db, later).await.status == EventStatus::Success
        })
        .await,
        "the delayed event was never published"
    );
    fleet.stop().await;
    let after = assert_delivered_when_due(&event(&ctx.db, later).await, DELAY);
    println!(
        "{:?}: the event delayed by {DELAY:?} was claimed {after:?} after its insert",
        ctx.backend
    );
    assert_eq!(sent.len(), 2);
}

/// `deliver_at` instants before the range of Postgres and MySQL/MariaDB timestamps (year 1,
/// chrono's earliest): written (as the Unix epoch) and published at once on every backend.
async fn an_instant_before_any_a_backend_stores_goes_at_once(ctx: &TestContext) {
    let fleet = Fleet::start(
        ctx,
        5,
        Arc::new(InMemoryPublisher::new()),
        [test_config("long-ago")],
    )
    .await;
    let year_one = "0001-01-01T00:00:00Z".parse().expect("instant");
    let mut ids = Vec::new();
    for at in [year_one, DateTime::<Utc>::MIN_UTC] {
        let event = NewEvent::raw("LONG-AGO", "ORDER_CREATED", "{}").deliver_at(at);
        ids.push(ctx.db.with_event(event).await.expect("write"));
    }
    assert!(
        common::wait_until(POLL + SLACK + SLACK, POLL, || async {
            for &id in &ids {
                if event(&ctx.db, id).await.status != EventStatus::Success {
                    return false;
                }
            }
            true
        })
        .await,
        "an event due long ago waits"
    );
    fleet.stop().await;
    for id in ids {
        let e = event(&ctx.db, id).await;
        assert_eq!(e.next_retry_time, DateTime::UNIX_EPOCH, "{e:?}");
    }
}

/// `deliver_at` an instant an hour ago: stored as given, published at once.
async fn an_instant_already_past_goes_at_once(ctx: &TestContext) {
    let fleet = Fleet::start(
        ctx,
        5,
        Arc::new(InMemoryPublisher::new()),
        [test_config("past")],
    )
    .await;
    let at = Utc::now() - chrono::Duration::hours(1);
    let id = ctx
        .db
        .with_event(NewEvent::raw("PAST", "ORDER_CREATED", "{}").deliver_at(at))
        .await
        .expect("write");
    assert!(
        common::wait_until(POLL + SLACK + SLACK, POLL, || async {
            event(&ctx.db, id).await.status == EventStatus::Success
        })
        .await,
        "an event due an hour ago waits"
    );
    fleet.stop().await;
    let e = event(&ctx.db, id).await;
    let stored = (e.next_retry_time - at).num_microseconds().expect("small");
    assert_eq!(stored, 0, "stored as given: {e:?}");
}

/// A delay past `NewEvent::MAX_DELAY`, either way, is an `InvalidEvent` and writes nothing.
async fn a_delay_past_the_limit_is_refused_and_nothing_is_written(ctx: &TestContext) {
    let too_far = NewEvent::MAX_DELAY + Duration::from_secs(1);
    let at = Utc::now() + chrono::Duration::days(400);
    for event in [
        NewEvent::raw("FAR", "ORDER_CREATED", "{}").deliver_after(too_far),
        NewEvent::raw("FAR", "ORDER_CREATED", "{}").deliver_at(at),
    ] {
        let err = ctx.db.with_event(event).await.expect_err("refused");
        assert!(
            matches!(
                err,
                OutboxError::InvalidEvent(EventError::DelayTooLong { max, .. })
                    if max == NewEvent::MAX_DELAY.as_secs()
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("longest delay"), "{err}");
    }
    let ok = NewEvent::raw("NEAR", "ORDER_CREATED", "{}").deliver_after(NewEvent::MAX_DELAY);
    ctx.db
        .with_event(ok)
        .await
        .expect("the limit itself is allowed");
    assert_eq!(Events::find().count(&ctx.db).await.expect("count"), 1);
}

/// Where Debian puts libfaketime.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];
/// The variable that makes `skewed_writer` write on that database.
const WRITER_URL: &str = "OUTBOX_TEST_SKEWED_WRITER_URL";

/// In the child process (clock 15 minutes ahead): writes one event delayed by 3 s on the
/// database at `$OUTBOX_TEST_SKEWED_WRITER_URL` and prints its id and its own clock.
/// Elsewhere it returns at once.
#[tokio::test]
async fn skewed_writer() {
    let Ok(url) = std::env::var(WRITER_URL) else {
        return;
    };
    let db = common::connect(&url, 1).await;
    let id = db
        .with_event(NewEvent::raw("SKEWED", "ORDER_PAYMENT_DUE", "{}").deliver_after(DELAY))
        .await
        .expect("write");
    println!("id={id} app_now={}", Utc::now().to_rfc3339());
}

/// An application process whose clock is 15 minutes ahead writes an event delayed by 3 s: its
/// due time is 3 s after its insert by the database clock, and it is published then.
async fn a_writer_clock_ahead_changes_no_due_time(ctx: &TestContext) {
    let libfaketime = LIBFAKETIME
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.is_file())
        .expect("libfaketime (Debian package faketime) is needed; .ci/run installs it");
    let fleet = Fleet::start(
        ctx,
        5,
        Arc::new(InMemoryPublisher::new()),
        [test_config("unskewed")],
    )
    .await;
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "skewed_writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_URL, &ctx.url)
        .env("LD_PRELOAD", libfaketime)
        .env("FAKETIME", "+15m")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the skewed writer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let field = |name: &str| {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .to_owned()
    };
    let id: i64 = field("id=").parse().expect("id");
    let app_now: DateTime<Utc> = field("app_now=").parse().expect("app_now");
    let e = event(&ctx.db, id).await;
    let skew = app_now - e.create_time;
    assert!(
        skew > chrono::Duration::minutes(14),
        "the writer's clock is not ahead: {app_now} vs the database's {}",
        e.create_time
    );
    assert!(
        common::wait_until(DELAY + SLACK + SLACK, POLL, || async {
            event(&ctx.db, id).await.status == EventStatus::Success
        })
        .await,
        "the skewed writer's delayed event was never published"
    );
    fleet.stop().await;
    let after = assert_delivered_when_due(&event(&ctx.db, id).await, DELAY);
    println!(
        "{:?}: a writer {}s ahead wrote an event due {DELAY:?} after its insert (database \
         clock), claimed {after:?} after it",
        ctx.backend,
        skew.num_seconds()
    );
}

/// Ordered mode: a key's first event delayed by 1 s holds back its second, written without a
/// delay; another key's event goes at once.
async fn in_ordered_mode_a_delayed_event_holds_back_its_key(ctx: &TestContext) {
    let sent = Arc::new(InMemoryPublisher::new());
    let fleet = Fleet::start(
        ctx,
        5,
        sent.clone(),
        [ordered_config("ordered", OrderedPolicy::Block)],
    )
    .await;
    let delay = Duration::from_secs(1);
    let first = ctx
        .db
        .with_event(NewEvent::raw("K", "ORDER_CREATED", "{}").deliver_after(delay))
        .await
        .expect("write");
    let second = ctx
        .db
        .with_event(NewEvent::raw("K", "ORDER_PAID", "{}"))
        .await
        .expect("write");
    let other = ctx
        .db
        .with_event(NewEvent::raw("OTHER", "ORDER_CREATED", "{}"))
        .await
        .expect("write");
    assert!(
        common::wait_until(Duration::from_secs(10), POLL, || async { sent.len() == 3 }).await,
        "not all published"
    );
    fleet.stop().await;
    let order: Vec<i64> = sent
        .messages()
        .iter()
        .map(|m| m.event_id)
        .filter(|id| *id != other)
        .collect();
    assert_eq!(order, [first, second], "the key's order");
    assert_eq!(
        sent.messages()[0].event_id,
        other,
        "another key goes at once"
    );
    let (first, second) = (event(&ctx.db, first).await, event(&ctx.db, second).await);
    assert_delivered_when_due(&first, delay);
    assert!(
        second.claimed_at >= first.claimed_at,
        "{first:?} {second:?}"
    );
}
