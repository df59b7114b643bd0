//! `outbox health` and `outbox relays` against real databases (Postgres, MariaDB, SQLite; see
//! the core's `tests/common`): with no relay the outbox is failing (exit status 5); a relay
//! running in a child process is listed alive and the outbox healthy (0); once that process is
//! killed with SIGKILL (no clean shutdown) `outbox health` says failing, naming it, within its
//! heartbeat timeout (three 1 s heartbeats), and `outbox relays` lists it stopped.
//!
//! The child is this test binary run again with `OUTBOX_TEST_CHILD_RELAY_URL` set: its test
//! `child_relay` then runs a worker (in-memory publisher, no broker needed) until killed.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestContext;
use sea_orm_outbox::{ops, CancellationToken, InMemoryPublisher, Outbox, Worker};

backend_tests!(health_and_relays_see_a_killed_relay);

/// The child's heartbeat interval, and its timeout (three of them).
const HEARTBEAT: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(3);
/// The child's instance id.
const CHILD: &str = "killed-relay";
/// The variable that makes `child_relay` run a worker on that database.
const CHILD_URL: &str = "OUTBOX_TEST_CHILD_RELAY_URL";

/// In the child process: a worker on the database at `$OUTBOX_TEST_CHILD_RELAY_URL`, beating
/// every second, until the process is killed. Elsewhere it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_relay() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let db = common::connect(&url, 5).await;
    let config = common::test_config(CHILD).heartbeat_interval(HEARTBEAT);
    let worker = Worker::new(db, Arc::new(InMemoryPublisher::new()), config).expect("worker");
    worker.run(CancellationToken::new()).await;
}

/// Starts the child relay on `url`.
fn spawn_child(url: &str) -> Child {
    Command::new(std::env::current_exe().expect("this test binary"))
        .args(["child_relay", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child relay")
}

/// `outbox args` against `url`.
fn outbox(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("OUTBOX_COMPLETION", common::completion().as_str())
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run outbox")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn health_and_relays_see_a_killed_relay(ctx: &TestContext) {
    let o = outbox(&ctx.url, &["health"]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "no relay: failing\n{}",
        text(&o.stdout)
    );
    assert!(
        text(&o.stdout).starts_with("failing\n"),
        "{}",
        text(&o.stdout)
    );
    assert!(text(&o.stdout).contains("no_relay_alive"));
    let o = outbox(&ctx.url, &["relays", "--json"]);
    assert_eq!(text(&o.stdout).trim(), "[]", "{}", text(&o.stderr));

    let mut child = spawn_child(&ctx.url);
    let up = common::wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let relays = ops::relays(&Outbox::default(), &ctx.db)
                .await
                .expect("relays");
            relays.iter().any(|r| r.instance_id == CHILD && r.alive)
        },
    )
    .await;
    if !up {
        child.kill().ok();
        panic!("the child relay never beat");
    }
    let o = outbox(&ctx.url, &["health", "--json"]);
    let h: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(
        (o.status.code(), &h["status"]),
        (Some(0), &"healthy".into()),
        "{h}"
    );
    let o = outbox(&ctx.url, &["relays"]);
    let listed = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(CHILD) && l.contains(" alive ")),
        "{listed}"
    );

    child.kill().expect("SIGKILL the child relay");
    let killed = Instant::now();
    child.wait().expect("reaped");
    let mut seen = None;
    while seen.is_none() && killed.elapsed() < TIMEOUT + Duration::from_secs(5) {
        let o = outbox(&ctx.url, &["health", "--json"]);
        if o.status.code() == Some(5) {
            let h: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
            seen = Some((killed.elapsed(), h));
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (after, h) = seen.expect("outbox health never said failing");
    println!(
        "{:?}: `outbox health` said failing {after:?} after the SIGKILL (heartbeat {HEARTBEAT:?})",
        ctx.backend
    );
    let reasons = h["reasons"].as_array().expect("reasons");
    assert!(
        reasons.iter().any(|r| r["code"] == "no_relay_alive"
            && r["status"] == "failing"
            && r["message"].as_str().is_some_and(|m| m.contains(CHILD))),
        "{h}"
    );
    // The child's last heartbeat was at most one interval before the kill.
    assert!(after <= TIMEOUT + Duration::from_millis(500), "{after:?}");
    let o = outbox(&ctx.url, &["relays", "--json"]);
    let relays: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(relays[0]["instance_id"], CHILD, "{relays}");
    assert_eq!(relays[0]["alive"], false, "{relays}");
}
