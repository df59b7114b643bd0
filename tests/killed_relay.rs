//! A relay process killed with SIGKILL (no clean shutdown), on Postgres, MariaDB and SQLite
//! (see `tests/common`): a surviving worker in another process reports it stopped through its
//! gauge `outbox_relays_alive`, and `ops::relays` lists it stopped, both within its heartbeat
//! timeout (three 1 s heartbeats).
//!
//! The killed relay is this test binary run again with `OUTBOX_TEST_CHILD_RELAY_URL` set: its
//! test `child_relay` then runs a worker (in-memory publisher, no broker needed) until killed.
mod common;
#[path = "support/prom.rs"]
mod prom;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{test_config, ScriptedPublisher, TestContext};
use sea_orm_migration::SchemaManager;
use sea_orm_outbox::metrics as m;
use sea_orm_outbox::{ops, CancellationToken, InMemoryPublisher, Outbox};

backend_tests!(a_killed_relay_process_is_seen_stopped_by_a_survivors_gauge);

/// Every worker's heartbeat interval, and the timeout (three of them).
const HEARTBEAT: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(3);
/// The child's instance id.
const CHILD: &str = "killed";
/// The variables that make `child_relay` run a worker on that database and table.
const CHILD_URL: &str = "OUTBOX_TEST_CHILD_RELAY_URL";
const CHILD_TABLE: &str = "OUTBOX_TEST_CHILD_RELAY_TABLE";
/// Between two checks of a polled condition.
const POLL: Duration = Duration::from_millis(50);

/// In the child process: a worker of `$OUTBOX_TEST_CHILD_RELAY_TABLE` on the database at
/// `$OUTBOX_TEST_CHILD_RELAY_URL`, until the process is killed. Elsewhere it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_relay() {
    let (Ok(url), Ok(table)) = (std::env::var(CHILD_URL), std::env::var(CHILD_TABLE)) else {
        return;
    };
    let db = common::connect(&url, 5).await;
    let outbox = Outbox::new().table(&table).expect("a valid name");
    let config = test_config(CHILD).heartbeat_interval(HEARTBEAT);
    let worker = outbox
        .worker(db, Arc::new(InMemoryPublisher::new()), config)
        .expect("worker");
    worker.run(CancellationToken::new()).await;
}

/// Starts the child relay of `table` on `url`.
fn spawn_child(url: &str, table: &str) -> Child {
    Command::new(std::env::current_exe().expect("this test binary"))
        .args(["child_relay", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env(CHILD_TABLE, table)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child relay")
}

async fn a_killed_relay_process_is_seen_stopped_by_a_survivors_gauge(ctx: &TestContext) {
    let handle = prom::install(None);
    let table = format!("hkill_{:?}", ctx.backend).to_lowercase();
    sea_orm_outbox::migration::create_outbox_table(&SchemaManager::new(&ctx.db), &table)
        .await
        .expect("create the test's outbox table");
    let outbox = Outbox::new().table(&table).expect("a valid name");
    let cancel = CancellationToken::new();
    let survivor = outbox
        .worker(
            ctx.pool(5).await,
            ScriptedPublisher::ok(),
            test_config("survivor").heartbeat_interval(HEARTBEAT),
        )
        .expect("worker");
    let kept = tokio::spawn({
        let cancel = cancel.clone();
        async move { survivor.run(cancel).await }
    });
    let mut child = spawn_child(&ctx.url, &table);
    let both = common::wait_until(Duration::from_secs(60), POLL, || async {
        prom::gauge(handle, m::RELAYS_ALIVE, outbox.table_name()) == Some(2.0)
    })
    .await;
    if !both {
        child.kill().ok();
        panic!("the survivor's gauge never counted the child relay");
    }

    child.kill().expect("SIGKILL the child relay");
    let killed = Instant::now();
    child.wait().expect("reaped");
    let (mut listed_at, mut gauge_at) = (None, None);
    while (listed_at.is_none() || gauge_at.is_none())
        && killed.elapsed() < TIMEOUT + HEARTBEAT + Duration::from_secs(2)
    {
        if gauge_at.is_none()
            && prom::gauge(handle, m::RELAYS_ALIVE, outbox.table_name()) == Some(1.0)
        {
            gauge_at = Some(killed.elapsed());
        }
        let relays = ops::relays(&outbox, &ctx.db).await.expect("relays");
        let state = |id: &str| relays.iter().find(|r| r.instance_id == id).map(|r| r.alive);
        if listed_at.is_none() && state(CHILD) == Some(false) {
            assert_eq!(state("survivor"), Some(true), "the survivor lives");
            listed_at = Some(killed.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
    println!(
        "{:?}: the SIGKILLed relay was listed stopped after {listed_at:?}, the survivor's gauge \
         said 1 after {gauge_at:?} (heartbeat {HEARTBEAT:?}, timeout {TIMEOUT:?})",
        ctx.backend
    );
    cancel.cancel();
    kept.await.expect("survivor task");
    // The child's last heartbeat was at most one interval before the kill, so its row expired
    // within the timeout; the slack covers the polling and a loaded machine's scheduling.
    let slack = Duration::from_millis(300);
    assert!(
        listed_at.is_some_and(|d| d <= TIMEOUT + slack),
        "ops::relays within the heartbeat timeout: {listed_at:?}"
    );
    assert!(
        gauge_at.is_some_and(|d| d <= TIMEOUT + slack),
        "the survivor's gauge within the heartbeat timeout: {gauge_at:?}"
    );
}
