//! Fault-free delivery: every event once, its fields where the consumer reads them, a key's
//! order.
use std::collections::HashMap;
use std::time::Duration;

use sea_orm_outbox::{EventStatus, NewEvent, OrderedPolicy};

use super::{count, destination, write, Inbox, Relays, DEADLINE, RETRY};
use crate::{Broker, TestDb};

/// Events of the fault-free run.
pub const EVENTS: usize = 5_000;

/// 3 relays drain [`EVENTS`] events written before they start; each event reaches the
/// consumer exactly once, and no row is left `WAIT`, `SENDING` or `FAIL`.
pub async fn every_event_once<B: Broker>(db: &TestDb, broker: &B) {
    let dest = destination("once");
    let mut inbox = Inbox::new(broker.consumer(&dest).await);
    let events = (0..EVENTS)
        .map(|i| {
            NewEvent::raw(
                format!("order-{i}"),
                "OrderCreated",
                format!(r#"{{"n":{i}}}"#),
            )
        })
        .collect();
    let ids = write(db, events).await;
    let relays = Relays::through(db, broker, &broker.addr(), &dest, 3, RETRY, |c| c).await;
    let all = inbox
        .until(DEADLINE, |inbox| inbox.distinct() >= EVENTS)
        .await;
    inbox.settle(Duration::from_secs(1)).await;
    relays.stop().await;
    assert!(all, "{} of {EVENTS} events arrived", inbox.distinct());
    for id in &ids {
        assert!(inbox.times.contains_key(id), "event {id} never arrived");
    }
    assert_eq!(inbox.duplicates(), 0, "duplicates in a fault-free run");
    for status in [EventStatus::Wait, EventStatus::Sending, EventStatus::Fail] {
        assert_eq!(
            count(&db.db, status).await,
            0,
            "rows left {}",
            status.as_str()
        );
    }
}

/// The event id, type, key, headers and payload of an event arrive where the consumer reads
/// them.
pub async fn fields_arrive<B: Broker>(db: &TestDb, broker: &B) {
    let dest = destination("fields");
    let mut inbox = Inbox::new(broker.consumer(&dest).await);
    let event = NewEvent::raw("order-42", "OrderPaid", r#"{"order":42,"total":"12.50"}"#)
        .header("tenant", "acme")
        .header("x-request-id", "req-7");
    let id = write(db, vec![event]).await[0];
    let relays = Relays::through(db, broker, &broker.addr(), &dest, 1, RETRY, |c| c).await;
    let arrived = inbox.until(DEADLINE, |inbox| inbox.distinct() >= 1).await;
    relays.stop().await;
    assert!(arrived, "the event never arrived");
    let got = &inbox.messages[0];
    assert_eq!(got.event_id, id);
    assert_eq!(got.event_type, "OrderPaid");
    assert_eq!(got.key, "order-42");
    assert_eq!(got.payload, r#"{"order":42,"total":"12.50"}"#);
    for (name, value) in [("tenant", "acme"), ("x-request-id", "req-7")] {
        assert!(
            got.headers.iter().any(|(n, v)| n == name && v == value),
            "header {name}={value} missing from {:?}",
            got.headers
        );
    }
}

/// Keys of the ordered run, and events per key.
pub const KEYS: usize = 50;
/// Events per key of the ordered run.
pub const PER_KEY: usize = 20;

/// In ordered mode 3 relays drain [`KEYS`] keys × [`PER_KEY`] events written interleaved; at
/// the consumer each key's events arrive in the order they were written. Skipped, with a
/// message, for a broker that keeps no order ([`Broker::keeps_key_order`]).
pub async fn ordered_keeps_key_order<B: Broker>(db: &TestDb, broker: &B) {
    if !broker.keeps_key_order() {
        eprintln!("{}: keeps no key order; ordered case not run", B::NAME);
        return;
    }
    let dest = destination("ordered");
    let mut inbox = Inbox::new(broker.consumer(&dest).await);
    let events = (0..PER_KEY)
        .flat_map(|n| {
            (0..KEYS).map(move |k| {
                NewEvent::raw(
                    format!("key-{k}"),
                    "OrderUpdated",
                    format!(r#"{{"n":{n}}}"#),
                )
            })
        })
        .collect();
    write(db, events).await;
    let relays = Relays::through(db, broker, &broker.addr(), &dest, 3, RETRY, |c| {
        c.ordered(Some(OrderedPolicy::Block))
    })
    .await;
    let total = KEYS * PER_KEY;
    let all = inbox
        .until(DEADLINE, |inbox| inbox.distinct() >= total)
        .await;
    relays.stop().await;
    assert!(all, "{} of {total} events arrived", inbox.distinct());
    let mut last: HashMap<&str, i64> = HashMap::new();
    for message in &inbox.messages {
        if let Some(previous) = last.insert(&message.key, message.event_id) {
            assert!(
                previous < message.event_id,
                "key {}: event {} arrived after event {previous}",
                message.key,
                message.event_id
            );
        }
    }
}
