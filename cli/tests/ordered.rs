//! Ordered delivery seen through the `outbox` tool: a key blocked behind its dead letter shows
//! in `outbox stats`, and `outbox dead retry` unblocks it. Runs on Postgres, MariaDB and SQLite
//! (see the core's `tests/common`).
#[path = "../../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ordered::{ordered_config, OrderCheck};
use common::wait_until;
use common::{count, event, insert_keys, new_event, Fleet, TestContext};
use sea_orm_outbox::{ops, EventStatus, OrderedPolicy};
backend_tests!(block_holds_a_key_behind_its_dead_letter_until_retried);

/// Runs `outbox args` against the test database; returns stdout (the command must succeed).
fn outbox(ctx: &TestContext, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env("OUTBOX_COMPLETION", common::completion().as_str())
        .args(args)
        .env("DATABASE_URL", &ctx.url)
        .env_remove("RUST_LOG")
        .env_remove("ROCKETMQ_NAMESRV_ADDR")
        .output()
        .expect("run outbox");
    assert!(
        out.status.success(),
        "outbox {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `Block`: the first event of key A is refused for good (FAIL): nothing more
/// of A is sent while B, C and keys written later go on; `ops::blocked_keys` and
/// `outbox stats` show one blocked key; `outbox dead retry` unblocks it and A follows in order.
async fn block_holds_a_key_behind_its_dead_letter_until_retried(ctx: &TestContext) {
    let db = &ctx.db;
    let keys: Vec<String> = ["A", "B", "C"].iter().map(|k| k.to_string()).collect();
    let ids = insert_keys(db, &keys, 5).await;
    let dead = ids["A"][0];
    let publisher = Arc::new(OrderCheck {
        keys: Mutex::new(ids.clone()),
        poison: Mutex::new([dead].into()),
        ..Default::default()
    });
    let configs = (0..2).map(|w| ordered_config(&format!("block-{w}"), OrderedPolicy::Block));
    let fleet = Fleet::start(ctx, 4, publisher.clone(), configs).await;
    let others: Vec<i64> = ids["B"].iter().chain(&ids["C"]).copied().collect();
    let settled = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            count(db, EventStatus::Success).await == others.len() as u64
                && event(db, dead).await.status == EventStatus::Fail
        },
    )
    .await;
    assert!(settled, "B and C delivered, A's head a dead letter");
    // Keys written after the block go on too (the relays keep claiming).
    let later = [new_event(db, "D").await, new_event(db, "D").await];
    let delivered = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            let mut all = true;
            for id in later {
                all &= event(db, id).await.status == EventStatus::Success;
            }
            all
        },
    )
    .await;
    assert!(delivered, "D delivered while A is blocked");
    for id in &ids["A"][1..] {
        assert_eq!(event(db, *id).await.status, EventStatus::Wait, "{id}");
    }
    let sent = publisher.sent.distinct_ids();
    assert!(
        ids["A"].iter().all(|id| !sent.contains(id)),
        "A sent nothing"
    );

    let blocked = ops::blocked_keys(&sea_orm_outbox::Outbox::default(), db)
        .await
        .expect("blocked keys");
    assert_eq!(blocked.keys, 1, "{blocked:?}");
    assert!(
        blocked.oldest_age_seconds.is_some_and(|a| a >= 0.0),
        "{blocked:?}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&outbox(ctx, &["stats", "--json"])).expect("json");
    assert_eq!(stats["blocked_keys"], 1, "{stats}");
    assert!(stats["oldest_blocked_age_seconds"].is_f64(), "{stats}");
    let text = outbox(ctx, &["stats"]);
    assert!(
        text.contains("keys blocked behind a dead letter (ordered, block policy): 1"),
        "{text}"
    );

    // The cause is fixed; a person retries the dead letter and the key follows in order.
    publisher.poison.lock().unwrap().clear();
    let out = outbox(ctx, &["dead", "retry", &dead.to_string()]);
    assert!(out.contains("will be sent again"), "{out}");
    let unblocked = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async { count(db, EventStatus::Success).await == 15 + 2 },
    )
    .await;
    fleet.stop().await;
    assert!(
        unblocked,
        "SUCCESS {}",
        count(db, EventStatus::Success).await
    );
    publisher.assert_in_order();
    assert_eq!(publisher.first_deliveries()["A"], ids["A"]);
    assert_eq!(
        ops::blocked_keys(&sea_orm_outbox::Outbox::default(), db)
            .await
            .expect("blocked")
            .keys,
        0
    );
}
