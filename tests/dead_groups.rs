//! Dead letters grouped by the fingerprint of their error (`ops::dead_letter_groups`, the
//! group's events, retrying and discarding a group, discarding them all) and the search by key
//! or id (`ops::find_events`). Runs on Postgres, MariaDB and SQLite (see `tests/common`).
mod common;

use common::{count, dead_letter, event, insert_many, new_event, Backend, TestContext};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::ops::fingerprint;
use sea_orm_outbox::{ops, EventStatus, FailureKind, Outbox};

backend_tests!(
    groups_count_the_dead_letters_of_each_error,
    errors_differing_in_ids_form_one_group,
    a_group_is_retried_or_discarded_alone,
    a_group_larger_than_a_page_is_retried_whole,
    discard_all_dead_deletes_only_dead_letters,
    find_events_by_key_or_id_newest_first,
);

const BROKER: &str = "broker unavailable: connection refused";
const TOO_LARGE: &str = "permanent: message body over 4194304 bytes";

/// Three dead letters of `BROKER`, two of `TOO_LARGE`, one without an error, one event that
/// waits with `BROKER` as its last error (a retry after a failure) and one delivered event.
/// Returns the ids of the three groups, in that order.
async fn seed(ctx: &TestContext) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let db = &ctx.db;
    let ids = insert_many(db, "ORD", 8).await;
    let (broker, large, none) = (ids[0..3].to_vec(), ids[3..5].to_vec(), vec![ids[5]]);
    dead_letter(db, &broker, Some(BROKER)).await;
    dead_letter(db, &large, Some(TOO_LARGE)).await;
    dead_letter(db, &none, None).await;
    // A retried event keeps its last error but is no dead letter.
    dead_letter(db, &[ids[6]], Some(BROKER)).await;
    let retried = ops::retry_dead(&Outbox::default(), db, ids[6])
        .await
        .expect("retry");
    assert_eq!(retried, ops::DeadLetterOutcome::Applied);
    // The last one is delivered.
    dead_letter(db, &[ids[7]], Some(TOO_LARGE)).await;
    Events::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Success.as_str()))
        .filter(Column::Id.eq(ids[7]))
        .exec(db)
        .await
        .expect("deliver");
    (broker, large, none)
}

async fn groups_count_the_dead_letters_of_each_error(ctx: &TestContext) {
    let db = &ctx.db;
    let outbox = Outbox::default();
    assert!(ops::dead_letter_groups(&outbox, db)
        .await
        .expect("groups")
        .is_empty());
    let (broker, large, none) = seed(ctx).await;
    let groups = ops::dead_letter_groups(&outbox, db).await.expect("groups");
    let summary: Vec<_> = groups
        .iter()
        .map(|g| {
            let (fp, error) = (g.fingerprint.as_deref(), g.error.as_deref());
            (fp, error, g.kind, g.errors, g.count, g.oldest_id)
        })
        .collect();
    let large_fp = fingerprint(TOO_LARGE);
    assert_eq!(large_fp, "permanent: message body over <n> bytes");
    assert_eq!(
        summary,
        vec![
            (Some(BROKER), Some(BROKER), None, 1, 3, broker[0]),
            (
                Some(large_fp.as_str()),
                Some(TOO_LARGE),
                Some(FailureKind::Permanent),
                1,
                2,
                large[0]
            ),
            (None, None, None, 1, 1, none[0]),
        ],
        "largest group first; the waiting and the delivered events are in no group"
    );
    for (group, ids) in groups.iter().zip([&broker, &large, &none]) {
        let mut last = None;
        for &id in ids.iter() {
            let t = event(db, id).await.update_time;
            last = last.max(Some(t));
        }
        assert_eq!(Some(group.last_update), last, "{:?}", group.error);
    }

    // The events of each group, oldest first, at most the limit.
    for (group, ids) in [
        (Some(BROKER), &broker),
        (Some(large_fp.as_str()), &large),
        (None, &none),
    ] {
        let rows = ops::dead_letters_in_group(&outbox, db, group, 100)
            .await
            .expect("group events");
        let got: Vec<i64> = rows.iter().map(|r| r.id).collect();
        assert_eq!(&got, ids, "{group:?}");
        assert!(rows.iter().all(|r| r.status == EventStatus::Fail));
    }
    let first = ops::dead_letters_in_group(&outbox, db, Some(BROKER), 1)
        .await
        .expect("limit");
    assert_eq!(
        first.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![broker[0]]
    );
    let nothing = ops::dead_letters_in_group(&outbox, db, Some("no such error"), 10)
        .await
        .expect("no group");
    assert!(nothing.is_empty());
}

/// One outage's dead letters, whose errors name other addresses, message ids and event ids,
/// form one group with their count; a permanent failure of the same words is another group.
/// Retrying a group puts back its events only, discarding one deletes its events only.
async fn errors_differing_in_ids_form_one_group(ctx: &TestContext) {
    let db = &ctx.db;
    let outbox = Outbox::default();
    let ids = insert_many(db, "FP", 12).await;
    let outage = |i: usize, id: i64| {
        format!(
            "retryable: RocketMQ send failed: transport.connection.failed; broker \
             10.0.{i}.7:1091{i}; msgId 7F00000100{i}A2B3C4D5E6F7; event {id}"
        )
    };
    let busy = |id: i64| format!("retryable: broker busy for 'ORD-{id}'");
    let large = |id: i64| format!("permanent: body of event {id} is {} bytes", 5_000_000 + id);
    let mut groups: [Vec<i64>; 3] = Default::default();
    for (i, &id) in ids.iter().enumerate() {
        let (g, error) = match i % 4 {
            0 | 1 => (0, outage(i, id)),
            2 => (1, busy(id)),
            _ => (2, large(id)),
        };
        dead_letter(db, &[id], Some(&error)).await;
        groups[g].push(id);
    }
    let found = ops::dead_letter_groups(&outbox, db).await.expect("groups");
    let summary: Vec<_> = found
        .iter()
        .map(|g| (g.kind, g.count, g.errors, g.oldest_id))
        .collect();
    let retryable = Some(FailureKind::Retryable);
    assert_eq!(
        summary,
        vec![
            (retryable, 6, 6, groups[0][0]),
            (retryable, 3, 3, groups[1][0]),
            (Some(FailureKind::Permanent), 3, 3, groups[2][0]),
        ],
        "{found:#?}"
    );
    let fps: Vec<String> = found
        .iter()
        .map(|g| g.fingerprint.clone().expect("an error"))
        .collect();
    assert_eq!(
        fps[0],
        "retryable: RocketMQ send failed: transport.connection.failed; broker \
         <n>.<n>.<n>.<n>:<n>; msgId <hex>; event <n>"
    );
    assert_eq!(fps[1], "retryable: broker busy for <q>");
    assert_eq!(fps[2], "permanent: body of event <n> is <n> bytes");
    for (fp, ids) in fps.iter().zip(&groups) {
        let rows = ops::dead_letters_in_group(&outbox, db, Some(fp), 100)
            .await
            .expect("group events");
        assert_eq!(&rows.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    }

    let retried = ops::retry_dead_group(&outbox, db, Some(&fps[0]))
        .await
        .expect("retry group");
    assert_eq!(retried, 6);
    for (g, want) in groups
        .iter()
        .zip([EventStatus::Wait, EventStatus::Fail, EventStatus::Fail])
    {
        for &id in g {
            assert_eq!(event(db, id).await.status, want, "{id}");
        }
    }
    let discarded = ops::discard_dead_group(&outbox, db, Some(&fps[2]))
        .await
        .expect("discard group");
    assert_eq!(discarded, 3);
    assert_eq!(count(db, EventStatus::Fail).await, 3);
    assert_eq!(Events::find().count(db).await.expect("count"), 9);
    let left = ops::dead_letter_groups(&outbox, db).await.expect("groups");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].fingerprint.as_deref(), Some(fps[1].as_str()));
}

async fn a_group_is_retried_or_discarded_alone(ctx: &TestContext) {
    let db = &ctx.db;
    let outbox = Outbox::default();
    let (broker, large, none) = seed(ctx).await;
    let retried = ops::retry_dead_group(&outbox, db, Some(BROKER))
        .await
        .expect("retry group");
    assert_eq!(retried, 3);
    for &id in &broker {
        let e = event(db, id).await;
        assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 0), "{id}");
        assert_eq!(e.claim_owner, None);
    }
    for &id in large.iter().chain(&none) {
        assert_eq!(event(db, id).await.status, EventStatus::Fail, "{id}");
    }
    // Its events are no dead letters any more: retrying the group again finds none.
    assert_eq!(
        ops::retry_dead_group(&outbox, db, Some(BROKER))
            .await
            .expect("again"),
        0
    );
    assert_eq!(
        ops::retry_dead_group(&outbox, db, Some("other"))
            .await
            .expect("none"),
        0
    );

    // The group without an error, then the other group: deleted, and nothing else.
    assert_eq!(
        ops::discard_dead_group(&outbox, db, None)
            .await
            .expect("discard"),
        1
    );
    assert!(Events::find_by_id(none[0])
        .one(db)
        .await
        .expect("read")
        .is_none());
    assert_eq!(count(db, EventStatus::Fail).await, 2);
    let discarded = ops::discard_dead_group(&outbox, db, Some(&fingerprint(TOO_LARGE)))
        .await
        .expect("discard");
    assert_eq!(discarded, 2);
    assert_eq!(count(db, EventStatus::Fail).await, 0);
    // The delivered event that last failed with TOO_LARGE and the retried ones stay.
    assert_eq!(count(db, EventStatus::Success).await, 1);
    assert_eq!(count(db, EventStatus::Wait).await, 4);
    assert!(ops::dead_letter_groups(&outbox, db)
        .await
        .expect("groups")
        .is_empty());
}

/// A group of more dead letters than one page (1,000 ids), each with an error of its own (so
/// more distinct errors than one statement names), is retried whole; another group
/// interleaved with it by id stays dead.
async fn a_group_larger_than_a_page_is_retried_whole(ctx: &TestContext) {
    const N: usize = 1_500;
    let db = &ctx.db;
    let outbox = Outbox::default();
    let ids = insert_many(db, "BIG", N).await;
    let (big, other): (Vec<i64>, Vec<i64>) = ids.iter().partition(|&&id| id % 7 != 0);
    // `retryable: broker busy, event <id>`, written by one statement.
    let error = match ctx.backend {
        Backend::MySql => "CONCAT('retryable: broker busy, event ', id)",
        _ => "'retryable: broker busy, event ' || id",
    };
    dead_letter(db, &big, None).await;
    Events::update_many()
        .col_expr(Column::LastError, Expr::cust(error))
        .filter(Column::Id.is_in(big.clone()))
        .exec(db)
        .await
        .expect("errors");
    dead_letter(db, &other, Some(TOO_LARGE)).await;
    let groups = ops::dead_letter_groups(&outbox, db).await.expect("groups");
    assert_eq!(groups.len(), 2);
    assert_eq!(
        (groups[0].count, groups[0].errors),
        (big.len() as u64, big.len() as u64)
    );
    let fp = groups[0].fingerprint.clone().expect("an error");
    assert_eq!(fp, "retryable: broker busy, event <n>");
    let retried = ops::retry_dead_group(&outbox, db, Some(&fp))
        .await
        .expect("retry group");
    assert_eq!(retried, big.len() as u64);
    assert_eq!(count(db, EventStatus::Wait).await, big.len() as u64);
    assert_eq!(count(db, EventStatus::Fail).await, other.len() as u64);
    let discarded = ops::discard_dead_group(&outbox, db, Some(&fingerprint(TOO_LARGE)))
        .await
        .expect("discard group");
    assert_eq!(discarded, other.len() as u64);
    assert_eq!(
        Events::find().count(db).await.expect("count"),
        big.len() as u64
    );
}

async fn discard_all_dead_deletes_only_dead_letters(ctx: &TestContext) {
    let db = &ctx.db;
    let outbox = Outbox::default();
    seed(ctx).await;
    assert_eq!(
        ops::discard_all_dead(&outbox, db)
            .await
            .expect("discard all"),
        6
    );
    assert_eq!(count(db, EventStatus::Fail).await, 0);
    assert_eq!(count(db, EventStatus::Wait).await, 1);
    assert_eq!(count(db, EventStatus::Success).await, 1);
    assert_eq!(ops::discard_all_dead(&outbox, db).await.expect("again"), 0);
}

async fn find_events_by_key_or_id_newest_first(ctx: &TestContext) {
    let db = &ctx.db;
    let outbox = Outbox::default();
    let a1 = new_event(db, "ORD-7").await;
    let b = new_event(db, "ORD-8").await;
    let a2 = new_event(db, "ORD-7").await;
    // An event whose key reads as another event's id: a search for that number finds both.
    let by_number = new_event(db, &b.to_string()).await;
    let find = async |q: &str, limit: u64| -> Vec<i64> {
        let found = ops::find_events(&outbox, db, q, limit).await.expect("find");
        found.iter().map(|e| e.id).collect()
    };
    assert_eq!(find("ORD-7", 10).await, vec![a2, a1], "newest first");
    assert_eq!(find("  ORD-7 ", 10).await, vec![a2, a1], "trimmed");
    assert_eq!(find("ORD-7", 1).await, vec![a2], "at most the limit");
    assert_eq!(find("ORD", 10).await, Vec::<i64>::new(), "whole keys only");
    assert_eq!(find("", 10).await, Vec::<i64>::new());
    assert_eq!(find(&b.to_string(), 10).await, vec![by_number, b]);
    let missing = (by_number + 1000).to_string();
    assert_eq!(find(&missing, 10).await, Vec::<i64>::new());
    let found = ops::find_events(&outbox, db, "ORD-8", 10)
        .await
        .expect("find");
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].biz_no.as_str(), found[0].status),
        ("ORD-8", EventStatus::Wait)
    );
}
