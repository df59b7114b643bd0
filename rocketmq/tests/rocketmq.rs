//! The RocketMQ publisher against a REAL broker (see `tests/rmq_support`): end to end, three
//! workers over 1,000 events, and a message too large for the broker. Runs on Postgres and
//! MariaDB; each test has its own topic and consumer group, so the tests may run in parallel
//! against one broker. The broker-outage test lives in `tests/rocketmq_outage.rs` with a broker
//! of its own. The tests of name servers that cannot be reached (nothing listening, a name that
//! resolves nowhere) need no broker and always run.
#[path = "../../tests/common/mod.rs"]
mod common;
mod rmq_support;

use common::wait_until;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{
    event_by_biz_no, insert_many, new_event, order, wait_for_success, Backend, Fleet, TestContext,
};
use rmq_support::{count, receive_all, unique, worker_config, Clients};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sea_orm_outbox::{
    transactional_publish, EventStatus, NewEvent, OutboxError, OutboxExt, Publisher, RetryPolicy,
};
use sea_orm_outbox_rocketmq::RocketMqConsumer;
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};

use rmq_support::run_on;

/// One `#[tokio::test]` per backend (Postgres, MariaDB) for each `async fn name(ctx, addr)`.
macro_rules! rocketmq_tests {
    ($($name:ident),* $(,)?) => {
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::run_on(super::Backend::Postgres, concat!("rmq_", stringify!($name)), super::$name).await } )* }
        mod mariadb { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::run_on(super::Backend::MySql, concat!("rmq_", stringify!($name)), super::$name).await } )* }
    };
}

rocketmq_tests!(
    order_reaches_a_real_consumer_exactly_once,
    three_workers_deliver_5000_events_once_each_in_batches,
    batches_are_cut_by_size_and_a_large_event_goes_alone,
    oversized_message_fails_at_once_and_blocks_nothing,
    resent_event_adds_points_once,
    event_types_reach_their_topics_with_headers,
);

fn retry() -> RetryPolicy {
    RetryPolicy::new(10, Duration::from_millis(200), Duration::from_secs(2))
}

/// `n` workers over `ctx` publishing with `publisher` (instance ids `rmq-w<i>`).
async fn start_workers(ctx: &TestContext, publisher: &Arc<RocketMqPublisher>, n: usize) -> Fleet {
    let configs = (0..n).map(|w| worker_config(&format!("rmq-w{w}"), retry()));
    Fleet::start(ctx, 3, publisher.clone(), configs).await
}

async fn order_reaches_a_real_consumer_exactly_once(ctx: &TestContext, addr: &str) {
    let clients = Clients::start(addr, "OUTBOX_E2E", Duration::from_secs(3)).await;

    let (saved, event_id) =
        transactional_publish(&ctx.db, order::new("ORD-E2E-1", 4200), order::created_event)
            .await
            .expect("transactional_publish");
    let payload = format!(r#"{{"amount":4200,"orderId":{}}}"#, saved.id);

    let fleet = start_workers(ctx, &clients.publisher, 1).await;
    let delivered = wait_for_success(&ctx.db, 1, Duration::from_secs(60)).await;
    let (received, summaries) = clients
        .receive_and_stop(fleet, &HashSet::from([event_id]))
        .await;
    for s in summaries {
        assert_eq!(
            (s.published, s.retried, s.dead_lettered, s.errors),
            (1, 0, 0, 0),
            "{s:?}"
        );
    }

    assert!(delivered, "row not SUCCESS");
    let row = common::event(&ctx.db, event_id).await;
    assert_eq!(
        (row.status, row.retry_count, row.last_error),
        (EventStatus::Success, 0, None)
    );
    assert_eq!(
        received.all.len(),
        1,
        "exactly one message: {:?}",
        received.all
    );
    let m = &received.all[0];
    assert_eq!(m.event_id, Some(event_id));
    assert_eq!(m.body, payload);
    assert_eq!(m.keys.as_deref(), Some("ORD-E2E-1"));
    assert_eq!(m.tag.as_deref(), Some("ORDER_CREATED"));
    assert_eq!(m.property("eventId"), Some(event_id.to_string().as_str()));
    assert_eq!(m.property("eventType"), Some("ORDER_CREATED"));
    assert_eq!(m.property("bizNo"), Some("ORD-E2E-1"));
}

/// The number of messages of each publish call.
type Calls = Arc<std::sync::Mutex<Vec<usize>>>;

/// Delegates to the RocketMQ publisher, recording the size of every publish call (hand it to
/// the fleet and keep only the [`Calls`]: the publisher must be unshared at shutdown).
struct Counted {
    inner: Arc<RocketMqPublisher>,
    calls: Calls,
}

impl Counted {
    fn new(inner: &Arc<RocketMqPublisher>) -> (Arc<Self>, Calls) {
        let calls = Calls::default();
        let counted = Counted {
            inner: inner.clone(),
            calls: calls.clone(),
        };
        (Arc::new(counted), calls)
    }
}

#[async_trait::async_trait]
impl Publisher for Counted {
    async fn publish(
        &self,
        m: &sea_orm_outbox::OutboxMessage,
    ) -> Result<(), sea_orm_outbox::PublishError> {
        self.calls.lock().unwrap().push(1);
        self.inner.publish(m).await
    }
    async fn publish_batch(
        &self,
        m: &[sea_orm_outbox::OutboxMessage],
    ) -> Vec<Result<(), sea_orm_outbox::PublishError>> {
        self.calls.lock().unwrap().push(m.len());
        self.inner.publish_batch(m).await
    }
    fn batches(&self) -> bool {
        self.inner.batches()
    }
}

/// 3 relays × 5,000 events with batch sends (the default): every event
/// received, none twice, and the calls carried batches.
async fn three_workers_deliver_5000_events_once_each_in_batches(ctx: &TestContext, addr: &str) {
    const N: usize = 5000;
    let clients = Clients::start(addr, "OUTBOX_RACE", Duration::from_secs(3)).await;

    let ids: HashSet<i64> = insert_many(&ctx.db, "ORD", N).await.into_iter().collect();

    let started = std::time::Instant::now();
    let (counted, calls) = Counted::new(&clients.publisher);
    let configs = (0..3).map(|w| worker_config(&format!("rmq-w{w}"), retry()));
    let fleet = Fleet::start(ctx, 3, counted, configs).await;
    let drained = wait_for_success(&ctx.db, N as u64, Duration::from_secs(240)).await;
    let drain_time = started.elapsed();
    let (received, summaries) = clients.receive_and_stop(fleet, &ids).await;
    let mut published = 0;
    for s in summaries {
        assert_eq!((s.dead_lettered, s.errors, s.late_acks), (0, 0, 0), "{s:?}");
        published += s.published;
    }

    assert!(
        drained,
        "outbox not drained: {} SUCCESS",
        count(&ctx.db, EventStatus::Success).await
    );
    assert_eq!(published, N as u64);
    received.assert_all_arrived(&ids);
    assert_eq!(
        received.duplicates(),
        0,
        "a fault-free run delivers each event once"
    );
    assert_eq!(received.all.len(), N);
    let calls = calls.lock().unwrap().clone();
    assert!(
        calls.iter().filter(|&&n| n > 1).count() * 2 > calls.len(),
        "most calls should carry batches: {calls:?}"
    );
    eprintln!(
        "{:?}: {N} events through RocketMQ by 3 workers in {:.1} s, {} publish calls (largest {})",
        ctx.backend,
        drain_time.as_secs_f64(),
        calls.len(),
        calls.iter().max().unwrap_or(&0)
    );
}

/// Batches are cut at `max_batch_bytes` (64 KiB here): 30 events of 20 KiB go as batches of
/// at most three; an event of 100 KiB (over the batch limit, under the message limit) goes
/// alone and is delivered; one of 300 KiB (over `max_message_bytes`, 256 KiB here) fails
/// alone, for good, and takes no other event with it.
async fn batches_are_cut_by_size_and_a_large_event_goes_alone(ctx: &TestContext, addr: &str) {
    let topic = unique("OUTBOX_CUT");
    let config = RocketMqConfig::new(addr)
        .topic(topic.as_str())
        .producer_group(unique("outbox_cut_pg"))
        .send_timeout(Duration::from_secs(3))
        .max_message_bytes(256 * 1024)
        .max_batch_bytes(64 * 1024);
    let clients = Clients::start_with(addr, &topic, config).await;
    let db = &ctx.db;
    let blob = |n: usize| format!(r#"{{"blob":"{}"}}"#, "x".repeat(n));
    let mut ids = HashSet::new();
    let txn = sea_orm::TransactionTrait::begin(db).await.expect("begin");
    for i in 0..30 {
        let e = NewEvent::raw(format!("MID-{i}"), "ORDER_CREATED", blob(20 * 1024));
        ids.insert(txn.with_event(e).await.expect("insert"));
        if i == 10 {
            let e = NewEvent::raw("LARGE-1", "ORDER_CREATED", blob(100 * 1024));
            ids.insert(txn.with_event(e).await.expect("insert"));
        }
        if i == 20 {
            let e = NewEvent::raw("HUGE-1", "ORDER_CREATED", blob(300 * 1024));
            txn.with_event(e).await.expect("insert");
        }
    }
    txn.commit().await.expect("commit");
    let (counted, calls) = Counted::new(&clients.publisher);
    let config = worker_config("rmq-cut", retry()).batch_size(100);
    let fleet = Fleet::start(ctx, 3, counted, [config]).await;
    let settled = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            count(db, EventStatus::Success).await == 31 && count(db, EventStatus::Fail).await == 1
        },
    )
    .await;
    let (received, summaries) = clients.receive_and_stop(fleet, &ids).await;
    assert!(
        settled,
        "expected 31 SUCCESS and 1 FAIL: {} / {}",
        count(db, EventStatus::Success).await,
        count(db, EventStatus::Fail).await
    );
    for s in summaries {
        assert_eq!(
            (s.published, s.dead_lettered, s.retried),
            (31, 1, 0),
            "{s:?}"
        );
    }
    let huge = event_by_biz_no(db, "HUGE-1").await;
    assert_eq!((huge.status, huge.retry_count), (EventStatus::Fail, 1));
    let reason = huge.last_error.unwrap_or_default();
    assert!(
        reason.contains("max value"),
        "reason names the size: {reason}"
    );
    received.assert_all_arrived(&ids);
    assert_eq!(received.duplicates(), 0);
    // Every message arrived whole.
    let by_event = received.by_event();
    for id in &ids {
        let m = by_event[id][0];
        assert!(
            m.body.len() >= 20 * 1024,
            "event {id} arrived cut: {} bytes",
            m.body.len()
        );
    }
    eprintln!(
        "{:?}: publish calls {:?}; oversized event FAIL with: {reason}",
        ctx.backend,
        calls.lock().unwrap()
    );
}

async fn oversized_message_fails_at_once_and_blocks_nothing(ctx: &TestContext, addr: &str) {
    let clients = Clients::start(addr, "OUTBOX_BIG", Duration::from_secs(3)).await;
    let db = &ctx.db;

    // One byte over the broker's (and client's) 4 MiB limit; written by raw SQL, because
    // `with_event` refuses it.
    let big = format!(
        r#"{{"blob":"{}"}}"#,
        "x".repeat(sea_orm_outbox::EventLimits::DEFAULT_MAX_PAYLOAD_BYTES - 11 + 1)
    );
    assert_eq!(
        big.len(),
        sea_orm_outbox::EventLimits::DEFAULT_MAX_PAYLOAD_BYTES + 1
    );
    let refused = db
        .with_event(NewEvent::raw("BIG-1", "ORDER_CREATED", big.clone()))
        .await;
    assert!(
        matches!(refused, Err(OutboxError::InvalidEvent(_))),
        "write-time validation refuses it"
    );
    let backend = ctx.db_backend();
    let now = common::db_now_sql(backend, None);
    let placeholder = if backend == DbBackend::Postgres {
        "$1"
    } else {
        "?"
    };
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        format!(
            "INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) \
             VALUES ('BIG-1', 'ORDER_CREATED', {placeholder}, 'WAIT', 0, {now}, {now}, {now})"
        ),
        [big.into()],
    ))
    .await
    .expect("raw insert");
    let big_id = event_by_biz_no(db, "BIG-1").await.id;
    let mut small = HashSet::new();
    for i in 0..5 {
        small.insert(new_event(db, &format!("SMALL-{i}")).await);
    }

    let fleet = start_workers(ctx, &clients.publisher, 1).await;
    let settled = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            count(db, EventStatus::Success).await == 5 && count(db, EventStatus::Fail).await == 1
        },
    )
    .await;
    let (received, summaries) = clients.receive_and_stop(fleet, &small).await;
    for s in summaries {
        assert_eq!(
            (s.published, s.dead_lettered, s.retried),
            (5, 1, 0),
            "{s:?}"
        );
    }

    assert!(settled, "expected 5 SUCCESS and 1 FAIL");
    let row = common::event(db, big_id).await;
    assert_eq!(
        (row.status, row.retry_count),
        (EventStatus::Fail, 1),
        "FAIL after one attempt"
    );
    let reason = row.last_error.unwrap_or_default();
    assert!(
        reason.contains("max value") || reason.contains("exceeds"),
        "reason names the size: {reason}"
    );
    eprintln!("{:?}: oversized event FAIL with: {reason}", ctx.backend);
    assert_eq!(received.distinct(), small, "the other events are delivered");
    assert_eq!(received.duplicates(), 0);
}

/// Starting with no name server is a clear error, quickly.
#[tokio::test]
async fn start_without_name_server_is_a_clear_error() {
    // Nothing listens on port 1 of the loopback address.
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        RocketMqPublisher::start(RocketMqConfig::new("127.0.0.1:1")),
    )
    .await
    .expect("start does not hang")
    .expect_err("no name server");
    assert!(matches!(err, OutboxError::Broker(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("no RocketMQ name server reachable") && text.contains("127.0.0.1:1"),
        "{text}"
    );
    let err = RocketMqConsumer::start("127.0.0.1:1", "g", "T")
        .await
        .expect_err("no name server");
    assert!(matches!(err, OutboxError::Broker(_)), "{err}");
    // Invalid configurations never reach the network.
    for bad in [
        RocketMqConfig::new(""),
        RocketMqConfig::new("localhost"),
        RocketMqConfig::new("127.0.0.1:9876").topic("bad topic"),
        RocketMqConfig::new("127.0.0.1:9876").producer_group(""),
        RocketMqConfig::new("127.0.0.1:9876").send_timeout(Duration::ZERO),
    ] {
        let err = RocketMqPublisher::start(bad).await.expect_err("invalid");
        assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
    }
    // The send timeout must fit the worker's lease and send timeout.
    let worker = sea_orm_outbox::WorkerConfig::default();
    assert!(RocketMqConfig::default().validate_for(&worker).is_ok());
    let slow = RocketMqConfig::default().send_timeout(Duration::from_secs(4));
    assert!(
        slow.validate_for(&worker).is_err(),
        "above the worker's 3 s send timeout"
    );
    let short_lease = worker.clone().lease(Duration::from_secs(6));
    assert!(
        RocketMqConfig::default()
            .validate_for(&short_lease)
            .is_err(),
        "3 s is over a third of 6 s"
    );
}

/// A name server address that resolves nowhere (`.invalid` is reserved for that, RFC 2606):
/// starting fails quickly with an error naming the address and the lookup failure, not a panic
/// and not a hang. Needs no broker: the name is never resolved to anything.
#[tokio::test]
async fn unresolvable_name_server_is_a_clear_error() {
    let addr = "nonexistent.invalid:9876";
    let config = RocketMqConfig::new(addr);
    config
        .validate()
        .expect("well-formed: only resolving can tell");
    let err = tokio::time::timeout(Duration::from_secs(30), RocketMqPublisher::start(config))
        .await
        .expect("start does not hang")
        .expect_err("resolves nowhere");
    assert!(matches!(err, OutboxError::Broker(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("no RocketMQ name server reachable") && text.contains(addr),
        "{text}"
    );
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        RocketMqConsumer::start(addr, "g", "T"),
    )
    .await
    .expect("start does not hang")
    .expect_err("resolves nowhere");
    assert!(matches!(err, OutboxError::Broker(_)), "{err}");
}

backend_test!(
    /// A send whose name servers are one that resolves nowhere and one that accepts connections
    /// and closes them at once (a stand-in in this test: no broker needed), through a real worker:
    /// the client marks the unresolvable one unavailable (no panic), the send fails with a
    /// retryable error within the send timeout, and the event is back in `WAIT` with `retry_count`
    /// 1, its lease cleared and the reason recorded; nothing else moved. (`outbox relay` with
    /// such a name server is the cli crate's `tests/rocketmq.rs`.)
    send_through_an_unresolvable_name_server_keeps_the_event_waiting:
        Postgres, "rmq_unresolvable_name_server_send" => unresolvable_name_server_send;
);

async fn unresolvable_name_server_send(ctx: &TestContext) {
    let closer = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let closer_addr = closer.local_addr().expect("addr");
    let closing = tokio::spawn(async move {
        while let Ok((stream, _)) = closer.accept().await {
            drop(stream);
        }
    });
    let config = RocketMqConfig::new(format!("nonexistent.invalid:9876;{closer_addr}"))
        .topic(unique("OUTBOX_DNS"))
        .producer_group(unique("outbox_test_pg"))
        .send_timeout(Duration::from_secs(1));
    let publisher = Arc::new(
        tokio::time::timeout(Duration::from_secs(10), RocketMqPublisher::start(config))
            .await
            .expect("start does not hang")
            .expect("one name server accepts connections"),
    );
    let id = new_event(&ctx.db, "ORD-DNS-1").await;
    // A long back-off: one failed attempt is all this test looks at.
    let config = worker_config(
        "rmq-dns",
        RetryPolicy::new(3, Duration::from_secs(600), Duration::from_secs(600)),
    );
    let fleet = Fleet::start(ctx, 3, publisher.clone(), [config]).await;
    let started = std::time::Instant::now();
    let failed_once = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let e = common::event(&ctx.db, id).await;
            e.status == EventStatus::Wait && e.retry_count == 1
        },
    )
    .await;
    let took = started.elapsed();
    let summary = tokio::time::timeout(Duration::from_secs(30), fleet.stop())
        .await
        .expect("worker stops")
        .remove(0);
    rmq_support::shutdown_publisher(publisher).await;
    closing.abort();
    assert!(failed_once, "event never went back to WAIT: {summary:?}");
    assert_eq!(
        (summary.published, summary.retried, summary.dead_lettered),
        (0, 1, 0),
        "{summary:?}"
    );
    let e = common::event(&ctx.db, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 1), "{e:?}");
    assert_eq!((e.claim_owner, e.claimed_at), (None, None));
    let reason = e.last_error.unwrap_or_default();
    assert!(reason.contains("RocketMQ"), "{reason}");
    eprintln!("unresolvable name server: send failed after {took:?} with: {reason}");
    assert_eq!(count(&ctx.db, EventStatus::Success).await, 0);
    assert_eq!(count(&ctx.db, EventStatus::Sending).await, 0);
}

/// What `clients`' consumer receives until event `id` arrived (at most 90 s), and `linger`
/// longer.
async fn receive_event(clients: &Clients, id: i64, linger: Duration) -> rmq_support::Received {
    let expected = HashSet::from([id]);
    receive_all(
        &clients.consumer,
        &expected,
        Duration::from_secs(90),
        linger,
    )
    .await
}

/// Adds 10 points to user 7 in the consumer's transaction.
async fn add_points(txn: &sea_orm::DatabaseTransaction) -> Result<(), OutboxError> {
    txn.execute_unprepared("UPDATE user_points SET points = points + 10 WHERE user_id = 7")
        .await?;
    Ok(())
}

async fn points(db: &impl ConnectionTrait) -> i64 {
    db.query_one_raw(Statement::from_string(
        db.get_database_backend(),
        "SELECT points FROM user_points WHERE user_id = 7",
    ))
    .await
    .expect("read points")
    .expect("row")
    .try_get_by_index::<i64>(0)
    .expect("points")
}

/// The idempotent consumer: the same outbox event sent three times through the real broker
/// (as re-sends after reclaims are) adds points once; a failing handler leaves no
/// `t_consumed_message` row, and the redelivered message is then processed.
async fn resent_event_adds_points_once(ctx: &TestContext, addr: &str) {
    use sea_orm_outbox::consumer::consume_once;
    use sea_orm_outbox::consumer::Consumed;
    use sea_orm_outbox::OutboxMessage;
    let db = &ctx.db;
    db.execute_unprepared(
        "CREATE TABLE user_points (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)",
    )
    .await
    .expect("create user_points");
    db.execute_unprepared("INSERT INTO user_points (user_id, points) VALUES (7, 0)")
        .await
        .expect("user");
    let clients = Clients::start(addr, "OUTBOX_POINTS", Duration::from_secs(3)).await;
    let id = db
        .with_event(NewEvent::raw("ORD-P-1", "ORDER_CREATED", r#"{"userId":7}"#))
        .await
        .expect("event");
    let row = common::event(db, id).await;
    let message = OutboxMessage::try_from(&row).expect("message");
    for _ in 0..3 {
        clients.publisher.publish(&message).await.expect("send");
    }
    let received = receive_event(&clients, id, Duration::from_secs(3)).await;
    assert_eq!(
        received.all.len(),
        3,
        "three broker messages: {:?}",
        received.all
    );
    let broker_ids: HashSet<&str> = received.all.iter().map(|m| m.msg_id.as_str()).collect();
    assert_eq!(broker_ids.len(), 3, "each re-send is a new broker message");
    let mut outcomes = Vec::new();
    for m in &received.all {
        let event_id = m.property("eventId").expect("eventId property");
        outcomes.push(
            consume_once(db, "points", event_id, async |txn| add_points(txn).await)
                .await
                .expect("consume"),
        );
    }
    assert_eq!(outcomes.iter().filter(|o| o.is_duplicate()).count(), 2);
    assert_eq!(outcomes[0], Consumed::Processed(()));
    assert_eq!(points(db).await, 10, "points added once");

    // A failing handler: nothing recorded, nothing added; the redelivery is processed.
    let id2 = db
        .with_event(NewEvent::raw("ORD-P-2", "ORDER_CREATED", r#"{"userId":7}"#))
        .await
        .expect("event");
    let row2 = common::event(db, id2).await;
    clients
        .publisher
        .publish(&OutboxMessage::try_from(&row2).expect("message"))
        .await
        .expect("send");
    let got = receive_event(&clients, id2, Duration::from_secs(1)).await;
    let m2 = got
        .all
        .iter()
        .find(|m| m.event_id == Some(id2))
        .expect("second message");
    let event_id2 = m2.property("eventId").expect("eventId");
    let failed = consume_once(db, "points", event_id2, async |txn| {
        add_points(txn).await?;
        Err::<(), OutboxError>(OutboxError::InvalidConfig("points service down".into()))
    })
    .await;
    assert!(failed.is_err());
    assert_eq!(
        points(db).await,
        10,
        "the failed handler's write rolled back"
    );
    let recorded = db
        .query_one_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            match db.get_database_backend() {
                DbBackend::Postgres => "SELECT COUNT(*) FROM t_consumed_message WHERE msg_id = $1",
                _ => "SELECT COUNT(*) FROM t_consumed_message WHERE msg_id = ?",
            },
            [event_id2.into()],
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get_by_index::<i64>(0)
        .expect("n");
    assert_eq!(
        recorded, 0,
        "no t_consumed_message row after a failed handler"
    );
    // The broker redelivers an unacknowledged message: the same message, processed again.
    let again = consume_once(db, "points", event_id2, async |txn| add_points(txn).await)
        .await
        .expect("redelivery");
    assert_eq!(again, Consumed::Processed(()));
    assert_eq!(points(db).await, 20);
    clients.shutdown().await;
}

/// Each event type goes to its topic (a map with a default topic); headers and the
/// W3C trace context recorded by `with_event` (feature `opentelemetry`) arrive as message
/// properties, read back from the broker.
async fn event_types_reach_their_topics_with_headers(ctx: &TestContext, addr: &str) {
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    let (orders, payments) = (unique("OUTBOX_ORDERS"), unique("OUTBOX_PAYMENTS"));
    let order_consumer = rmq_support::consumer(addr, &orders).await;
    let payment_consumer = rmq_support::consumer(addr, &payments).await;
    let config = RocketMqConfig::new(addr)
        .producer_group(unique("outbox_test_pg"))
        .topic(&orders)
        .topic_for("ORDER_PAID", &payments)
        .send_timeout(Duration::from_secs(3));
    let publisher = Arc::new(RocketMqPublisher::start(config).await.expect("publisher"));

    // A tracer for the test's thread only: `with_event` below records the span's context.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    let mut created = HashSet::new();
    let mut paid = HashSet::new();
    let (traced_id, traceparent) = {
        let _guard = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!("pay_order");
        let sc = span.context().span().span_context().clone();
        let _entered = span.enter();
        let id = ctx
            .db
            .with_event(NewEvent::raw("ORD-T-0", "ORDER_PAID", "{}").header("tenant", "acme"))
            .await
            .expect("traced event");
        (id, format!("00-{}-{}-01", sc.trace_id(), sc.span_id()))
    };
    paid.insert(traced_id);
    for i in 0..5 {
        let created_id = ctx
            .db
            .with_event(
                NewEvent::raw(format!("ORD-T-{i}"), "ORDER_CREATED", "{}")
                    .header("tenant", "acme")
                    .header("region", "eu-1"),
            )
            .await
            .expect("created");
        created.insert(created_id);
        let paid_id = ctx
            .db
            .with_event(NewEvent::raw(format!("ORD-T-{i}"), "ORDER_PAID", "{}"))
            .await
            .expect("paid");
        paid.insert(paid_id);
    }

    let fleet = start_workers(ctx, &publisher, 2).await;
    let (deadline, linger) = (Duration::from_secs(60), Duration::from_secs(2));
    let got_orders = receive_all(&order_consumer, &created, deadline, linger).await;
    let got_payments = receive_all(&payment_consumer, &paid, deadline, linger).await;
    fleet.stop().await;
    order_consumer.shutdown().await;
    payment_consumer.shutdown().await;
    rmq_support::shutdown_publisher(publisher).await;

    assert_eq!(
        got_orders.distinct(),
        created,
        "the orders topic got exactly ORDER_CREATED"
    );
    assert_eq!(
        got_payments.distinct(),
        paid,
        "the payments topic got exactly ORDER_PAID"
    );
    assert_eq!(got_orders.duplicates() + got_payments.duplicates(), 0);
    for m in &got_orders.all {
        assert_eq!(m.tag.as_deref(), Some("ORDER_CREATED"));
        assert_eq!(
            (m.property("tenant"), m.property("region")),
            (Some("acme"), Some("eu-1")),
            "{m:?}"
        );
        assert_eq!(m.property("traceparent"), None);
    }
    let traced = got_payments
        .all
        .iter()
        .find(|m| m.event_id == Some(traced_id))
        .expect("the traced event arrived");
    assert_eq!(traced.property("traceparent"), Some(traceparent.as_str()));
    assert_eq!(traced.property("tenant"), Some("acme"));
    assert_eq!(traced.property("eventType"), Some("ORDER_PAID"));
    assert_eq!(
        count(&ctx.db, EventStatus::Success).await,
        (created.len() + paid.len()) as u64
    );
}
