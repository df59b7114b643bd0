//! Faults: a message the broker refuses (alone, and in an ordered batch), an outage, wrong
//! credentials.
use std::time::Duration;

use sea_orm::EntityTrait;
use sea_orm_outbox::event_record::Entity as Events;
use sea_orm_outbox::{EventStatus, NewEvent, OutboxMessage, PublishErrorKind, RetryPolicy};

use super::{count, destination, wait_until, write, Inbox, Relays, DEADLINE};
use crate::{Broker, TestDb};

/// One oversized event among three others in one claim: it goes to `FAIL` on its first
/// attempt (`retry_count` 1: that attempt), with a reason, and the three others arrive.
pub async fn oversized_fails_alone<B: Broker>(db: &TestDb, broker: &B) {
    let dest = destination("oversized");
    let mut inbox = Inbox::new(broker.consumer(&dest).await);
    let big = "x".repeat(broker.oversized_payload_bytes());
    let events = vec![
        NewEvent::raw("order-1", "OrderCreated", r#"{"n":1}"#),
        NewEvent::raw("order-2", "OrderCreated", format!(r#"{{"big":"{big}"}}"#)),
        NewEvent::raw("order-3", "OrderCreated", r#"{"n":3}"#),
        NewEvent::raw("order-4", "OrderCreated", r#"{"n":4}"#),
    ];
    let ids = write(db, events).await;
    let retry = RetryPolicy::new(5, Duration::from_millis(200), Duration::from_secs(5));
    let relays = Relays::through(db, broker, &broker.addr(), &dest, 1, retry, |c| c).await;
    let others = inbox.until(DEADLINE, |inbox| inbox.distinct() >= 3).await;
    let failed = wait_until(DEADLINE, || async {
        count(&db.db, EventStatus::Fail).await == 1
    })
    .await;
    relays.stop().await;
    assert!(others, "{} of the 3 others arrived", inbox.distinct());
    assert!(failed, "the oversized event is not FAIL");
    let row = Events::find_by_id(ids[1])
        .one(&db.db)
        .await
        .expect("read")
        .expect("the oversized event's row");
    assert_eq!(row.status, EventStatus::Fail);
    // The failed attempt is counted once; a permanent failure is not tried again.
    assert_eq!(row.retry_count, 1, "a permanent failure is not retried");
    assert!(
        row.last_error.as_deref().is_some_and(|e| !e.is_empty()),
        "no reason recorded"
    );
    assert!(
        !inbox.times.contains_key(&ids[1]),
        "the oversized event arrived"
    );
}

/// 3 relays send to the server of [`Broker::outage`] (by default through a proxy); mid-run the
/// server goes away for 5 s (the proxy drops every connection and refuses new ones) while more
/// events are written. Every event arrives afterwards and none is `FAIL`.
pub async fn outage_loses_nothing<B: Broker>(db: &TestDb, broker: &B) {
    let dest = destination("outage");
    let outage = broker.outage(&dest).await;
    let mut inbox = Inbox::new(outage.consumer);
    let first = (0..2_000)
        .map(|i| {
            NewEvent::raw(
                format!("order-{i}"),
                "OrderCreated",
                format!(r#"{{"n":{i}}}"#),
            )
        })
        .collect();
    let mut ids = write(db, first).await;
    // Enough retries to outlast the outage: 40 attempts, at most 1 s apart.
    let retry = RetryPolicy::new(40, Duration::from_millis(100), Duration::from_secs(1));
    let relays = Relays::through(db, broker, &outage.addr, &dest, 3, retry, |c| c).await;
    assert!(
        inbox.until(DEADLINE, |inbox| inbox.distinct() >= 200).await,
        "the relays never started delivering"
    );
    outage.switch.down().await;
    let more = (2_000..3_000)
        .map(|i| {
            NewEvent::raw(
                format!("order-{i}"),
                "OrderCreated",
                format!(r#"{{"n":{i}}}"#),
            )
        })
        .collect();
    ids.extend(write(db, more).await);
    inbox.settle(Duration::from_secs(5)).await;
    outage.switch.up().await;
    let all = inbox
        .until(DEADLINE, |inbox| inbox.distinct() >= ids.len())
        .await;
    relays.stop().await;
    assert!(all, "{} of {} events arrived", inbox.distinct(), ids.len());
    assert_eq!(
        count(&db.db, EventStatus::Fail).await,
        0,
        "events went to FAIL"
    );
}

/// A publisher with a wrong secret does not start; its error names the setting and does not
/// show the secret.
pub async fn wrong_credentials_are_refused<B: Broker>(_db: &TestDb, broker: &B) {
    let dest = destination("credentials");
    // The attempt may include starting a private server with a login.
    let attempt = tokio::time::timeout(Duration::from_secs(90), broker.wrong_credentials(&dest))
        .await
        .expect("the start with wrong credentials ends within 90 s");
    let error = attempt
        .error
        .expect("a publisher with a wrong secret must not start");
    assert!(
        error.contains(&attempt.setting),
        "the error does not name {}: {error}",
        attempt.setting
    );
    assert!(
        !error.contains(&attempt.secret),
        "the error shows the secret: {error}"
    );
}

/// One ordered batch of keys A and B sent by `publish_batch`: key A's second message is one the
/// broker refuses for good. It fails as permanent, key A's later message is not sent and fails
/// as retryable (it is sent again with its key's next claim), and key B's messages all arrive,
/// in order where the broker keeps one ([`Broker::keeps_key_order`]).
pub async fn ordered_batch_stops_a_key<B: Broker>(_db: &TestDb, broker: &B) {
    let dest = destination("stops");
    let mut inbox = Inbox::new(broker.consumer(&dest).await);
    // Nothing retries here: a send timeout that no round of the batch comes near, also on a
    // topic the broker has just created.
    let publisher = broker
        .publisher(&broker.addr(), &dest, Duration::from_secs(10))
        .await
        .expect("publisher starts");
    let big = format!(
        r#"{{"big":"{}"}}"#,
        "x".repeat(broker.oversized_payload_bytes())
    );
    let batch: Vec<OutboxMessage> = [
        (1, "A", r#"{"n":1}"#),
        (2, "B", r#"{"n":2}"#),
        (3, "A", big.as_str()),
        (4, "B", r#"{"n":4}"#),
        (5, "A", r#"{"n":5}"#),
        (6, "B", r#"{"n":6}"#),
    ]
    .into_iter()
    .map(|(id, key, payload)| {
        OutboxMessage::new(id, key, "OrderCreated", payload).with_ordered(true)
    })
    .collect();
    let kinds: Vec<Option<PublishErrorKind>> = publisher
        .publish_batch(&batch)
        .await
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind))
        .collect();
    use PublishErrorKind::{Permanent, Retryable};
    assert_eq!(
        kinds,
        [None, None, Some(Permanent), None, Some(Retryable), None],
        "the outcome of each message"
    );
    let arrived = inbox.until(DEADLINE, |inbox| inbox.distinct() >= 4).await;
    inbox.settle(Duration::from_secs(1)).await;
    drop(publisher);
    assert!(
        arrived,
        "{} of the 4 sent messages arrived",
        inbox.distinct()
    );
    let of_key = |key: &str| -> Vec<i64> {
        let mut ids: Vec<i64> = inbox
            .messages
            .iter()
            .filter(|m| m.key == key)
            .map(|m| m.event_id)
            .collect();
        if !broker.keeps_key_order() {
            ids.sort_unstable();
        }
        ids
    };
    assert_eq!(of_key("A"), [1], "key A stops at its refused message");
    assert_eq!(of_key("B"), [2, 4, 6], "key B");
}
