use super::*;
use rocketmq_model::common::message::MessageTrait;

#[test]
fn message_carries_the_event() {
    let event = OutboxMessage::new(42, "ORD-42", "ORDER_CREATED", r#"{"a":1}"#)
        .with_header("tenant", "acme");
    let m = build_message("T", &event).expect("message");
    // A row written outside the library with one of RocketMQ's own names is refused for good.
    for name in ["DELAY", "__RMQ.TRANSIENT.x"] {
        let bad = event.clone().with_header(name, "1");
        let err = build_message("T", &bad).expect_err(name);
        assert!(!err.is_retryable(), "{name}: {err}");
    }
    assert_eq!(m.topic().as_str(), "T");
    assert_eq!(
        m.get_body().map(|b| b.as_ref()),
        Some(br#"{"a":1}"#.as_ref())
    );
    assert_eq!(
        m.get_keys().map(|k| k.as_str().to_owned()).as_deref(),
        Some("ORD-42")
    );
    assert_eq!(
        m.tags().map(|t| t.to_string()).as_deref(),
        Some("ORDER_CREATED")
    );
    let props = m.get_properties();
    let get = |k: &str| {
        props
            .iter()
            .find(|(n, _)| n.as_str() == k)
            .map(|(_, v)| v.as_str().to_owned())
    };
    assert_eq!(get("eventId").as_deref(), Some("42"));
    assert_eq!(get("eventType").as_deref(), Some("ORDER_CREATED"));
    assert_eq!(get("bizNo").as_deref(), Some("ORD-42"));
    assert_eq!(get("tenant").as_deref(), Some("acme"));
    // A reserved name (only possible for a row edited by hand) is refused, not sent.
    let bad = event.clone().with_header("KEYS", "x");
    assert!(build_message("T", &bad).is_err());
}

/// One send the fake producer saw: the event ids it carried and the queue chosen
/// (`None`: the client's own choice).
type Seen = (Vec<i64>, Option<MessageQueue>);

/// A producer without a broker: a route of 4 queues on broker-a and 4 on broker-b for
/// every topic; a send that carries an event of `fail` gets a non-OK status.
struct FakeProducer {
    seen: std::sync::Arc<Mutex<Vec<Seen>>>,
    fail: std::collections::HashSet<i64>,
}

fn route(topic: &str) -> Vec<MessageQueue> {
    ["broker-a", "broker-b"]
        .iter()
        .flat_map(|b| (0..4).map(move |q| MessageQueue::from_parts(topic, *b, q)))
        .collect()
}

fn event_ids(messages: &[&Message]) -> Vec<i64> {
    messages
        .iter()
        .filter_map(|m| {
            m.get_properties()
                .iter()
                .find(|(n, _)| n.as_str() == "eventId")
                .and_then(|(_, v)| v.as_str().parse().ok())
        })
        .collect()
}

impl FakeProducer {
    fn outcome(&self, ids: Vec<i64>, queue: Option<MessageQueue>) -> SendResult {
        let failed = ids.iter().any(|id| self.fail.contains(id));
        self.seen.lock().expect("lock").push((ids, queue));
        SendResult {
            send_status: if failed {
                SendStatus::FlushDiskTimeout
            } else {
                SendStatus::SendOk
            },
            ..SendResult::default()
        }
    }
}

impl ProducerHandle for FakeProducer {
    fn send(&self, message: Message, _: u64) -> SendFuture<'_, ClientResult<Option<SendResult>>> {
        let r = self.outcome(event_ids(&[&message]), None);
        Box::pin(async move { Ok(Some(r)) })
    }

    fn send_batch(
        &self,
        messages: Vec<Message>,
        _: u64,
    ) -> SendFuture<'_, ClientResult<SendResult>> {
        let r = self.outcome(event_ids(&messages.iter().collect::<Vec<_>>()), None);
        Box::pin(async move { Ok(r) })
    }

    fn send_selecting<'a>(
        &'a self,
        message: Outgoing,
        _: u64,
        select: QueueSelector<'a>,
    ) -> SendFuture<'a, ClientResult<Option<SendResult>>> {
        let (topic, ids) = match &message {
            Outgoing::One(m) => (m.topic().to_string(), event_ids(&[m])),
            Outgoing::Batch(b) => (
                b.messages[0].topic().to_string(),
                event_ids(&b.messages.iter().collect::<Vec<_>>()),
            ),
        };
        let queue = select(&route(&topic));
        let r = self.outcome(ids, queue);
        Box::pin(async move { Ok(Some(r)) })
    }

    fn shutdown(self: Box<Self>) -> SendFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// A publisher on the fake producer (topics: `E1` → `T1`, `E2` → `T2`).
fn fake(failover: Failover, fail: &[i64]) -> (RocketMqPublisher, std::sync::Arc<Mutex<Vec<Seen>>>) {
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let config = RocketMqConfig::new("127.0.0.1:9876")
        .topic("T1")
        .topic_for("E2", "T2")
        .failover(failover);
    let avoidance = (failover == Failover::Outbox)
        .then(|| BrokerAvoidance::new(std::time::Duration::from_secs(30)));
    let producer = FakeProducer {
        seen: seen.clone(),
        fail: fail.iter().copied().collect(),
    };
    (
        RocketMqPublisher {
            config,
            producer: Box::new(producer),
            avoidance,
        },
        seen,
    )
}

fn ordered(id: i64, key: &str, event_type: &str) -> OutboxMessage {
    OutboxMessage::new(id, key, event_type, "{}").with_ordered(true)
}

/// The queue `key` goes to on the fake route.
fn queue_of(key: &str, topic: &str) -> MessageQueue {
    route(topic)[queue_of_key(key, 8).expect("a queue")].clone()
}

#[tokio::test]
async fn an_ordered_message_goes_to_its_keys_queue_whatever_the_failover() {
    for failover in [Failover::Outbox, Failover::Client, Failover::Off] {
        let (p, seen) = fake(failover, &[]);
        if let Some(a) = &p.avoidance {
            // Avoiding the key's broker changes nothing for an ordered message.
            a.failed(
                queue_of("ORD-1", "T1").broker_name().as_str(),
                Instant::now(),
            );
        }
        for id in 1..=3 {
            p.publish(&ordered(id, "ORD-1", "E1")).await.expect("sent");
        }
        p.publish(&ordered(4, "ORD-2", "E1")).await.expect("sent");
        // Unordered: the client's choice (or the avoidance's), not the key's.
        p.publish(&OutboxMessage::new(5, "ORD-1", "E1", "{}"))
            .await
            .expect("sent");
        let seen = seen.lock().expect("lock").clone();
        let queues: Vec<_> = seen.iter().map(|(_, q)| q.clone()).collect();
        let want = Some(queue_of("ORD-1", "T1"));
        assert_eq!(
            &queues[..3],
            &[want.clone(), want.clone(), want],
            "{failover}"
        );
        assert_eq!(queues[3], Some(queue_of("ORD-2", "T1")), "{failover}");
        match failover {
            Failover::Outbox => assert!(queues[4].is_some()),
            _ => assert_eq!(queues[4], None, "{failover}"),
        }
    }
}

#[tokio::test]
async fn an_ordered_batch_stops_a_key_at_its_first_failed_chunk() {
    let (p, seen) = fake(Failover::Off, &[3]);
    // Key A: 1, 2 (T1), 3, 4 (T2), 5 (T1): chunks [1, 2], [3, 4], [5]; 3 fails.
    // Key B: 6, 7 (T1), interleaved.
    let messages = [
        ordered(1, "A", "E1"),
        ordered(6, "B", "E1"),
        ordered(2, "A", "E1"),
        ordered(3, "A", "E2"),
        ordered(4, "A", "E2"),
        ordered(7, "B", "E1"),
        ordered(5, "A", "E1"),
    ];
    let results = p.publish_batch(&messages).await;
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, true, true, false, false, true, false]);
    let not_sent = results[6].as_ref().expect_err("not sent");
    assert_eq!(not_sent.kind, PublishErrorKind::Retryable);
    assert!(
        not_sent.message.contains("earlier event of key A"),
        "{not_sent:?}"
    );
    let seen = seen.lock().expect("lock").clone();
    let mut sends: Vec<_> = seen.iter().map(|(ids, _)| ids.clone()).collect();
    sends.sort();
    // Event 5 was never sent; B's events went as one batch.
    assert_eq!(sends, [vec![1, 2], vec![3, 4], vec![6, 7]]);
    for (ids, queue) in &seen {
        let (key, topic) = match ids[0] {
            1 | 2 => ("A", "T1"),
            3 | 4 => ("A", "T2"),
            _ => ("B", "T1"),
        };
        assert_eq!(queue.as_ref(), Some(&queue_of(key, topic)), "{ids:?}");
    }
    // Unordered batches are unchanged: one per topic, the client's queue (Failover::Off).
    let (p, seen) = fake(Failover::Off, &[]);
    let plain: Vec<OutboxMessage> = (1..=4)
        .map(|id| OutboxMessage::new(id, ["A", "B"][id as usize % 2], "E1", "{}"))
        .collect();
    assert!(p.publish_batch(&plain).await.iter().all(Result::is_ok));
    assert_eq!(
        seen.lock().expect("lock").clone(),
        [(vec![1, 2, 3, 4], None)]
    );
}

fn item<'a>(key: &'a str, topic: &'a str, size: usize) -> ChunkItem<'a> {
    ChunkItem {
        key,
        topic: Some(topic),
        size,
        alone: false,
    }
}

#[test]
fn ordered_chunks_follow_each_key_in_event_order() {
    let items = [
        item("A", "T", 10), // 0
        item("B", "T", 10), // 1
        item("A", "T", 10), // 2
        item("A", "U", 10), // 3: another topic starts a chunk
        item("A", "U", 10), // 4
        item("B", "T", 10), // 5
        ChunkItem {
            alone: true,
            ..item("A", "U", 10)
        }, // 6: alone
        item("A", "U", 10), // 7: after a lone one, a new chunk
        ChunkItem {
            topic: None,
            ..item("B", "T", 0)
        }, // 8: not built
        item("B", "T", 10), // 9
        item("C", "T", 15), // 10
        item("C", "T", 15), // 11: over the limit of 25
    ];
    let plan = ordered_chunks(&items, 25);
    assert_eq!(
        plan,
        vec![
            ("A", vec![vec![0, 2], vec![3, 4], vec![6], vec![7]]),
            ("B", vec![vec![1, 5], vec![8], vec![9]]),
            ("C", vec![vec![10], vec![11]]),
        ]
    );
    // Within the limit, one key's consecutive events of one topic are one chunk, and the
    // keys keep the order of their first message.
    let items: Vec<_> = (0..6).map(|i| item(["K2", "K1"][i % 2], "T", 1)).collect();
    assert_eq!(
        ordered_chunks(&items, 100),
        vec![("K2", vec![vec![0, 2, 4]]), ("K1", vec![vec![1, 3, 5]])]
    );
    assert!(ordered_chunks(&[], 100).is_empty());
}

#[test]
fn a_send_given_up_counts_as_a_failure_of_its_broker() {
    let avoidance = BrokerAvoidance::new(std::time::Duration::from_secs(30));
    let brokers = ["broker-a", "broker-b"];
    // Finished sends leave the avoidance to the outcome.
    let chosen = Mutex::new(Some("broker-a".to_owned()));
    drop(PendingSend {
        avoidance: &avoidance,
        chosen: &chosen,
        finished: true,
    });
    let now = Instant::now();
    let picks: Vec<_> = (0..4)
        .map(|_| avoidance.choose(&brokers, now).expect("a broker"))
        .collect();
    assert!(picks.contains(&0), "broker-a still chosen: {picks:?}");
    // Dropped before it finished (the worker's timeout): broker-a is avoided.
    drop(PendingSend {
        avoidance: &avoidance,
        chosen: &chosen,
        finished: false,
    });
    for _ in 0..4 {
        assert_eq!(avoidance.choose(&brokers, now), Some(1));
    }
    // Dropped before any queue was chosen: nothing to count.
    let none = Mutex::new(None);
    drop(PendingSend {
        avoidance: &avoidance,
        chosen: &none,
        finished: false,
    });
}
