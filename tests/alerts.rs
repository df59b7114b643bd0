//! The Prometheus alert rules of docs/operating.md: `promtool check rules` accepts them, and
//! `promtool test rules` fires the right ones on series built from what the library exported
//! (metrics-exporter-prometheus, gauges idle after 3 s) in a failing run, and none in a healthy
//! run, on Postgres, MariaDB and SQLite one after the other (the counters are the process's:
//! one scenario at a time keeps each one's increase its own).
//!
//! A scenario's series: two renders a few seconds apart, extended to a minute-by-minute hour.
//! Ages grow at the rate they showed (rounded to 0 or 1 s per s: a stuck event ages 1 s per s),
//! counters at the rate they showed, other gauges stay. In the failing run the worker's task is
//! then aborted: its gauges leave the exposition after the idle timeout (asserted), and the
//! series end there.
//!
//! Without `promtool` (Debian package `prometheus`) the tests FAIL under `CI=true`, and say
//! so and pass elsewhere.
mod common;
#[path = "support/prom.rs"]
mod prom;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{test_config, Backend, ScriptedPublisher, TestContext};
use prom::Sample;
use sea_orm_migration::SchemaManager;
use sea_orm_outbox::metrics as m;
use sea_orm_outbox::{CancellationToken, NewEvent, Outbox, RetryPolicy};

/// How long the recorder keeps a gauge nobody updates.
const GAUGE_IDLE: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Minutes of series in a promtool test; the failing run's worker dies at minute 30.
const MINUTES: usize = 60;
const DIES_AT: usize = 30;

/// The rules block of docs/operating.md.
fn rules() -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operating.md"))
            .expect("docs/operating.md");
    let start = doc
        .find("```yaml\n")
        .expect("a ```yaml block in docs/operating.md")
        + 8;
    let len = doc[start..].find("```").expect("the block's end");
    doc[start..start + len].to_owned()
}

/// `(alert name, its summary annotation)` of each rule, in order.
fn alerts(rules: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in rules.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            out.push((name.to_owned(), String::new()));
        } else if let Some(summary) = line.strip_prefix("summary: ") {
            let last = out.last_mut().expect("a summary inside a rule");
            last.1 = summary.trim_matches('"').to_owned();
        }
    }
    out
}

/// The promtool binary, or `None` (a failure under CI).
fn promtool() -> Option<PathBuf> {
    let found = ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "promtool (Debian package prometheus) is needed under CI; .ci/run installs it"
        );
        eprintln!("SKIPPED: no promtool (Debian package prometheus)");
    }
    found
}

/// Runs `promtool args` in `dir`; panics with its output unless it succeeds.
fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// A directory of its own holding the rules as `rules.yml`.
fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outbox-alerts-{name}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("rules.yml"), rules()).expect("write rules");
    dir
}

#[test]
fn the_alert_rules_are_valid() {
    let Some(promtool) = promtool() else { return };
    let dir = workdir("check");
    let out = run_promtool(&promtool, &dir, &["check", "rules", "rules.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
    std::fs::remove_dir_all(dir).ok();
}

/// Two renders of one scenario, `seconds` apart, and whether its worker died after them.
struct Run {
    first: Vec<Sample>,
    second: Vec<Sample>,
    seconds: f64,
    died: bool,
}

impl Run {
    /// The promtool input series of the samples of `table` (and the unlabelled ones).
    fn input_series(&self, table: &str) -> String {
        let mut out = String::new();
        for s in self
            .second
            .iter()
            .filter(|s| s.of_table(table) || !s.labels.contains("table="))
        {
            let counter = s.name.ends_with("_total");
            // A counter first counted between the renders was 0 before.
            let before = self.first.iter().find(|f| f.series() == s.series());
            let before = before.map(|b| b.value).or(counter.then_some(0.0));
            let rate = before.map_or(0.0, |b| (s.value - b) / self.seconds);
            let step = if counter {
                (rate * 60.0).max(0.0)
            } else if s.name.ends_with("_age_seconds") {
                rate.round().clamp(0.0, 1.0) * 60.0
            } else {
                0.0
            } + 0.0; // never -0, which promtool cannot read
            let values = if !self.died {
                format!("{}+{step}x{}", s.value, MINUTES - 1)
            } else if counter {
                let last = s.value + step * (DIES_AT - 1) as f64;
                format!(
                    "{}+{step}x{} {last}x{}",
                    s.value,
                    DIES_AT - 1,
                    MINUTES - DIES_AT - 1
                )
            } else {
                format!(
                    "{}+{step}x{} _x{}",
                    s.value,
                    DIES_AT - 1,
                    MINUTES - DIES_AT - 1
                )
            };
            let labels = if s.labels.is_empty() {
                "job=\"relay\",instance=\"app-1\"".to_owned()
            } else {
                format!("{},job=\"relay\",instance=\"app-1\"", s.labels)
            };
            out.push_str(&format!(
                "      - series: '{}{{{labels}}}'\n        values: '{values}'\n",
                s.name
            ));
        }
        out
    }
}

/// One eval of every alert: those of `firing` with their labels, the others silent.
fn evals(alerts: &[(String, String)], minute: usize, table: &str, firing: &[&str]) -> String {
    let mut out = String::new();
    for (name, summary) in alerts {
        out.push_str(&format!(
            "      - eval_time: {minute}m\n        alertname: {name}\n"
        ));
        if !firing.contains(&name.as_str()) {
            out.push_str("        exp_alerts: []\n");
            continue;
        }
        let rules = rules();
        let block = rules
            .split("- alert: ")
            .find(|b| b.starts_with(name.as_str()))
            .expect("rule");
        let severity = if block.contains("severity: critical") {
            "critical"
        } else {
            "warning"
        };
        let by_instance = block.contains("by (job, instance)");
        let summary = summary
            .replace("{{ $labels.table }}", table)
            .replace("{{ $labels.instance }}", "app-1");
        let labels = if by_instance {
            format!("severity: {severity}, job: relay, instance: app-1")
        } else {
            format!("severity: {severity}, job: relay, table: {table}")
        };
        out.push_str(&format!(
            "        exp_alerts:\n          - exp_labels: {{{labels}}}\n            exp_annotations: {{summary: \"{summary}\"}}\n"
        ));
    }
    out
}

/// Runs `promtool test rules` on `run`'s series of `table`, with `evals` of `(minute, firing)`.
fn promtool_test(promtool: &Path, name: &str, run: &Run, table: &str, at: &[(usize, &[&str])]) {
    let dir = workdir(name);
    let rules = rules();
    let alerts = alerts(&rules);
    let mut file = format!(
        "rule_files:\n  - rules.yml\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{}    alert_rule_test:\n",
        run.input_series(table)
    );
    for (minute, firing) in at {
        file.push_str(&evals(&alerts, *minute, table, firing));
    }
    std::fs::write(dir.join("test.yml"), &file).expect("write the test");
    let out = Command::new(promtool)
        .args(["test", "rules", "test.yml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "promtool test rules ({name}):\n{text}\n{file}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// An outbox table of the scenario's own.
async fn own_outbox(ctx: &TestContext, name: &str) -> Outbox {
    let table = format!("{name}_{:?}", ctx.backend).to_lowercase();
    sea_orm_outbox::migration::create_outbox_table(&SchemaManager::new(&ctx.db), &table)
        .await
        .expect("create the table");
    let outbox = Outbox::new().table(&table).expect("a valid name");
    common::observe_deletions(&ctx.db, &outbox).await;
    outbox
}

/// Waits until the gauge `name` of `table` satisfies `ok`.
async fn gauge_until(table: &str, name: &str, ok: impl Fn(f64) -> bool) -> bool {
    let handle = prom::install(Some(GAUGE_IDLE));
    common::wait_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async { prom::gauge(handle, name, table).is_some_and(&ok) },
    )
    .await
}

/// Renders now and `pause` later.
async fn two_renders(pause: Duration) -> (Vec<Sample>, Vec<Sample>, f64) {
    let handle = prom::install(Some(GAUGE_IDLE));
    let first = prom::samples(&handle.render());
    let at = Instant::now();
    tokio::time::sleep(pause).await;
    let second = prom::samples(&handle.render());
    (first, second, at.elapsed().as_secs_f64())
}

/// A relay that delivers everything: every alert stays silent.
async fn healthy(ctx: &TestContext, promtool: &Path) {
    let outbox = own_outbox(ctx, "alerts_ok").await;
    let table = outbox.table_name();
    let cancel = CancellationToken::new();
    let config = test_config("healthy").heartbeat_interval(HEARTBEAT);
    let worker = outbox
        .worker(ctx.pool(5).await, ScriptedPublisher::ok(), config)
        .expect("worker");
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move { worker.run(cancel).await }
    });
    for i in 0..20 {
        let event = NewEvent::raw(format!("OK-{i}"), "ORDER_CREATED", "{}");
        outbox.with_event(&ctx.db, event).await.expect("write");
    }
    let delivered = common::wait_until(
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            let b = sea_orm_outbox::ops::backlog(&outbox, &ctx.db)
                .await
                .expect("backlog");
            b.wait == 0 && b.sending == 0
        },
    )
    .await;
    assert!(delivered, "every event delivered");
    // Two heartbeats after the last delivery: the gauges show the delivered state.
    tokio::time::sleep(2 * HEARTBEAT + Duration::from_millis(200)).await;
    let (first, second, seconds) = two_renders(2 * HEARTBEAT).await;
    cancel.cancel();
    task.await.expect("worker task");
    let run = Run {
        first,
        second,
        seconds,
        died: false,
    };
    promtool_test(
        promtool,
        "healthy",
        &run,
        table,
        &[(10, &[]), (30, &[]), (59, &[])],
    );
}

/// A relay whose publisher fails every send (retryably: they back off) and some for good (dead
/// letters), then dies: the undelivered, no-delivery and dead-letter alerts fire while it
/// runs, the relays-gone alert once its gauges are gone.
async fn failing(ctx: &TestContext, promtool: &Path) {
    let handle = prom::install(Some(GAUGE_IDLE));
    let outbox = own_outbox(ctx, "alerts_fail").await;
    let table = outbox.table_name();
    let cancel = CancellationToken::new();
    let retry = RetryPolicy::new(100, Duration::from_secs(1), Duration::from_secs(60));
    let config = test_config("failing")
        .heartbeat_interval(HEARTBEAT)
        .retry(retry);
    let publisher = Arc::new(Failing);
    let worker = outbox
        .worker(ctx.pool(5).await, publisher, config)
        .expect("worker");
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move { worker.run(cancel).await }
    });
    for i in 0..5 {
        let event = NewEvent::raw(format!("E-{i}"), "ORDER_CREATED", "{}");
        outbox.with_event(&ctx.db, event).await.expect("write");
    }
    assert!(
        gauge_until(table, m::BACKOFF_EVENTS, |n| n > 0.0).await,
        "events back off"
    );
    // Dead letters while the renders are taken.
    let writer = {
        let (db, cancel) = (ctx.pool(2).await, cancel.clone());
        tokio::spawn(async move {
            for i in 0.. {
                let event = NewEvent::raw(format!("DEAD-{i}"), "ORDER_CREATED", "{}");
                outbox.with_event(&db, event).await.expect("write");
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        })
    };
    let (first, second, seconds) = two_renders(3 * HEARTBEAT).await;
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    cancel.cancel();
    writer.await.expect("writer");
    let gone = common::wait_until(
        GAUGE_IDLE + Duration::from_secs(5),
        Duration::from_millis(100),
        || async { prom::gauge(handle, m::RELAYS_ALIVE, table).is_none() },
    )
    .await;
    assert!(
        gone,
        "the dead worker's gauges leave the exposition after the idle timeout"
    );
    let run = Run {
        first,
        second,
        seconds,
        died: true,
    };
    let running: &[&str] = &[
        "OutboxUndeliveredTooOld",
        "OutboxNoDeliveryWithBacklog",
        "OutboxDeadLetters",
    ];
    promtool_test(
        promtool,
        "failing",
        &run,
        table,
        &[
            (4, &["OutboxDeadLetters"]),
            (25, running),
            (50, &["OutboxRelaysGone"]),
        ],
    );
}

/// Fails `DEAD-*` events for good, every other retryably.
struct Failing;

#[async_trait::async_trait]
impl sea_orm_outbox::Publisher for Failing {
    async fn publish(
        &self,
        m: &sea_orm_outbox::OutboxMessage,
    ) -> Result<(), sea_orm_outbox::PublishError> {
        Err(if m.biz_no.starts_with("DEAD-") {
            sea_orm_outbox::PublishError::permanent("scripted permanent failure")
        } else {
            sea_orm_outbox::PublishError::retryable("scripted broker outage")
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_on_a_failing_relay_and_stay_silent_on_a_healthy_one() {
    let Some(promtool) = promtool() else { return };
    prom::install(Some(GAUGE_IDLE));
    for backend in [Backend::Postgres, Backend::MySql, Backend::Sqlite] {
        common::run_on(backend, "alerts", async |ctx: &TestContext| {
            healthy(ctx, &promtool).await;
            failing(ctx, &promtool).await;
        })
        .await;
    }
}
