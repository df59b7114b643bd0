//! Credentials against a REAL rocketmq-rust broker with authentication, owned by this test
//! binary.
//!
//! It starts its own name server and broker with `scripts/rocketmq.sh` (name server 25876,
//! broker 26911/26909, HA 26912, health 26990, settle pass +7; state in a fresh temp dir) with
//! `ROCKETMQ_AUTH_USER=outbox-auth:<random secret>`, so the broker refuses every request that
//! is not signed by that user (`authenticationEnabled = true`). Without the
//! `rocketmq-namesrv-rust` / `rocketmq-broker-rust` binaries it FAILS under `CI=true` and is
//! skipped otherwise.
//!
//! One test function, in phases on one database (Postgres, else MariaDB):
//! a. right credentials: 200 events through 3 workers; the authenticated consumer receives
//!    each exactly once; every row `SUCCESS`; nothing (crate or client) logs an ERROR line;
//! b. wrong secret and no credentials: `RocketMqPublisher::start` refuses with the documented
//!    message; at run time (a publisher with a wrong secret that skips the start check) events
//!    stay `WAIT` with `retry_count` 0 through many refused attempts, none `FAIL`, and are
//!    delivered once the credentials are right;
//! c. the secrets appear in no log line (everything the crate and the client log, at TRACE),
//!    no error text, no `Debug` output, no output of the `outbox` tool (a relay with a wrong
//!    secret, and `--help` with the secret in the environment), no output of the script and
//!    no broker log.
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../rocketmq/tests/rmq_support/mod.rs"]
mod rmq_support;

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::wait_until;
use common::{insert_many, Backend, Fleet, TestContext};
use rmq_support::{count, in_ci, receive_all, script, unique, worker_config};
use sea_orm::EntityTrait;
use sea_orm_outbox::event_record::Entity as Events;
use sea_orm_outbox::{EventStatus, OutboxError, RetryPolicy, WorkerSummary};
use sea_orm_outbox_rocketmq::RocketMqConsumer;
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;

// Every port of the private broker lies below Linux's ephemeral range (32768-60999): a port in
// that range can be held by an outgoing connection's local end, and the broker then fails at
// start (a CI run lost this test that way with 49876 / 50911).
const NAMESRV_PORT: u16 = 25876;
const BROKER_PORT: u16 = 26911;
const HEALTH_PORT: u16 = 26990;
const USER: &str = "outbox-auth";

/// Every log line of the test process, at TRACE for the crate and the RocketMQ client.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Installs the capture (TRACE for everything but the SQL drivers) and the usual test
    /// output (`RUST_LOG`).
    fn install() -> Self {
        let captured = Captured::default();
        let writer = captured.clone();
        let capture = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(tracing_subscriber::EnvFilter::new(
                "trace,sqlx=info,sea_orm=info,tokio_postgres=info,hyper=info,h2=info",
            ));
        let echo = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(tracing_subscriber::EnvFilter::from_default_env());
        tracing_subscriber::registry()
            .with(capture)
            .with(echo)
            .try_init()
            .expect("the only subscriber of this test binary");
        captured
    }
}

/// The private name server + authenticating broker, stopped (state removed) on drop.
struct AuthCluster {
    state_dir: std::path::PathBuf,
    secret: String,
    /// Everything the script printed.
    output: Mutex<String>,
}

impl AuthCluster {
    fn script(&self, cmd: &str) -> bool {
        let out = Command::new("bash")
            .arg(script())
            .arg(cmd)
            .env("ROCKETMQ_STATE_DIR", &self.state_dir)
            .env("ROCKETMQ_NAMESRV_PORT", NAMESRV_PORT.to_string())
            .env("ROCKETMQ_BROKER_PORT", BROKER_PORT.to_string())
            .env("ROCKETMQ_HEALTH_PORT", HEALTH_PORT.to_string())
            .env("ROCKETMQ_BROKER_NAME", "outbox-auth-broker")
            .env("ROCKETMQ_AUTH_USER", format!("{USER}:{}", self.secret))
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{text}");
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_str(&text);
        out.status.success()
    }

    fn start() -> Option<Self> {
        let have_bins = ["rocketmq-namesrv-rust", "rocketmq-broker-rust"]
            .iter()
            .all(|b| {
                Command::new("bash")
                    .args([
                        "-c",
                        &format!("PATH=\"$HOME/.cargo/bin:$PATH\" command -v {b}"),
                    ])
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
        if !have_bins {
            let msg = "rocketmq-namesrv-rust / rocketmq-broker-rust not installed \
                       (scripts/rocketmq.sh start installs them)";
            assert!(!in_ci(), "broker auth test: {msg}");
            eprintln!("SKIPPED broker auth test: {msg}");
            return None;
        }
        let cluster = AuthCluster {
            state_dir: std::env::temp_dir().join(unique("outbox-rocketmq-auth")),
            secret: format!("Sk-{}", uuid::Uuid::new_v4().simple()),
            output: Mutex::new(String::new()),
        };
        cluster.script("stop");
        // The script's `start` accepts any name server and broker already answering on these
        // ports: make sure it is ours, with authentication, that the test talks to.
        for port in [
            NAMESRV_PORT,
            BROKER_PORT,
            BROKER_PORT - 2,
            BROKER_PORT + 1,
            HEALTH_PORT,
        ] {
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "port {port} is in use by another process: the test needs its own broker there"
            );
        }
        assert!(
            cluster.script("start"),
            "private RocketMQ with authentication did not start (logs in {})",
            cluster.state_dir.display()
        );
        Some(cluster)
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{NAMESRV_PORT}")
    }

    /// The publisher's configuration on `topic` with `secret` for the test user.
    fn config(&self, topic: &str, secret: &str) -> RocketMqConfig {
        RocketMqConfig::new(self.addr())
            .topic(topic)
            .producer_group(unique("outbox_auth_pg"))
            .send_timeout(Duration::from_secs(3))
            .credentials(USER, secret)
    }

    /// Everything the broker and name server logged.
    fn server_logs(&self) -> String {
        let mut all = String::new();
        let logs = std::fs::read_dir(self.state_dir.join("logs"));
        for e in logs.into_iter().flatten().flatten() {
            all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
        all
    }
}

impl Drop for AuthCluster {
    fn drop(&mut self) {
        self.script("stop");
        if !std::thread::panicking() {
            std::fs::remove_dir_all(&self.state_dir).ok();
        }
    }
}

/// Texts that must not hold a secret: error messages and `Debug` output gathered on the way.
#[derive(Default)]
struct Texts(Vec<(String, String)>);

impl Texts {
    fn add(&mut self, what: &str, text: impl Into<String>) {
        self.0.push((what.to_owned(), text.into()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_deliver_wrong_ones_are_refused_and_never_shown() {
    let captured = Captured::install();
    let Some(cluster) = AuthCluster::start() else {
        return;
    };
    let backend = [Backend::Postgres, Backend::MySql]
        .into_iter()
        .find(|b| b.enabled())
        .expect("OUTBOX_TEST_BACKENDS selects Postgres or MariaDB");
    let ctx = TestContext::new(backend, "rmq_auth").await;
    let wrong = format!("Wrong-{}", uuid::Uuid::new_v4().simple());
    let mut texts = Texts::default();

    let mark = captured.text().len();
    right_credentials_deliver_once(&ctx, &cluster, &mut texts).await;
    // A fault-free run, consumer start and shutdown included, logs no ERROR line.
    let fault_free = captured.text()[mark..].to_owned();
    let errors: Vec<&str> = fault_free
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("ERROR"))
        .collect();
    assert!(
        errors.is_empty(),
        "ERROR lines in a fault-free run: {errors:#?}"
    );
    wrong_credentials_refused_at_start(&cluster, &wrong, &mut texts).await;
    runtime_rejection_keeps_events_waiting(&ctx, &cluster, &wrong, &captured, &mut texts).await;
    tool_shows_no_secret(&ctx, &cluster, &wrong, &mut texts);

    // c. Nothing anywhere shows either secret.
    let logs = captured.text();
    assert!(
        logs.lines().count() > 100,
        "the capture saw the client's logs"
    );
    texts.add(
        "script output",
        cluster.output.lock().expect("output").clone(),
    );
    texts.add("broker and name server logs", cluster.server_logs());
    texts.add("captured log", logs);
    for secret in [cluster.secret.as_str(), wrong.as_str()] {
        for (what, text) in &texts.0 {
            if let Some(at) = text.find(secret) {
                let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
                let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
                panic!("a secret shows in {what}: {}", &text[from..to]);
            }
        }
    }
    eprintln!(
        "auth: no secret in {} texts ({} captured log lines)",
        texts.0.len(),
        texts.0.last().map_or(0, |(_, t)| t.lines().count())
    );
    ctx.cleanup().await;
}

/// a. 200 events, 3 workers, the right credentials: every event arrives once.
async fn right_credentials_deliver_once(
    ctx: &TestContext,
    cluster: &AuthCluster,
    texts: &mut Texts,
) {
    const N: usize = 200;
    let topic = unique("OUTBOX_AUTH");
    let config = cluster.config(&topic, &cluster.secret);
    texts.add("Debug of the config", format!("{config:?}"));
    assert!(
        format!("{config:?}").contains(USER),
        "the access key may show"
    );
    let consumer = RocketMqConsumer::start_with_credentials(
        &cluster.addr(),
        &unique("outbox_auth_cg"),
        &topic,
        config.credentials.clone(),
    )
    .await
    .expect("the authenticated consumer starts");
    let publisher = Arc::new(
        RocketMqPublisher::start(config)
            .await
            .expect("the right credentials are accepted"),
    );
    texts.add("Debug of the publisher", format!("{publisher:?}"));
    let ids: HashSet<i64> = insert_many(&ctx.db, "A", N).await.into_iter().collect();
    let retry = RetryPolicy::new(3, Duration::from_millis(100), Duration::from_secs(1));
    let configs = (0..3).map(|w| worker_config(&format!("auth-w{w}"), retry));
    let fleet = Fleet::start(ctx, 3, publisher.clone(), configs).await;
    let received = receive_all(
        &consumer,
        &ids,
        Duration::from_secs(120),
        Duration::from_secs(3),
    )
    .await;
    let delivered = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { count(&ctx.db, EventStatus::Success).await == N as u64 },
    )
    .await;
    let summaries = fleet.stop().await;
    consumer.shutdown().await;
    rmq_support::shutdown_publisher(publisher).await;
    received.assert_all_arrived(&ids);
    assert_eq!(received.duplicates(), 0, "each event exactly once");
    assert!(delivered, "every row SUCCESS");
    let total: u64 = summaries.iter().map(|s| s.published).sum();
    assert_eq!(total, N as u64, "{summaries:?}");
    assert!(summaries
        .iter()
        .all(|s| s.config_faults == 0 && s.retried == 0));
    eprintln!(
        "auth a: {N} events through 3 workers with credentials, received {} ({} duplicates)",
        received.all.len(),
        received.duplicates()
    );
}

/// b (start). A wrong secret, and no credentials at all: `start` refuses with the documented
/// message, on a topic with a route and on one without (the check then asks TBW102).
async fn wrong_credentials_refused_at_start(cluster: &AuthCluster, wrong: &str, texts: &mut Texts) {
    let fresh = unique("OUTBOX_AUTH_NEW");
    let err = RocketMqPublisher::start(cluster.config(&fresh, wrong))
        .await
        .expect_err("a wrong secret is refused at start");
    let text = err.to_string();
    texts.add("start error (wrong secret)", &text);
    texts.add("start error Debug", format!("{err:?}"));
    assert!(matches!(err, OutboxError::InvalidConfig(_)), "{text}");
    assert!(
        text.contains(&format!(
            "RocketMQ rejected the credentials (access key `{USER}`)"
        )) && text.contains("ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY"),
        "{text}"
    );
    let unknown = RocketMqConfig::new(cluster.addr())
        .topic(fresh.as_str())
        .credentials("nobody", cluster.secret.as_str());
    let err = RocketMqPublisher::start(unknown)
        .await
        .expect_err("an unknown user is refused at start");
    texts.add("start error (unknown user)", err.to_string());
    assert!(err.to_string().contains("access key `nobody`"), "{err}");
    let unsigned = RocketMqConfig::new(cluster.addr()).topic(fresh.as_str());
    let err = RocketMqPublisher::start(unsigned)
        .await
        .expect_err("no credentials are refused at start");
    texts.add("start error (no credentials)", err.to_string());
    assert!(
        err.to_string().contains("RocketMQ requires credentials"),
        "{err}"
    );
    eprintln!("auth b: start refused: {text}");
}

/// b (run time). A publisher with a wrong secret that skipped the start check: every send is
/// refused (NO_PERMISSION), the events stay WAIT with retry_count 0 through many attempts and
/// none is FAIL; with the right credentials they are then delivered.
async fn runtime_rejection_keeps_events_waiting(
    ctx: &TestContext,
    cluster: &AuthCluster,
    wrong: &str,
    captured: &Captured,
    texts: &mut Texts,
) {
    const N: usize = 20;
    const ERROR_LINE: &str = "the publisher is misconfigured";
    let errors_before = captured.text().matches(ERROR_LINE).count();
    let db = &ctx.db;
    let topic = unique("OUTBOX_AUTH_RT");
    // A retry budget of one, so that counted attempts would dead-letter at once; the wait
    // after a configuration fault is the policy's max back-off (300 ms here).
    let retry = RetryPolicy::new(1, Duration::from_millis(50), Duration::from_millis(300));
    let bad = Arc::new(
        RocketMqPublisher::start(cluster.config(&topic, wrong).verify_credentials(false))
            .await
            .expect("starts without the check"),
    );
    let before = count(db, EventStatus::Success).await;
    let ids = insert_many(db, "B", N).await;
    let configs = (0..2).map(|w| worker_config(&format!("auth-bad-w{w}"), retry));
    let fleet = Fleet::start(ctx, 3, bad.clone(), configs).await;
    let started = Instant::now();
    let refused = wait_until(Duration::from_secs(60), Duration::from_millis(100), || {
        let workers = fleet.workers();
        async move {
            assert_eq!(count(db, EventStatus::Fail).await, 0, "no FAIL");
            let faults: u64 = workers.iter().map(|w| w.summary().config_faults).sum();
            faults >= 3 * N as u64
        }
    })
    .await;
    let summaries: Vec<WorkerSummary> = fleet.stop().await;
    rmq_support::shutdown_publisher(bad).await;
    assert!(refused, "every event refused three times: {summaries:?}");
    let rows = Events::find().all(db).await.expect("rows");
    let mine: Vec<_> = rows.iter().filter(|r| ids.contains(&r.id)).collect();
    assert_eq!(mine.len(), N);
    for r in &mine {
        assert_eq!(
            (r.status, r.retry_count),
            (EventStatus::Wait, 0),
            "event {} after {:?} of refusals: {:?}",
            r.id,
            started.elapsed(),
            r.last_error
        );
        let last = r.last_error.as_deref().unwrap_or_default();
        assert!(
            last.contains(&format!(
                "RocketMQ rejected the credentials (access key `{USER}`)"
            )),
            "{last}"
        );
        texts.add("last_error", last);
    }
    let faults: u64 = summaries.iter().map(|s| s.config_faults).sum();
    // ERROR lines: one per worker at most every 10 s, not one per refused send.
    let error_lines = captured.text().matches(ERROR_LINE).count() - errors_before;
    let allowed = 2 * (1 + started.elapsed().as_secs() as usize / 10);
    assert!(
        (1..=allowed).contains(&error_lines),
        "{error_lines} ERROR lines for {faults} refused sends (at most {allowed})"
    );
    assert!(
        summaries
            .iter()
            .all(|s| s.dead_lettered == 0 && s.retried == 0),
        "{summaries:?}"
    );
    eprintln!(
        "auth b: {faults} refused sends of {N} events in {:.1} s ({error_lines} ERROR lines); all \
         WAIT, retry_count 0, no FAIL; e.g. last_error {:?}",
        started.elapsed().as_secs_f64(),
        mine[0].last_error
    );

    // The credentials are fixed: the same events go out.
    let good = Arc::new(
        RocketMqPublisher::start(cluster.config(&topic, &cluster.secret))
            .await
            .expect("right credentials"),
    );
    let fleet = Fleet::start(ctx, 3, good.clone(), [worker_config("auth-fixed", retry)]).await;
    let delivered = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { count(db, EventStatus::Success).await == before + N as u64 },
    )
    .await;
    fleet.stop().await;
    rmq_support::shutdown_publisher(good).await;
    assert!(delivered, "delivered once the credentials are right");
    assert_eq!(count(db, EventStatus::Fail).await, 0);
}

/// Runs the `outbox` binary with `args` and the RocketMQ variables, killing it after 90 s.
fn outbox(ctx: &TestContext, cluster: &AuthCluster, secret: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("OUTBOX_COMPLETION", common::completion().as_str())
        .args(args)
        .env("DATABASE_URL", &ctx.url)
        .env("ROCKETMQ_NAMESRV_ADDR", cluster.addr())
        .env("ROCKETMQ_ACCESS_KEY", USER)
        .env("ROCKETMQ_SECRET_KEY", secret)
        .env("RUST_LOG", "trace,sqlx=info,sea_orm=info")
        .env("OUTBOX_CONNECT_TIMEOUT", "30s")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn outbox");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(90) {
            child.kill().ok();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// c (tool). `outbox relay` with a wrong secret exits with the documented error; neither it
/// nor `--help` (with the secret in the environment) shows a secret.
fn tool_shows_no_secret(ctx: &TestContext, cluster: &AuthCluster, wrong: &str, texts: &mut Texts) {
    let out = outbox(ctx, cluster, wrong, &["relay"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "RocketMQ rejected the credentials (access key `{USER}`)"
        )),
        "{stderr}"
    );
    texts.add("outbox relay stdout", stdout);
    texts.add("outbox relay stderr", stderr);
    for help in [["relay", "--help"], ["--help", ""]] {
        let args: Vec<&str> = help.iter().copied().filter(|a| !a.is_empty()).collect();
        let out = outbox(ctx, cluster, &cluster.secret, &args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if args[0] == "relay" {
            assert!(text.contains("ROCKETMQ_SECRET_KEY"), "{text}");
        }
        texts.add("outbox --help", text);
    }
}
