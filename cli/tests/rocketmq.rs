//! `outbox relay` and its RocketMQ name server: an address it cannot use (one that resolves
//! nowhere, a malformed or an empty one) fails the start with a clear error (exit 1) and leaves
//! the events alone (an empty address is never taken for "relay to the log", which would mark
//! events delivered). A database without the heartbeat table's migration fails the start with
//! exit 3 (needs the name server of `ROCKETMQ_NAMESRV_ADDR`; the others need no broker). Runs on
//! Postgres (see the core's `tests/common`).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{new_event, TestContext};
use sea_orm::ConnectionTrait;
use sea_orm_outbox::EventStatus;

backend_test!(
    /// Each unusable name server: exit 1 at start, the error says why, the event stays `WAIT`.
    relay_refuses_a_name_server_it_cannot_use:
        Postgres, "cli_rmq_unusable_namesrv" => relay_refuses_a_name_server_it_cannot_use_on;
    /// Without `t_outbox_relay`: exit 3 at start, naming the migration; the event stays `WAIT`.
    relay_refuses_a_database_without_the_heartbeat_table:
        Postgres, "cli_rmq_no_heartbeat_table" => relay_refuses_a_database_without_the_heartbeat_table_on;
);

/// Runs `outbox relay --rocketmq-namesrv namesrv` on `url` until it exits (at most 30 s).
async fn relay_start(url: &str, namesrv: &str) -> std::process::Output {
    let out = tokio::task::spawn_blocking({
        let (url, namesrv) = (url.to_owned(), namesrv.to_owned());
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
                .env("OUTBOX_COMPLETION", common::completion().as_str())
                .args([
                    "relay",
                    "--poll-delay",
                    "50ms",
                    "--rocketmq-namesrv",
                    &namesrv,
                ])
                .env("DATABASE_URL", url)
                .env_remove("RUST_LOG")
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run outbox relay")
        }
    });
    tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the relay exits at start")
        .expect("join")
}

async fn relay_refuses_a_database_without_the_heartbeat_table_on(ctx: &TestContext) {
    let Ok(namesrv) = std::env::var("ROCKETMQ_NAMESRV_ADDR") else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(!ci, "ROCKETMQ_NAMESRV_ADDR is needed under CI");
        eprintln!("SKIPPED: no ROCKETMQ_NAMESRV_ADDR");
        return;
    };
    let id = new_event(&ctx.db, "ORD-OLD-SCHEMA").await;
    ctx.db
        .execute_unprepared("DROP TABLE t_outbox_relay")
        .await
        .expect("drop the heartbeat table");
    let out = relay_start(&ctx.url, &namesrv).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("m20261206_000005_create_t_outbox_relay"),
        "{err}"
    );
    let e = common::event(&ctx.db, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 0), "{e:?}");
}

async fn relay_refuses_a_name_server_it_cannot_use_on(ctx: &TestContext) {
    let id = new_event(&ctx.db, "ORD-DNS-1").await;
    for (namesrv, expected) in [
        (
            "nonexistent.invalid:9876",
            "no RocketMQ name server reachable (nonexistent.invalid:9876: ",
        ),
        (
            "localhost",
            "invalid configuration: RocketMQ name server address `localhost` is not host:port",
        ),
        ("http://namesrv:9876", "is not host:port"),
        ("", "ROCKETMQ_NAMESRV_ADDR is set but empty"),
        ("  ", "ROCKETMQ_NAMESRV_ADDR is set but empty"),
    ] {
        let out = tokio::task::spawn_blocking({
            let url = ctx.url.clone();
            move || {
                std::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
                    .env("OUTBOX_COMPLETION", common::completion().as_str())
                    .args([
                        "relay",
                        "--poll-delay",
                        "50ms",
                        "--rocketmq-namesrv",
                        namesrv,
                    ])
                    .env("DATABASE_URL", url)
                    .env_remove("RUST_LOG")
                    .stdin(std::process::Stdio::null())
                    .output()
                    .expect("run outbox relay")
            }
        });
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("the relay exits at start")
            .expect("join");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{namesrv}: {err}");
        assert!(err.contains(expected), "{namesrv}: {err}");
        let e = common::event(&ctx.db, id).await;
        assert_eq!((e.status, e.retry_count), (EventStatus::Wait, 0), "{e:?}");
    }
}
