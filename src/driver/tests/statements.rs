//! Every statement of the outbox's driver, rendered for Postgres, MySQL and SQLite side by side
//! as it is sent (statements that name rows by id as `ByIds::build` writes them), kept as
//! insta snapshots in `snapshots/`: a change to the SQL of any backend shows in review.
//! Under CI=true a snapshot that differs fails the test; `cargo insta review` (or
//! `INSTA_UPDATE=always cargo test --lib driver::tests::statements`) accepts a deliberate
//! change.
use crate::Completion;
use std::time::Duration;

use sea_orm::DbBackend;

use super::render::{drivers, postgres, render, render_each, values};
use crate::driver;
use crate::driver::postgres::claim::mark_success_and_claim_statement;
use crate::{EventStatus, NewEvent};

/// What the insert of `event` is told about the wake-up (as `driver::insert_event` tells it).
fn wakeup(event: &NewEvent) -> Option<Duration> {
    event
        .notifies_relays()
        .then(|| event.notification_interval())
}

#[test]
fn insert_event() {
    // The default: the notification shared by the slot's advisory lock. The slot's key (the
    // last value) comes from the clock; the longest interval makes it 0 whenever the test
    // runs, and the default's statement is the same text with another key.
    let event =
        NewEvent::raw("ORD-1", "ORDER_CREATED", r#"{"a":1}"#).notify_interval(Duration::MAX);
    insta::assert_snapshot!(render(
        |b| b.build(&b.with_wakeup(b.insert(&event), wakeup(&event)))
    ));
    let default = NewEvent::raw("ORD-1", "ORDER_CREATED", r#"{"a":1}"#);
    for b in drivers() {
        let of = |e: &NewEvent| b.build(&b.with_wakeup(b.insert(e), wakeup(e)));
        let (a, d) = (of(&event), of(&default));
        assert_eq!(a.sql, d.sql, "{b:?}");
        let (a, d) = (a.values.expect("values").0, d.values.expect("values").0);
        if b.backend() == DbBackend::Postgres {
            // The insert's six values, then the slot's key.
            assert_eq!((a.len(), d.len()), (7, 7));
            assert_eq!(a[..6], d[..6]);
            assert_eq!(a[6], sea_orm::Value::Int(Some(0)));
            assert!(matches!(d[6], sea_orm::Value::Int(Some(k)) if k >= 0));
        } else {
            // MySQL and SQLite poll: the insert is left as it is.
            assert_eq!(a, d, "{b:?}");
        }
    }
    let quiet = NewEvent::raw("ORD-1", "ORDER_CREATED", r#"{"a":1}"#).notify_relays(false);
    insta::assert_snapshot!(
        "insert_event_without_notify",
        render(|b| b.build(&b.with_wakeup(b.insert(&quiet), wakeup(&quiet))))
    );
    let every =
        NewEvent::raw("ORD-1", "ORDER_CREATED", r#"{"a":1}"#).notify_interval(Duration::ZERO);
    insta::assert_snapshot!(
        "insert_event_notify_every_event",
        render(|b| b.build(&b.with_wakeup(b.insert(&every), wakeup(&every))))
    );
}

#[test]
fn candidates() {
    insta::assert_snapshot!(render(|b| b.backend().build(&b.candidates(20))));
}

#[test]
fn claim_per_row() {
    insta::assert_snapshot!(render(|b| b.claim(7, 0, "me").build()));
}

#[test]
fn claim_batch() {
    // Postgres and SQLite: one `UPDATE ... RETURNING`; MySQL/MariaDB: the locking select, then
    // the update of the locked ids in the same READ COMMITTED transaction.
    insta::assert_snapshot!(render(|b| b.build(&b.claim_batch("me", 20))));
    let now = chrono::DateTime::from_timestamp(1_764_547_200, 0).expect("time");
    insta::assert_snapshot!(
        "claim_batch_mysql",
        format!(
            "{}\n{}",
            render(|b| b.backend().build(&b.locking_candidates(20, None))),
            render(|b| b.claim_locked(&[7, 8], "me", now).build())
        )
    );
    insta::assert_snapshot!(
        "claim_batch_mysql_resumed",
        render(|b| b.backend().build(&b.locking_candidates(20, Some(now))))
    );
}

/// Ordered mode (`WorkerConfig::ordered`): the heads of their keys (Postgres and SQLite: one
/// `UPDATE ... RETURNING`, Postgres with `FOR UPDATE SKIP LOCKED`; MySQL/MariaDB: the locking
/// select, then `Driver::claim_locked` as in the batch claim), per policy; then the runs
/// behind the heads (a read and the guarded update by ids).
#[test]
fn claim_ordered() {
    use crate::OrderedPolicy;
    use driver::HeadScan;
    for (name, policy, scan) in [
        (
            "claim_ordered_heads_block",
            OrderedPolicy::Block,
            HeadScan::Deep,
        ),
        (
            "claim_ordered_heads_skip",
            OrderedPolicy::Skip,
            HeadScan::Deep,
        ),
        (
            "claim_ordered_heads_window_block",
            OrderedPolicy::Block,
            HeadScan::for_heads(20),
        ),
    ] {
        insta::assert_snapshot!(
            name,
            render(|b| match b.backend() {
                DbBackend::MySql => b.build(&b.ordered_heads_query(policy, 20, true, scan)),
                _ => b.build(&b.ordered_heads("me", policy, 20, scan)),
            })
        );
    }
    let keys = ["K1".to_owned(), "K2".to_owned()];
    insta::assert_snapshot!(
        "claim_ordered_runs",
        format!(
            "{}\n{}",
            render(|b| b.backend().build(&b.run_candidates(&keys, 7, 20))),
            render(|b| b.claim_run(&[8, 9], "me").build())
        )
    );
}

/// Postgres: the `SUCCESS` mark of one claim's deliveries and the next batch claim in one
/// statement (data-modifying `WITH`; the claim part is `claim_batch`'s statement unchanged).
/// The other backends have no such statement: they mark, then claim.
#[test]
fn mark_success_and_claim_batch() {
    for b in drivers().into_iter().skip(1) {
        assert!(!b.mark_and_claim_in_one());
    }
    let pg = postgres();
    let stmt =
        mark_success_and_claim_statement(pg, (&[7, 8], "me#1", Completion::Update), "me#2", 20);
    let named = driver::Table::new(Some("app"), "outbox_events").expect("a valid name");
    let other = mark_success_and_claim_statement(
        pg.with_table(named),
        (&[7, 8], "me#1", Completion::Update),
        "me#2",
        20,
    );
    assert_eq!(
        other.sql,
        stmt.sql
            .replace(r#""t_event_record""#, r#""app"."outbox_events""#)
    );
    insta::assert_snapshot!(format!(
        "-- Postgres\n{}\n-- values: [{}]\n",
        stmt.sql,
        values(&stmt)
    ));
    let delete =
        mark_success_and_claim_statement(pg, (&[7, 8], "me#1", Completion::Delete), "me#2", 20);
    insta::assert_snapshot!(
        "delete_delivered_and_claim_batch",
        format!(
            "-- Postgres\n{}\n-- values: [{}]\n",
            delete.sql,
            values(&delete)
        )
    );
}

/// The delivered counter `t_outbox_counter`: one upsert per addition, keyed by the table.
#[test]
fn delivered_counter() {
    insta::assert_snapshot!(
        "add_delivered",
        render_each(|b| Some(b.backend().build(&b.add_delivered(42))))
    );
}

#[test]
fn outcomes() {
    insta::assert_snapshot!("mark_success", render(|b| b.mark_success(7, "me").build()));
    insta::assert_snapshot!(
        "delete_delivered",
        render(|b| b.delete_delivered(&[7, 8], "me").build())
    );
    insta::assert_snapshot!(
        "release_for_retry",
        render(|b| b
            .release_for_retry(7, "me", Duration::from_secs(20), "boom", true)
            .build())
    );
    insta::assert_snapshot!(
        "release_uncounted",
        render(|b| b
            .release_for_retry(7, "me", Duration::from_secs(60), "denied", false)
            .build())
    );
    insta::assert_snapshot!(
        "mark_fail",
        render(|b| b.mark_fail(7, "me", "boom").build())
    );
    insta::assert_snapshot!(
        "mark_success_many",
        render(|b| b.mark_success_many(&[7, 8], "me").build())
    );
    insta::assert_snapshot!(
        "release_unsent",
        render(|b| b.release_unsent(&[7, 8], "me").build())
    );
    insta::assert_snapshot!(
        "renew_leases",
        render(|b| b.renew_leases(&[7, 8], "me").build())
    );
}

/// `StatementProtocol::Simple` (Postgres behind a transaction-mode pooler): the statements as
/// sent in one simple-protocol query, values inlined by sea-query's escaping. A `'` and a `\`
/// in `last_error` come out as an `E'...'` literal; owners, ids and limits as literals.
#[test]
fn simple_protocol_inlined() {
    let pg = postgres();
    let owner = "relay-1#00ff";
    let reason = r"broker said: it's \ down";
    let statements = [
        ("claim_batch", pg.build(&pg.claim_batch(owner, 20))),
        (
            "mark_success_and_claim_batch",
            mark_success_and_claim_statement(
                pg,
                (&[7, 8], "relay-1#00fe", Completion::Update),
                owner,
                20,
            ),
        ),
        ("claim_per_row", pg.claim(7, 2, owner).build()),
        ("mark_success", pg.mark_success(7, owner).build()),
        (
            "mark_success_many",
            pg.mark_success_many(&[7, 8], owner).build(),
        ),
        (
            "release_for_retry",
            pg.release_for_retry(7, owner, Duration::from_secs(20), reason, true)
                .build(),
        ),
        ("mark_fail", pg.mark_fail(7, owner, reason).build()),
        ("renew_leases", pg.renew_leases(&[7, 8], owner).build()),
    ];
    let mut out = String::new();
    for (name, stmt) in &statements {
        let sql = pg.inline(stmt).expect("Postgres inlines");
        assert!(!sql.contains("$1"), "{name}: every value inlined: {sql}");
        out.push_str(&format!("-- {name}\n{sql}\n\n"));
    }
    assert!(out.contains(r"E'broker said: it\'s \\ down'"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn reclaim() {
    let lease = Duration::from_secs(600);
    insta::assert_snapshot!(
        "expired_leases",
        render(|b| b
            .backend()
            .build(&b.expired_leases(lease, driver::RECLAIM_BATCH)))
    );
    for (name, to) in [
        ("reclaim_to_wait", EventStatus::Wait),
        ("reclaim_to_fail", EventStatus::Fail),
    ] {
        insta::assert_snapshot!(name, render(|b| b.reclaim(&[7, 8], lease, 3, to).build()));
    }
}

/// The healing of dead letters: 3 retries, rounds 5, 10 and 20 min after the failure.
#[test]
fn heal() {
    let policy = crate::HealPolicy::new(Duration::from_secs(300), 3);
    insta::assert_snapshot!(
        "healable_dead_letters",
        render(|b| b
            .backend()
            .build(&b.healable_dead_letters(3, &policy, driver::RECLAIM_BATCH)))
    );
    insta::assert_snapshot!("heal", render(|b| b.heal(&[7, 8], 3, &policy).build()));
}

#[test]
fn consumed_record() {
    insta::assert_snapshot!(render(|b| b.record_consumed("points", "42")));
}

/// A table of the application's naming in a schema (`app.outbox_events`): the batch claim and
/// a mark by ids name it schema-qualified on every backend (on MySQL/MariaDB the schema is the
/// database).
#[test]
fn custom_table() {
    let table = driver::Table::new(Some("app"), "outbox_events").expect("a valid name");
    insta::assert_snapshot!(
        "custom_table",
        format!(
            "{}\n{}",
            render(|b| {
                let b = b.with_table(table);
                b.build(&b.claim_batch("me", 20))
            }),
            render(|b| {
                let b = b.with_table(table);
                b.mark_success_many(&[7, 8], "me").build()
            })
        )
    );
}
