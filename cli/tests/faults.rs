//! Faults and hostile timing: an `outbox relay` process whose clock is 15 minutes ahead.
#[path = "../../tests/common/mod.rs"]
mod common;

use common::wait_until;
use common::{age, event, new_event};

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TestContext;
use sea_orm_outbox::event_record::Column;
use sea_orm_outbox::EventStatus;

// Postgres and MariaDB only: SQLite runs inside the relay process, so its "database clock" is
// that process's clock (faking it fakes the database's too).
backend_test!(
    postgres_relay_with_clock_ahead_reclaims_nothing_early:
        Postgres, "clock_ahead" => relay_with_clock_ahead_reclaims_nothing_early;
    mariadb_relay_with_clock_ahead_reclaims_nothing_early:
        MySql, "clock_ahead" => relay_with_clock_ahead_reclaims_nothing_early;
);

/// A relay process started under libfaketime with its clock 15 minutes ahead runs reclaim
/// passes with a 10-minute lease: a lease taken just now by another instance stays untouched
/// (leases are judged by the database clock alone), while a lease that really is 11 minutes old
/// is reclaimed and published, which shows the skewed relay did run.
async fn relay_with_clock_ahead_reclaims_nothing_early(ctx: &TestContext) {
    let db = &ctx.db;
    let fresh = new_event(db, "FRESH").await;
    let stale = new_event(db, "STALE").await;
    common::claim_by_hand(db, &[fresh, stale], "alive-elsewhere").await;
    age(db, stale, Column::ClaimedAt, Duration::from_secs(11 * 60)).await;

    // The relay publishes to the broker (`outbox relay` sends nothing without one): CI sets
    // its address; elsewhere the test is skipped without one.
    let Some(namesrv) = std::env::var("ROCKETMQ_NAMESRV_ADDR")
        .ok()
        .filter(|a| !a.trim().is_empty())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "ROCKETMQ_NAMESRV_ADDR must name the broker under CI"
        );
        eprintln!("SKIPPED: no ROCKETMQ_NAMESRV_ADDR for the skewed relay to publish to");
        return;
    };
    // libfaketime, preloaded into the relay itself (not through the `faketime` wrapper, so that
    // the signal below reaches the relay).
    let libfaketime = LIBFAKETIME
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.is_file())
        .expect("libfaketime (Debian package faketime) is needed; .ci/run installs it");
    let child = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("OUTBOX_COMPLETION", common::completion().as_str())
        .arg("relay")
        .env("LD_PRELOAD", libfaketime)
        .env("FAKETIME", "+15m")
        .args(["--lease", "10m", "--poll-delay", "100ms"])
        .args(["--instance-id", "skewed-relay"])
        // A send the broker refuses ("busy") is tried again soon, not after the default 5 s.
        .args(["--retry-backoff", "100ms"])
        .env("DATABASE_URL", &ctx.url)
        .env("ROCKETMQ_NAMESRV_ADDR", namesrv)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the skewed relay");
    let published = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async { event(db, stale).await.status == EventStatus::Success },
    )
    .await;
    // Several more reclaim passes of the skewed relay.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().expect("relay output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(published, "the skewed relay did not run; stderr:\n{stderr}");
    let stale = event(db, stale).await;
    assert_eq!(
        (
            stale.retry_count,
            stale.claim_owner.as_deref().map(common::instance_of)
        ),
        (1, Some("skewed-relay")),
        "the really expired lease was reclaimed (one attempt) and sent by the skewed relay"
    );
    let fresh = event(db, fresh).await;
    assert_eq!(
        (
            fresh.status,
            fresh.retry_count,
            fresh.claim_owner.as_deref()
        ),
        (EventStatus::Sending, 0, Some("alive-elsewhere")),
        "a fresh lease was reclaimed early by a relay whose clock is ahead"
    );
}

/// Where Debian puts libfaketime.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];
