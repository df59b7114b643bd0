//! LISTEN health on Postgres: the worker notices a lost `LISTEN` connection, says so
//! at WARN and re-establishes it with a round right after; a `LISTEN` that cannot work (PgBouncer
//! in transaction mode) fails its self-check once, at WARN, and the worker polls. The gauge
//! `outbox_wake_listening` follows both. With `StatementProtocol::Simple` the relay delivers
//! every event through PgBouncer 1.18 in transaction mode (by polling), and rows read with the
//! simple protocol (text format) decode into the models as prepared (binary) reads do. A
//! `LISTEN` connection frozen by a proxy (no FIN, no RST) is found by the worker's own `NOTIFY`
//! and replaced, with one WARN.
//!
//! A missing Postgres fails the tests (see `tests/common`); so does a missing `pgbouncer`
//! binary under `CI=true` (`.ci/run` installs it; elsewhere that test says so and returns).
//!
//! The tests run on a current-thread runtime: the worker's tasks then run on the test's thread,
//! where a thread-local metrics recorder sees the gauge (no other test in this binary can move
//! it). The binary's log goes to one buffer (and to the test output); each test reads the lines
//! of its own worker, by owner. The one timed assertion: after the loss, the
//! commit→publish p99 is below the poll delay; the other latencies are printed, not asserted.
//!
//! Shared notifications: events whose inserts skipped their own `NOTIFY` (another
//! open transaction held the slot, `NewEvent::notify_interval`) and committed after the woken
//! round are claimed by the worker's follow-up rounds, with a poll delay of 30 s that would
//! show any event left to polling. No timed assertion: each wait has a deadline below the poll
//! delay and polls until done.
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::wait_until;
use common::{count, Backend, TestContext};
use metrics::SharedString;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use sea_orm::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait,
};
use sea_orm_outbox::{
    CancellationToken, EventStatus, NewEvent, OutboxExt, OutboxMessage, PublishError, Publisher,
    StatementProtocol, Worker, WorkerConfig, WorkerSummary,
};

/// A bound on every wait for something that takes milliseconds when the test passes.
const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_that_skipped_the_notify_are_claimed_by_the_follow_up() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_follow_up",
        skipped_notifies_are_claimed_by_the_follow_up,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_burst_of_concurrent_writers_is_published_without_polling() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_burst",
        burst_of_concurrent_writers_is_published_without_polling,
    )
    .await
}

#[tokio::test]
async fn postgres_lost_listen_is_noticed_and_re_established() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_lost",
        lost_listen_is_re_established,
    )
    .await
}

#[tokio::test]
async fn postgres_a_frozen_listen_connection_is_found_and_replaced() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_frozen",
        frozen_listen_is_found_and_replaced,
    )
    .await
}

#[tokio::test]
async fn postgres_through_pgbouncer_transaction_mode_the_self_check_fails_once() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_pgbouncer_tx",
        through_pgbouncer_transaction_mode,
    )
    .await
}

#[tokio::test]
async fn postgres_through_pgbouncer_transaction_mode_simple_protocol_delivers_every_event() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_pgbouncer_simple",
        simple_protocol_through_pgbouncer_transaction_mode,
    )
    .await
}

#[tokio::test]
async fn postgres_through_pgbouncer_session_mode_wake_on_commit_works() {
    logs();
    common::run_on(
        Backend::Postgres,
        "listen_pgbouncer_session",
        through_pgbouncer_session_mode,
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Helpers: log capture, an arrival-recording publisher, the gauge, a worker with its log.

/// This test binary's log, as text: every test's worker logs into it (each line names its
/// worker by the `owner` of its span).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

/// The log, installed as the global subscriber at the first call (before `common::run_on`,
/// whose own subscriber then stays out).
fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        tracing::subscriber::set_global_default(logs.subscriber()).expect("the first subscriber");
        logs
    })
}

/// One write of the log subscriber: appended to the buffer and echoed to the test's output.
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        // `eprint!` (not `std::io::stderr`) so that the test harness captures it.
        eprint!("{}", String::from_utf8_lossy(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// A subscriber writing INFO and above (DEBUG for the outbox) into this buffer.
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let buf = self.0.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "info,sea_orm_outbox=debug",
            ))
            .with_ansi(false)
            .with_writer(move || LogWriter(buf.clone()))
            .finish()
    }

    /// The lines of worker `owner` at `level` (e.g. `WARN`) that contain `needle`.
    fn count(&self, owner: &str, level: &str, needle: &str) -> usize {
        let owner = format!("owner={owner}");
        let text =
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
        text.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(level))
            .filter(|l| l.contains(&owner) && l.contains(needle))
            .count()
    }
}

/// Records every publish with the moment it arrived (this process's monotonic clock).
#[derive(Default)]
struct Arrivals(Mutex<Vec<(String, Instant)>>);

#[async_trait]
impl Publisher for Arrivals {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let now = Instant::now();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((m.biz_no.clone(), now));
        Ok(())
    }
}

impl Arrivals {
    /// When `biz_no` was first published.
    fn arrival(&self, biz_no: &str) -> Option<Instant> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().find(|(b, _)| b == biz_no).map(|(_, t)| *t)
    }

    /// How often each biz_no was published.
    fn counts(&self) -> HashMap<String, usize> {
        let mut out = HashMap::new();
        for (b, _) in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            *out.entry(b.clone()).or_insert(0) += 1;
        }
        out
    }
}

/// The gauge `outbox_wake_listening` as a thread-local debugging recorder sees it. Its
/// snapshot resets a gauge to 0, and the worker moves this one by increments (+1, -1): the value
/// is the sum of what the snapshots saw.
struct Gauge {
    snapshotter: Snapshotter,
    value: Mutex<Option<f64>>,
}

impl Gauge {
    fn new(recorder: &DebuggingRecorder) -> Self {
        Gauge {
            snapshotter: recorder.snapshotter(),
            value: Mutex::new(None),
        }
    }

    /// The current value (`None` before the gauge is registered).
    fn get(&self) -> Option<f64> {
        let delta = self
            .snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find(|(k, ..)| k.key().name() == sea_orm_outbox::metrics::WAKE_LISTENING)
            .and_then(|(_, _, _, v)| match v {
                DebugValue::Gauge(g) => Some(g.into_inner()),
                _ => None,
            });
        let mut value = self.value.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = delta {
            *value = Some(value.unwrap_or(0.0) + d);
        }
        *value
    }

    /// Waits until the gauge reads `want`.
    async fn reaches(&self, want: f64) -> bool {
        wait_until(WAIT, Duration::from_millis(5), || {
            std::future::ready(self.get() == Some(want))
        })
        .await
    }
}

/// A worker running in a task of its own.
struct Relay {
    worker: Arc<Worker>,
    cancel: CancellationToken,
    handle: tokio::task::JoinHandle<WorkerSummary>,
}

impl Relay {
    fn start(db: DatabaseConnection, publisher: Arc<dyn Publisher>, config: WorkerConfig) -> Self {
        let worker = Arc::new(Worker::new(db, publisher, config).expect("worker"));
        let cancel = CancellationToken::new();
        let handle = tokio::spawn({
            let (w, c) = (worker.clone(), cancel.clone());
            async move { w.run(c).await }
        });
        Relay {
            worker,
            cancel,
            handle,
        }
    }

    /// Lines of this worker's log at `level` containing `needle`.
    fn logged(&self, level: &str, needle: &str) -> usize {
        logs().count(self.worker.owner(), level, needle)
    }

    async fn stop(self) -> WorkerSummary {
        self.cancel.cancel();
        self.handle.await.expect("worker task")
    }
}

/// The `column` (`pid`, `client_port`) of the backends of `ctx`'s database whose last
/// statement was a `LISTEN` (the relay's listener; the test's own connections never run one).
async fn listen_backends(ctx: &TestContext, column: &str) -> Vec<i32> {
    // language=SQL
    let sql = format!(
        "SELECT {column} FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%' \
         AND pid <> pg_backend_pid() ORDER BY pid"
    );
    ctx.db
        .query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("pg_stat_activity")
        .iter()
        .map(|r| r.try_get::<i32>("", column).expect(column))
        .collect()
}

/// When a commit was sent and when it returned.
struct Committed {
    sent: Instant,
    returned: Instant,
}

/// Commits one event `biz_no` in a transaction of its own.
async fn commit_one(db: &DatabaseConnection, biz_no: &str) -> Committed {
    let txn = db.begin().await.expect("begin");
    txn.with_event(NewEvent::raw(biz_no, "ORDER_CREATED", "{}"))
        .await
        .expect("with_event");
    let sent = Instant::now();
    txn.commit().await.expect("commit");
    Committed {
        sent,
        returned: Instant::now(),
    }
}

/// The nearest-rank percentile `p` (0..=100) of sorted `v`.
fn percentile(v: &[Duration], p: usize) -> Duration {
    let rank = (v.len() * p).div_ceil(100).max(1);
    v[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// A terminated LISTEN backend.

/// The poll delay of the lost-LISTEN test: long, so that an event found only by polling
/// would show in the latencies.
const LONG_POLL: Duration = Duration::from_secs(5);

/// Events committed one by one after the termination.
const EVENTS_AFTER_LOSS: usize = 100;

async fn lost_listen_is_re_established(ctx: &TestContext) {
    let recorder = DebuggingRecorder::new();
    let gauge = Gauge::new(&recorder);
    let _guard = metrics::set_default_local_recorder(&recorder);

    let publisher = Arc::new(Arrivals::default());
    let config = common::test_config("listen-lost").poll_delay(LONG_POLL);
    let relay = Relay::start(ctx.pool(5).await, publisher.clone(), config);
    assert!(
        gauge.reaches(1.0).await,
        "the worker listens (its self-check passed): gauge {:?}",
        gauge.get()
    );
    let found = wait_until(WAIT, Duration::from_millis(5), || async {
        listen_backends(ctx, "pid").await.len() == 1
    })
    .await;
    let before = listen_backends(ctx, "pid").await;
    assert!(
        found,
        "one LISTEN backend in the test's database: {before:?}"
    );
    let old_pid = before[0];

    // language=SQL
    let terminate = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_terminate_backend($1) AS done",
        [old_pid.into()],
    );
    let row = ctx
        .db
        .query_one_raw(terminate)
        .await
        .expect("pg_terminate_backend")
        .expect("a row");
    assert!(row.try_get::<bool>("", "done").expect("done"), "terminated");

    // At once (no wait for the reconnect): the first events fall into the gap.
    let mut latencies = Vec::with_capacity(EVENTS_AFTER_LOSS);
    let mut slowest_commit = Duration::ZERO;
    for i in 0..EVENTS_AFTER_LOSS {
        let biz_no = format!("LOST-{i:03}");
        let committed = commit_one(&ctx.db, &biz_no).await;
        let mut arrived = None;
        let published = wait_until(WAIT, Duration::from_millis(1), || {
            arrived = publisher.arrival(&biz_no);
            std::future::ready(arrived.is_some())
        })
        .await;
        assert!(published, "{biz_no} published within {WAIT:?}");
        let arrived = arrived.expect("arrival");
        // From the moment the commit was sent: the commit's own time is part of the figure.
        latencies.push(arrived.saturating_duration_since(committed.sent));
        slowest_commit = slowest_commit.max(committed.returned - committed.sent);
    }
    let first = latencies[0];
    let over_50ms = latencies
        .iter()
        .filter(|l| **l > Duration::from_millis(50))
        .count();
    latencies.sort_unstable();
    let (p50, p99, max) = (
        percentile(&latencies, 50),
        percentile(&latencies, 99),
        latencies[latencies.len() - 1],
    );
    println!(
        "figure: LISTEN backend terminated, then {EVENTS_AFTER_LOSS} events committed one by one \
         (poll delay {LONG_POLL:?}): commit->publish p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, \
         {over_50ms} above 50 ms; first event (committed right after the termination) {:.1} ms; \
         slowest commit itself {:.1} ms",
        ms(p50),
        ms(p99),
        ms(max),
        ms(first),
        ms(slowest_commit)
    );
    assert!(
        p99 < LONG_POLL,
        "p99 {p99:?} is below the poll delay: the events were not left to polling"
    );

    assert_eq!(
        relay.logged("WARN", "LISTEN connection lost"),
        1,
        "the loss is logged once at WARN"
    );
    assert_eq!(
        relay.logged("INFO", "LISTEN connection established"),
        1,
        "and the reconnect at INFO"
    );
    assert_eq!(gauge.get(), Some(1.0), "listening again");
    let after = listen_backends(ctx, "pid").await;
    assert!(
        after.len() == 1 && after[0] != old_pid,
        "a new LISTEN backend replaced {old_pid}: {after:?}"
    );

    let s = relay.stop().await;
    assert_eq!(
        (s.published, s.errors),
        (EVENTS_AFTER_LOSS as u64, 0),
        "{s:?}"
    );
    assert!(
        publisher.counts().values().all(|&n| n == 1),
        "each event published once"
    );
    assert_eq!(
        count(&ctx.db, EventStatus::Success).await,
        EVENTS_AFTER_LOSS as u64
    );
    assert_eq!(gauge.get(), Some(0.0), "a stopped worker does not listen");
}

// ---------------------------------------------------------------------------------------------
// A LISTEN connection frozen by a proxy (no FIN, no RST).

/// The poll delay of the frozen-LISTEN test: only a wake-up explains an event published
/// within seconds.
const VERY_LONG_POLL: Duration = Duration::from_secs(60);

/// The bound on finding a frozen `LISTEN` connection.
const FOUND_WITHIN: Duration = Duration::from_secs(30);

/// Events committed one by one after the frozen connection was replaced.
const EVENTS_AFTER_FREEZE: usize = 20;

/// Every value the gauge `outbox_wake_listening` took, in order (each change once): a recorder of that gauge
/// alone, so that a 0 between two 1s shows however briefly it lasted.
#[derive(Clone, Default)]
struct GaugeHistory(Arc<Mutex<Vec<f64>>>);

impl GaugeHistory {
    fn values(&self) -> Vec<f64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `value` when it differs from the last one: a touch that changes nothing (the
    /// monitor pass marks the gauge as current with an increment by 0) is no step.
    fn record(&self, value: impl FnOnce(Option<f64>) -> f64) {
        let mut values = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let last = values.last().copied();
        let next = value(last);
        if last != Some(next) {
            values.push(next);
        }
    }
}

impl metrics::GaugeFn for GaugeHistory {
    fn increment(&self, value: f64) {
        self.record(|last| last.unwrap_or(0.0) + value);
    }
    fn decrement(&self, value: f64) {
        self.increment(-value);
    }
    fn set(&self, value: f64) {
        self.record(|_| value);
    }
}

impl metrics::Recorder for GaugeHistory {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        if key.name() == sea_orm_outbox::metrics::WAKE_LISTENING {
            metrics::Gauge::from_arc(Arc::new(self.clone()))
        } else {
            metrics::Gauge::noop()
        }
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// A worker listens through a proxy that freezes its `LISTEN` connection (stops forwarding
/// both ways, keeps the sockets open). Within [`FOUND_WITHIN`] the worker finds it (its own
/// `NOTIFY` does not come back), logs one WARN, the gauge goes 1 → 0 → 1, and a new `LISTEN`
/// connection through the proxy wakes it on commit again while the old one stays frozen: the
/// commit→publish p99 of [`EVENTS_AFTER_FREEZE`] events is far below the 60 s poll delay.
async fn frozen_listen_is_found_and_replaced(ctx: &TestContext) {
    let history = GaugeHistory::default();
    let _guard = metrics::set_default_local_recorder(&history);
    let direct = PgConnectOptions::from_str(&ctx.url).expect("test URL");
    let freezer = common::freezer::Freezer::start(direct.get_host(), direct.get_port()).await;
    let proxied = PgPoolOptions::new()
        .max_connections(5)
        .connect_lazy_with(direct.clone().host("127.0.0.1").port(freezer.port));
    let db = sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(proxied);

    let publisher = Arc::new(Arrivals::default());
    let config = common::test_config("listen-frozen").poll_delay(VERY_LONG_POLL);
    let relay = Relay::start(db, publisher.clone(), config);
    let listening = wait_until(WAIT, Duration::from_millis(5), || async {
        history.values() == [0.0, 1.0] && listen_backends(ctx, "client_port").await.len() == 1
    })
    .await;
    let ports = listen_backends(ctx, "client_port").await;
    assert!(
        listening,
        "listening: gauge history {:?}, LISTEN client ports {ports:?}",
        history.values()
    );
    let old_port = u16::try_from(ports[0]).expect("a TCP port");

    assert!(
        freezer.freeze(old_port),
        "the LISTEN connection went through the proxy"
    );
    let frozen_at = Instant::now();
    let found = wait_until(FOUND_WITHIN, Duration::from_millis(10), || {
        std::future::ready(relay.logged("WARN", "LISTEN connection lost") > 0)
    })
    .await;
    let found_after = frozen_at.elapsed();
    assert!(
        found,
        "the frozen LISTEN connection is found within {FOUND_WITHIN:?}"
    );
    let replaced = wait_until(WAIT, Duration::from_millis(5), || async {
        history.values().len() == 4
            && listen_backends(ctx, "client_port")
                .await
                .iter()
                .any(|p| *p != i32::from(old_port))
    })
    .await;
    assert!(
        replaced,
        "a new LISTEN connection: gauge history {:?}, LISTEN client ports {:?}",
        history.values(),
        listen_backends(ctx, "client_port").await
    );
    assert_eq!(
        history.values(),
        [0.0, 1.0, 0.0, 1.0],
        "the gauge went 0 at the loss and 1 at the reconnect"
    );

    let mut latencies = Vec::with_capacity(EVENTS_AFTER_FREEZE);
    for i in 0..EVENTS_AFTER_FREEZE {
        let biz_no = format!("FROZEN-{i:02}");
        let committed = commit_one(&ctx.db, &biz_no).await;
        let mut arrived = None;
        let published = wait_until(WAIT, Duration::from_millis(1), || {
            arrived = publisher.arrival(&biz_no);
            std::future::ready(arrived.is_some())
        })
        .await;
        assert!(published, "{biz_no} published within {WAIT:?}");
        latencies.push(
            arrived
                .expect("arrival")
                .saturating_duration_since(committed.sent),
        );
    }
    latencies.sort_unstable();
    let (p50, p99) = (percentile(&latencies, 50), percentile(&latencies, 99));
    println!(
        "figure: LISTEN connection frozen by a proxy (no FIN, no RST), found after {:.1} s; \
         then {EVENTS_AFTER_FREEZE} events committed one by one (poll delay \
         {VERY_LONG_POLL:?}): commit->publish p50 {:.1} ms, p99 {:.1} ms",
        found_after.as_secs_f64(),
        ms(p50),
        ms(p99)
    );
    assert!(
        p99 < Duration::from_secs(3),
        "p99 {p99:?}: woken on commit, not left to the 60 s poll delay"
    );
    assert_eq!(
        relay.logged("WARN", "LISTEN connection lost"),
        1,
        "the loss is logged once at WARN"
    );
    assert_eq!(relay.logged("WARN", "cannot LISTEN"), 0);
    assert!(
        freezer.is_frozen(old_port)
            && listen_backends(ctx, "client_port")
                .await
                .contains(&i32::from(old_port)),
        "the old connection is still there, frozen"
    );

    let s = relay.stop().await;
    assert_eq!(
        (s.published, s.errors),
        (EVENTS_AFTER_FREEZE as u64, 0),
        "{s:?}"
    );
    assert!(
        publisher.counts().values().all(|&n| n == 1),
        "each event published once"
    );
    assert_eq!(
        history.values(),
        [0.0, 1.0, 0.0, 1.0, 0.0],
        "a stopped worker does not listen"
    );
}

// ---------------------------------------------------------------------------------------------
// A pooler. PgBouncer 1.18 (the Debian package) in transaction mode, where LISTEN
// cannot work, and in session mode, where it does.

/// Events written while the worker runs behind PgBouncer.
const EVENTS_BEHIND_POOLER: usize = 50;

/// A PgBouncer process, stopped (killed) on drop.
struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `pgbouncer` binary; `None` (said loudly) outside CI when it is not installed.
fn pgbouncer_binary() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/sbin/pgbouncer");
    if path.exists() {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "pgbouncer is not installed at {} (`.ci/run` installs it: apt-get install pgbouncer)",
        path.display()
    );
    eprintln!("SKIPPED: pgbouncer is not installed (apt-get install pgbouncer)");
    None
}

/// A free TCP port on the loopback interface.
impl PgBouncer {
    /// Starts `binary` with `pool_mode` (`transaction`, `session`) on a free loopback port, in
    /// front of the server of `upstream` (trust authentication for the user of `upstream`, as
    /// the test servers use), with a generated ini and auth file in a temp dir.
    async fn start(binary: &Path, upstream: &PgConnectOptions, pool_mode: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "outbox_pgbouncer_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let port = common::free_port();
        let user = upstream.get_username();
        let auth = dir.join("users.txt");
        std::fs::write(&auth, format!("\"{user}\" \"\"\n")).expect("auth file");
        // PgBouncer refuses to run as root; as root it is told to switch to `postgres`.
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let ini = format!(
            "[databases]\n\
             * = host={host} port={pg_port} user={user}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {auth}\n\
             pool_mode = {pool_mode}\n\
             default_pool_size = 10\n\
             max_client_conn = 100\n\
             ignore_startup_parameters = extra_float_digits\n\
             {switch_user}",
            host = upstream.get_host(),
            pg_port = upstream.get_port(),
            auth = auth.display(),
            switch_user = if as_root { "user = postgres\n" } else { "" },
        );
        let ini_path = dir.join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).expect("ini");
        let log = std::fs::File::create(dir.join("pgbouncer.log")).expect("log file");
        let child = Command::new(binary)
            .arg(&ini_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        let up = wait_until(WAIT, Duration::from_millis(20), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "pgbouncer listens on {port}: {}", bouncer.log());
        bouncer
    }

    /// PgBouncer's own log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// A pool of 5 through this PgBouncer to `database` as `user`, with sqlx's default
    /// connect options (its statement cache on: see README on poolers).
    async fn pool(&self, user: &str, database: &str) -> DatabaseConnection {
        let url = format!("postgres://{user}@127.0.0.1:{}/{database}", self.port);
        let mut opt = ConnectOptions::new(url);
        opt.max_connections(5)
            .min_connections(0)
            .connect_timeout(Duration::from_secs(10))
            .sqlx_logging(false);
        Database::connect(opt)
            .await
            .expect("connect through pgbouncer")
    }
}

/// PgBouncer in front of `ctx`'s database (`None`: not installed, outside CI) and the user
/// and database name to connect with.
async fn bouncer_for(ctx: &TestContext, pool_mode: &str) -> Option<(PgBouncer, String, String)> {
    let binary = pgbouncer_binary()?;
    let upstream = PgConnectOptions::from_str(&ctx.url).expect("test URL");
    let database = upstream.get_database().expect("database").to_owned();
    let bouncer = PgBouncer::start(&binary, &upstream, pool_mode).await;
    Some((bouncer, upstream.get_username().to_owned(), database))
}

/// Starts a worker with `config` through the transaction-mode `bouncer` (as `user` on
/// `database`), waits for its failed self-check (one WARN, the gauge at 0), then commits
/// [`EVENTS_BEHIND_POOLER`] events `POOLED-nn` one by one, directly.
async fn behind_transaction_pooler(
    ctx: &TestContext,
    bouncer: &PgBouncer,
    (user, database): (&str, &str),
    publisher: Arc<dyn Publisher>,
    config: WorkerConfig,
    gauge: &Gauge,
) -> Relay {
    let relay = Relay::start(bouncer.pool(user, database).await, publisher, config);
    let failed = wait_until(WAIT, Duration::from_millis(10), || async {
        relay.logged("WARN", "LISTEN self-check failed") == 1
    })
    .await;
    assert!(failed, "the self-check fails through the pooler, at WARN");
    assert_eq!(gauge.get(), Some(0.0), "wake-on-commit is not live");
    for i in 0..EVENTS_BEHIND_POOLER {
        commit_one(&ctx.db, &format!("POOLED-{i:02}")).await;
    }
    relay
}

/// Transaction mode: PgBouncer hands out server connections per transaction, so `LISTEN` cannot
/// work. The self-check finds it out (usually before sending any `LISTEN`: two pooled
/// connections report the same backend pid; otherwise because its own `NOTIFY` does not come
/// back), says so once at WARN, keeps no listener and polls.
///
/// What this does NOT show is delivery (with the default `StatementProtocol::Extended`): sqlx
/// 0.9.0 cannot run the relay's (or any) statement with parameters through PgBouncer 1.18 in
/// transaction mode; `StatementProtocol::Simple` can (the test after this one). It prepares a *named*
/// statement (`sqlx_s_N`, per client connection, also with `statement_cache_capacity(0)`) with
/// its own Sync, then binds it after a second Sync; PgBouncer may hand the bind to another
/// server connection ("prepared statement does not exist") or give two clients' equal names
/// to one server connection ("already exists"). The test prints how many statements failed;
/// README ("Behind a connection pooler") says what to use instead.
async fn through_pgbouncer_transaction_mode(ctx: &TestContext) {
    let Some((bouncer, user, database)) = bouncer_for(ctx, "transaction").await else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let gauge = Gauge::new(&recorder);
    let _guard = metrics::set_default_local_recorder(&recorder);

    let publisher = Arc::new(Arrivals::default());
    let poll = Duration::from_millis(100);
    let config = common::test_config("listen-pgbouncer-tx").poll_delay(poll);
    let relay = behind_transaction_pooler(
        ctx,
        &bouncer,
        (&user, &database),
        publisher.clone(),
        config,
        &gauge,
    )
    .await;
    // Many polls later the self-check is still logged once (it is repeated only every 5
    // minutes, quietly), and no loss is reported: there is no listener to lose.
    // PgBouncer breaks most of the claims' prepared statements (below), so a poll counts
    // whether its claim completed (a round) or failed (logged at ERROR).
    let polls =
        || relay.worker.summary().rounds as usize + relay.logged("ERROR", "outbox claim failed");
    let before = polls();
    let polled = wait_until(3 * WAIT, Duration::from_millis(10), || async {
        polls() >= before + 10
    })
    .await;
    assert!(polled, "the worker goes on polling");
    assert_eq!(
        relay.logged("WARN", "LISTEN self-check failed"),
        1,
        "the failed self-check is logged once"
    );
    assert_eq!(relay.logged("WARN", "LISTEN connection lost"), 0);
    assert_eq!(relay.logged("WARN", "cannot LISTEN"), 0);
    assert_eq!(gauge.get(), Some(0.0), "still polling");

    let prepared = relay.logged("ERROR", "prepared statement");
    let warned = relay.logged("WARN", "LISTEN self-check failed");
    let no_listen_sent = relay.logged("WARN", "no LISTEN was sent") == 1;
    let s = relay.stop().await;
    println!(
        "figure: behind PgBouncer 1.18 in transaction mode, poll delay {poll:?}: self-check \
         WARN logged {} time(s) in {} rounds (pooler found before any LISTEN: \
         {no_listen_sent}); {} of {EVENTS_BEHIND_POOLER} events reached the \
         publisher; {} relay errors, {prepared} of them \"prepared statement ...\" (sqlx 0.9.0 \
         named statements through a transaction pooler)",
        warned,
        s.rounds,
        publisher.counts().len(),
        s.errors
    );
    drop(bouncer);
}

/// Fails the first attempt of every tenth event (`POOLED-00`, `-10`, ...) with a reason that
/// needs escaping, and records the rest as [`Arrivals`] does.
#[derive(Default)]
struct FlakyArrivals {
    arrivals: Arrivals,
    failed: Mutex<Vec<String>>,
}

/// The reason [`FlakyArrivals`] gives: a `'` and a `\` that the inlined `last_error` must
/// carry intact.
const FLAKY_REASON: &str = r"broker said: it's \ down";

#[async_trait]
impl Publisher for FlakyArrivals {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if m.biz_no.ends_with('0') {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            if !failed.contains(&m.biz_no) {
                failed.push(m.biz_no.clone());
                return Err(PublishError::retryable(FLAKY_REASON));
            }
        }
        self.arrivals.publish(m).await
    }
}

/// Transaction mode with `StatementProtocol::Simple`: every statement of the relay goes as one
/// simple-protocol query with inlined values, which PgBouncer 1.18 passes. The self-check still
/// fails once (no `LISTEN` through a transaction pooler) and the worker polls; every event is
/// published exactly once, without a relay error, with four send slots (so several pooled
/// connections are busy at once) and a failed first attempt for every tenth event (its
/// `release_for_retry` writes a `last_error` with a `'` and a `\`).
async fn simple_protocol_through_pgbouncer_transaction_mode(ctx: &TestContext) {
    let Some((bouncer, user, database)) = bouncer_for(ctx, "transaction").await else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let gauge = Gauge::new(&recorder);
    let _guard = metrics::set_default_local_recorder(&recorder);

    let publisher = Arc::new(FlakyArrivals::default());
    let poll = Duration::from_millis(100);
    let config = common::test_config("listen-pgbouncer-simple")
        .poll_delay(poll)
        .batch_size(10)
        .send_concurrency(4)
        .statement_protocol(StatementProtocol::Simple);
    let relay = behind_transaction_pooler(
        ctx,
        &bouncer,
        (&user, &database),
        publisher.clone(),
        config,
        &gauge,
    )
    .await;
    let delivered = wait_until(WAIT, Duration::from_millis(10), || async {
        count(&ctx.db, EventStatus::Success).await == EVENTS_BEHIND_POOLER as u64
    })
    .await;
    let s = relay.worker.summary();
    assert!(
        delivered,
        "every event delivered through the pooler: {} SUCCESS, {s:?}\npgbouncer log:\n{}",
        count(&ctx.db, EventStatus::Success).await,
        bouncer.log()
    );
    // Some polls later (the reclaimer and the gauges have run too): still one WARN.
    let rounds = s.rounds;
    let polled = wait_until(WAIT, Duration::from_millis(10), || async {
        relay.worker.summary().rounds >= rounds + 10
    })
    .await;
    assert!(polled, "the worker goes on polling");
    assert_eq!(
        relay.logged("WARN", "LISTEN self-check failed"),
        1,
        "the failed self-check is logged once"
    );
    assert_eq!(relay.logged("ERROR", ""), 0, "no relay error logged");

    // The escaped reason arrived intact (read directly, not through the pooler).
    let first = common::event_by_biz_no(&ctx.db, "POOLED-00").await;
    assert_eq!(
        first.last_error.as_deref(),
        Some(format!("retryable: {FLAKY_REASON}").as_str())
    );
    assert_eq!(first.retry_count, 1);

    let warned = relay.logged("WARN", "LISTEN self-check failed");
    let s = relay.stop().await;
    let counts = publisher.arrivals.counts();
    let retried = publisher
        .failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .len();
    println!(
        "figure: behind PgBouncer 1.18 in transaction mode with StatementProtocol::Simple, poll \
         delay {poll:?}, 4 send slots: {} of {EVENTS_BEHIND_POOLER} events published ({retried} \
         after one failed attempt), {} relay errors, {} rounds; self-check WARN logged {} \
         time(s)",
        counts.len(),
        s.errors,
        s.rounds,
        warned
    );
    assert_eq!(
        (s.published, s.retried, s.errors),
        (EVENTS_BEHIND_POOLER as u64, retried as u64, 0),
        "{s:?}\npgbouncer log:\n{}",
        bouncer.log()
    );
    assert_eq!(counts.len(), EVENTS_BEHIND_POOLER, "every event published");
    assert!(counts.values().all(|&n| n == 1), "each exactly once");
    assert_eq!(retried, EVENTS_BEHIND_POOLER / 10);
    drop(bouncer);
}

/// Session mode (the setup README recommends for the relay behind PgBouncer 1.18): each client
/// connection keeps its server connection, so `LISTEN` works and the self-check passes (the
/// gauge says 1); every event is delivered once, without errors. The commit→publish latencies
/// through the pooler (poll delay 5 s: a commit wakes the worker) are printed.
async fn through_pgbouncer_session_mode(ctx: &TestContext) {
    let Some((bouncer, user, database)) = bouncer_for(ctx, "session").await else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let gauge = Gauge::new(&recorder);
    let _guard = metrics::set_default_local_recorder(&recorder);

    let publisher = Arc::new(Arrivals::default());
    let config = common::test_config("listen-pgbouncer-session").poll_delay(LONG_POLL);
    let relay = Relay::start(
        bouncer.pool(&user, &database).await,
        publisher.clone(),
        config,
    );
    assert!(
        gauge.reaches(1.0).await,
        "the self-check passes through a session pooler: gauge {:?}",
        gauge.get()
    );
    let mut latencies = Vec::with_capacity(EVENTS_BEHIND_POOLER);
    for i in 0..EVENTS_BEHIND_POOLER {
        let biz_no = format!("SESSION-{i:02}");
        let committed = commit_one(&ctx.db, &biz_no).await;
        let mut arrived = None;
        let published = wait_until(WAIT, Duration::from_millis(1), || {
            arrived = publisher.arrival(&biz_no);
            std::future::ready(arrived.is_some())
        })
        .await;
        assert!(published, "{biz_no} published within {WAIT:?}");
        latencies.push(
            arrived
                .expect("arrival")
                .saturating_duration_since(committed.sent),
        );
    }
    latencies.sort_unstable();
    let p99 = percentile(&latencies, 99);
    println!(
        "figure: behind PgBouncer 1.18 in session mode (poll delay {LONG_POLL:?}): \
         {EVENTS_BEHIND_POOLER} events committed one by one, commit->publish p50 {:.1} ms, \
         p99 {:.1} ms",
        ms(percentile(&latencies, 50)),
        ms(p99)
    );
    assert_eq!(relay.logged("WARN", "LISTEN"), 0, "no LISTEN warning");

    let s = relay.stop().await;
    assert_eq!(
        (s.published, s.errors),
        (EVENTS_BEHIND_POOLER as u64, 0),
        "{s:?}\npgbouncer log:\n{}",
        bouncer.log()
    );
    assert!(publisher.counts().values().all(|&n| n == 1), "each once");
    assert_eq!(
        count(&ctx.db, EventStatus::Success).await,
        EVENTS_BEHIND_POOLER as u64
    );
    drop(bouncer);
}

// ---------------------------------------------------------------------------------------------
// Notifications shared by concurrent writers, follow-up rounds.

/// The poll delay of the follow-up tests: an event left to polling would take 27 s or more
/// (the delay is spread by ±10 %), beyond every deadline below.
const FOLLOW_UP_POLL: Duration = Duration::from_secs(30);

/// The deadline of the follow-up tests' waits: below [`FOLLOW_UP_POLL`] less its spread.
const BELOW_POLL: Duration = Duration::from_secs(20);

/// The payload prefix of a worker's self-check `NOTIFY` (not a commit's).
const SELF_CHECK: &str = "sea_orm_outbox:self-check:";

/// A worker waking on commit with the default follow-up and a poll delay of 30 s, listening
/// (its `LISTEN` connection is up) when this returns.
async fn waking_worker(
    ctx: &TestContext,
    owner: &str,
    publisher: Arc<sea_orm_outbox::InMemoryPublisher>,
) -> common::Fleet {
    let cfg = common::test_config(owner)
        .poll_delay(FOLLOW_UP_POLL)
        .send_concurrency(8)
        .batch_size(100);
    let fleet = common::Fleet::start(ctx, 4, publisher, [cfg]).await;
    assert!(fleet.started(WAIT).await, "the worker ran a first round");
    let listening = wait_until(WAIT, Duration::from_millis(5), || async {
        listen_backends(ctx, "pid").await.len() == 1
    })
    .await;
    assert!(listening, "the worker's LISTEN connection is up");
    fleet
}

/// Notifications of commits (not self-checks) on `l` until `NOTIFY ..., '<end>'` arrives.
async fn commit_notifications_until(
    l: &mut sea_orm::sqlx::postgres::PgListener,
    end: &str,
) -> usize {
    let mut n = 0;
    loop {
        let got = tokio::time::timeout(WAIT, l.recv())
            .await
            .expect("a notification within the bound")
            .expect("listener connection");
        match got.payload() {
            p if p == end => return n,
            p if p.starts_with(SELF_CHECK) => {}
            _ => n += 1,
        }
    }
}

/// The channel relays listen on for wake-ups (`pg_notify('sea_orm_outbox', ...)`).
const WAKE_CHANNEL: &str = "sea_orm_outbox";

/// A raw listener of the test (its own connection) on the wake channel.
async fn test_listener(ctx: &TestContext) -> sea_orm::sqlx::postgres::PgListener {
    let mut l = sea_orm::sqlx::postgres::PgListener::connect(&ctx.url)
        .await
        .expect("listener");
    l.listen(WAKE_CHANNEL).await.expect("LISTEN");
    l
}

async fn skipped_notifies_are_claimed_by_the_follow_up(ctx: &TestContext) {
    // Slots of 100 years: the holder's slot is the only one in the test, so that the other
    // inserts skip their notify for certain.
    let slot = Duration::from_secs(100 * 365 * 24 * 3600);
    let event = |b: &str| NewEvent::raw(b, "ORDER_CREATED", "{}").notify_interval(slot);
    let publisher = Arc::new(sea_orm_outbox::InMemoryPublisher::new());
    let fleet = waking_worker(ctx, "follow-up", publisher.clone()).await;
    let mut l = test_listener(ctx).await;
    let writers = ctx.pool(8).await;

    // The holder inserts first; five writers insert while it is open (no notify of their own).
    let holder = writers.begin().await.expect("begin");
    let h = holder.with_event(event("ORD-H")).await.expect("insert");
    let mut skippers = Vec::new();
    for i in 0..5 {
        let txn = writers.begin().await.expect("begin");
        txn.with_event(event(&format!("ORD-S{i}")))
            .await
            .expect("insert");
        skippers.push(txn);
    }
    // The holder's commit wakes the worker, whose round finds only the holder's event ...
    holder.commit().await.expect("commit");
    let woken = wait_until(BELOW_POLL, Duration::from_millis(2), || async {
        publisher.distinct_ids().contains(&h)
    })
    .await;
    assert!(woken, "the holder's event is published on its notification");
    assert_eq!(publisher.len(), 1, "the skippers had not committed yet");
    // ... and the skippers commit after that round: no notification tells of them.
    for txn in skippers {
        txn.commit().await.expect("commit");
    }
    let followed = wait_until(BELOW_POLL, Duration::from_millis(5), || async {
        publisher.distinct_ids().len() == 6
    })
    .await;
    assert!(
        followed,
        "the follow-up rounds claimed the skippers' events (published: {})",
        publisher.len()
    );
    ctx.db
        .execute_unprepared("NOTIFY sea_orm_outbox, 'end'")
        .await
        .expect("NOTIFY");
    assert_eq!(
        commit_notifications_until(&mut l, "end").await,
        1,
        "six events, one notification: the holder's"
    );
    let s = fleet.stop().await.remove(0);
    assert_eq!((s.published, s.errors), (6, 0), "{s:?}");
    assert_eq!(count(&ctx.db, EventStatus::Success).await, 6);
}

/// Writers of the burst test, and events each.
const BURST_WRITERS: usize = 8;
const BURST_EVENTS: usize = 40;

async fn burst_of_concurrent_writers_is_published_without_polling(ctx: &TestContext) {
    let publisher = Arc::new(sea_orm_outbox::InMemoryPublisher::new());
    let fleet = waking_worker(ctx, "burst", publisher.clone()).await;
    let mut l = test_listener(ctx).await;
    let writers = ctx.pool(BURST_WRITERS as u32).await;
    let mut tasks = Vec::new();
    for w in 0..BURST_WRITERS {
        let db = writers.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..BURST_EVENTS {
                // The default notify interval (10 ms), each event in a transaction of its own.
                let txn = db.begin().await.expect("begin");
                txn.with_event(NewEvent::raw(format!("ORD-{w}-{i}"), "ORDER_CREATED", "{}"))
                    .await
                    .expect("with_event");
                txn.commit().await.expect("commit");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let total = BURST_WRITERS * BURST_EVENTS;
    let published = wait_until(BELOW_POLL, Duration::from_millis(5), || async {
        publisher.distinct_ids().len() == total
    })
    .await;
    assert!(
        published,
        "every event of the burst is published by wake-ups and follow-ups, none left to the \
         30 s poll (published: {} of {total})",
        publisher.distinct_ids().len()
    );
    writers
        .execute_unprepared("NOTIFY sea_orm_outbox, 'end'")
        .await
        .expect("NOTIFY");
    let notifications = commit_notifications_until(&mut l, "end").await;
    eprintln!("burst: {total} events, {notifications} notifications");
    assert!(
        notifications < total,
        "concurrent writers shared notifications: {notifications} for {total} events"
    );
    let s = fleet.stop().await.remove(0);
    assert_eq!((s.published as usize, s.errors), (total, 0), "{s:?}");
}
