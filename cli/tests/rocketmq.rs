//! `outbox relay` and its RocketMQ name server: an address it cannot use (one that resolves
//! nowhere, a malformed or an empty one) fails the start with a clear error (exit 1) and leaves
//! the events alone (an empty address is never taken for "relay to the log", which would mark
//! events delivered). Needs no broker; runs on Postgres (see the core's `tests/common`).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{new_event, TestContext};
use sea_orm_outbox::EventStatus;

backend_test!(
    /// Each unusable name server: exit 1 at start, the error says why, the event stays `WAIT`.
    relay_refuses_a_name_server_it_cannot_use:
        Postgres, "cli_rmq_unusable_namesrv" => relay_refuses_a_name_server_it_cannot_use_on;
);

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
