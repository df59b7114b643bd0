//! The cases of the suite, each `async fn case<B: Broker>(db: &TestDb, broker: &B)`, and what
//! they share: writing events, running relays, reading the consumer.
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, TransactionTrait,
};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::{
    CancellationToken, EventStatus, NewEvent, OutboxExt, Publisher, RetryPolicy, Worker,
    WorkerConfig, WorkerSummary,
};
use tokio::task::JoinHandle;

use crate::{in_ci, Backend, Broker, Consumer, Received, TestDb};

mod delivery;
mod faults;

pub use delivery::{every_event_once, fields_arrive, ordered_keeps_key_order};
pub use faults::{
    ordered_batch_stops_a_key, outage_loses_nothing, oversized_fails_alone,
    wrong_credentials_are_refused,
};

/// The publishers' send timeout in the cases.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a case waits for its events at the consumer.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `case` for `B` on a fresh database of `backend`, dropping it afterwards (also when the
/// case fails). Under `CI=true` a broker that does not answer fails the case; elsewhere the
/// case is skipped with a message.
pub async fn run<B, F>(backend: Backend, case: &str, f: F)
where
    B: Broker,
    F: for<'a> AsyncFn(&'a TestDb, &'a B),
{
    init_tracing();
    let broker = B::from_env();
    let addr = broker.addr();
    let up = matches!(
        tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(&addr)
        )
        .await,
        Ok(Ok(_))
    );
    if !up {
        let msg = format!("{} {case}: nothing answers at {addr}", B::NAME);
        assert!(!in_ci(), "{msg}");
        eprintln!("SKIPPED {msg}");
        return;
    }
    let db = TestDb::create(backend, &format!("{}_{case}", B::NAME)).await;
    let outcome = std::panic::AssertUnwindSafe(f(&db, &broker))
        .catch_unwind()
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(15), db.drop_database()).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A destination name unique to one case: `outbox_<case>_<random>`.
pub fn destination(case: &str) -> String {
    format!(
        "outbox_{case}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// The cases' retries where no fault is expected: 3, from 200 ms, at most 5 s apart.
pub const RETRY: RetryPolicy =
    RetryPolicy::new(3, Duration::from_millis(200), Duration::from_secs(5));

/// The relays' settings in the cases: 20 ms polls, a 10 s lease, the given retries.
pub fn relay_config(owner: &str, retry: RetryPolicy) -> WorkerConfig {
    WorkerConfig::default()
        .poll_delay(Duration::from_millis(20))
        .lease(Duration::from_secs(10))
        .send_timeout(SEND_TIMEOUT * 2)
        .retry(retry)
        .instance_id(owner)
}

/// Writes `events` in transactions of at most 500; returns their ids in order.
pub async fn write(db: &TestDb, events: Vec<NewEvent>) -> Vec<i64> {
    let mut ids = Vec::with_capacity(events.len());
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        let txn = db.db.begin().await.expect("begin");
        for event in events.by_ref().take(500) {
            ids.push(txn.with_event(event).await.expect("write the event"));
        }
        txn.commit().await.expect("commit");
    }
    ids
}

/// Rows of the outbox table in `status`.
pub async fn count(db: &impl ConnectionTrait, status: EventStatus) -> u64 {
    Events::find()
        .filter(Column::Status.eq(status.as_str()))
        .count(db)
        .await
        .expect("count")
}

/// Relays running [`Worker::run`] in tasks, each on a pool of its own.
pub struct Relays {
    cancel: CancellationToken,
    handles: Vec<JoinHandle<WorkerSummary>>,
}

impl Relays {
    /// Starts one relay per config, each on a pool of 3 connections, all sending through
    /// `publisher`.
    pub async fn start(
        db: &TestDb,
        publisher: Arc<dyn Publisher>,
        configs: impl IntoIterator<Item = WorkerConfig>,
    ) -> Relays {
        let cancel = CancellationToken::new();
        let mut handles = Vec::new();
        for config in configs {
            let worker = Worker::new(db.pool(3).await, publisher.clone(), config).expect("worker");
            let cancel = cancel.clone();
            handles.push(tokio::spawn(async move { worker.run(cancel).await }));
        }
        Relays { cancel, handles }
    }

    /// Starts `broker`'s publisher to `dest` on the server at `addr` (send timeout
    /// [`SEND_TIMEOUT`]), then `n` relays `relay-0`, `relay-1`, … sending through it with
    /// [`relay_config`] and `retry`, each config passed through `tune`.
    ///
    /// # Panics
    /// When the publisher does not start.
    pub async fn through<B: Broker>(
        db: &TestDb,
        broker: &B,
        addr: &str,
        dest: &str,
        n: usize,
        retry: RetryPolicy,
        tune: impl Fn(WorkerConfig) -> WorkerConfig,
    ) -> Relays {
        let publisher = broker
            .publisher(addr, dest, SEND_TIMEOUT)
            .await
            .expect("publisher starts");
        let configs = (0..n).map(|i| tune(relay_config(&format!("relay-{i}"), retry)));
        Relays::start(db, publisher, configs).await
    }

    /// Stops the relays and waits for them.
    pub async fn stop(self) -> Vec<WorkerSummary> {
        self.cancel.cancel();
        let mut out = Vec::new();
        for handle in self.handles {
            out.push(handle.await.expect("relay task"));
        }
        out
    }
}

/// Everything a consumer received, by event id, in arrival order.
pub struct Inbox {
    consumer: Box<dyn Consumer>,
    /// Every message, in arrival order.
    pub messages: Vec<Received>,
    /// How often each event id arrived.
    pub times: HashMap<i64, usize>,
}

impl Inbox {
    /// An inbox reading `consumer`.
    pub fn new(consumer: Box<dyn Consumer>) -> Inbox {
        Inbox {
            consumer,
            messages: Vec::new(),
            times: HashMap::new(),
        }
    }

    /// Reads the consumer until `done` holds or `deadline` passes; returns whether it held.
    pub async fn until(&mut self, deadline: Duration, done: impl Fn(&Inbox) -> bool) -> bool {
        let end = tokio::time::Instant::now() + deadline;
        while !done(self) {
            if tokio::time::Instant::now() >= end {
                return false;
            }
            for message in self.consumer.poll(Duration::from_millis(200)).await {
                *self.times.entry(message.event_id).or_default() += 1;
                self.messages.push(message);
            }
        }
        true
    }

    /// Reads the consumer for `quiet` more, to catch late duplicates.
    pub async fn settle(&mut self, quiet: Duration) {
        let _ = self.until(quiet, |_| false).await;
    }

    /// Distinct event ids received.
    pub fn distinct(&self) -> usize {
        self.times.len()
    }

    /// Messages received more than once, counted beyond the first.
    pub fn duplicates(&self) -> usize {
        self.times.values().map(|n| n - 1).sum()
    }
}

/// Polls `check` every 50 ms until it holds or `deadline` passes; returns whether it held.
pub async fn wait_until<F, Fut>(deadline: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
