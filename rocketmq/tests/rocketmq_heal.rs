//! Dead letters that heal, against a REAL RocketMQ broker that this test binary owns: a broker
//! outage longer than the retry budget turns the events into dead letters (`FAIL`,
//! `retryable: ...`); the relays' healing policy puts them back round by round, and once the
//! broker is back every one is delivered (the consumer receives each) without a person.
//!
//! Its own name server and broker come from `scripts/rocketmq.sh` on other ports than the
//! other suites' (name server 19877, broker 21911/21909, HA 21912, health 21990; state in a
//! fresh temp dir). It needs the `rocketmq-namesrv-rust` and `rocketmq-broker-rust` binaries;
//! without them the test FAILS under `CI=true` and is skipped otherwise. One test function
//! runs Postgres, then MariaDB, on the one private broker, and prints the measured figures.
#[path = "../../tests/common/mod.rs"]
mod common;
mod rmq_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{insert_many, wait_for_success, wait_until, Backend, Fleet, TestContext};
use rmq_support::cluster::{Ports, PrivateCluster};
use rmq_support::{count, worker_config, Clients};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use sea_orm_outbox::event_record::{Column, Entity as Events, Model};
use sea_orm_outbox::{
    ops, EventStatus, FailureKind, HealPolicy, Outbox, RetryPolicy, WorkerConfig,
};

/// Name server 19877, broker 21911 (and 21909, HA 21912), health 21990.
const PORTS: Ports = Ports {
    namesrv: 19877,
    broker: 21911,
    health: 21990,
    broker_name: "outbox-heal-broker",
};

/// Events written while the broker is down.
const N: usize = 50;

/// A retry budget far shorter than the outage: 3 retries, 100 ms, 400 ms and 500 ms apart
/// (1 s in all), then a dead letter with `retry_count` 4.
const RETRY: RetryPolicy =
    RetryPolicy::new(3, Duration::from_millis(100), Duration::from_millis(500));

/// Healing 3 s after a failure, then 6, 12, 24, 48 and 96 s: longer in all than the producer's
/// 30 s circuit breaker after the broker's return.
fn heal() -> HealPolicy {
    HealPolicy::new(Duration::from_secs(3), 6)
}

fn config(owner: &str) -> WorkerConfig {
    worker_config(owner, RETRY).heal_dead_letters(Some(heal()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_an_outage_heal_after_the_broker_returns() {
    common::init_tracing();
    let Some(cluster) = PrivateCluster::start("outbox-rocketmq-heal", PORTS) else {
        return;
    };
    for backend in [Backend::Postgres, Backend::MySql] {
        if !backend.enabled() {
            eprintln!("heal: {backend:?} not selected by OUTBOX_TEST_BACKENDS");
            continue;
        }
        let ctx = TestContext::new(backend, "rmq_heal").await;
        heal_drill(&ctx, &cluster).await;
        ctx.cleanup().await;
    }
}

/// The rows of the events written during the outage (`B-*`).
async fn outage_rows(ctx: &TestContext) -> Vec<Model> {
    Events::find()
        .filter(Column::BizNo.starts_with("B-"))
        .all(&ctx.db)
        .await
        .expect("rows")
}

async fn heal_drill(ctx: &TestContext, cluster: &PrivateCluster) {
    let db = &ctx.db;
    let clients = Clients::start(&cluster.addr(), "OUTBOX_HEAL", Duration::from_secs(2)).await;
    let dead_letter = RETRY.max_retries as i32 + 1;

    // The broker up: the first events flow (the route is known, the consumer is placed).
    let mut ids: HashSet<i64> = insert_many(db, "A", 10).await.into_iter().collect();
    let configs = (0..2).map(|w| config(&format!("heal-w{w}")));
    let fleet = Fleet::start(ctx, 3, clients.publisher.clone(), configs).await;
    assert!(
        wait_for_success(db, 10, Duration::from_secs(60)).await,
        "the first events were not delivered"
    );

    // The broker crashes; events written now outlive their retries: every one a dead letter of
    // a retryable failure, and all of them dead at once.
    assert!(cluster.script("kill-broker"), "kill-broker");
    let down = Instant::now();
    let outage_ids = insert_many(db, "B", N).await;
    ids.extend(&outage_ids);
    let all_dead = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            let rows = outage_rows(ctx).await;
            rows.iter().all(|r| {
                let retryable = FailureKind::of(r.last_error.as_deref().unwrap_or_default())
                    == Some(FailureKind::Retryable);
                (r.status, r.retry_count) == (EventStatus::Fail, dead_letter) && retryable
            })
        },
    )
    .await;
    assert!(
        all_dead,
        "not all dead letters: {:?}",
        outage_rows(ctx).await
    );
    let dead_after = down.elapsed();
    // One outage, a few failure groups at most, whatever ids and addresses the errors name.
    let groups = ops::dead_letter_groups(&Outbox::default(), db)
        .await
        .expect("groups");
    for g in &groups {
        eprintln!(
            "{:?}: group of {} dead letters ({} distinct errors): {}",
            ctx.backend,
            g.count,
            g.errors,
            g.fingerprint.as_deref().unwrap_or_default()
        );
    }
    assert!(groups.len() <= 3, "{groups:#?}");
    assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), N as u64);
    assert!(groups
        .iter()
        .all(|g| g.kind == Some(FailureKind::Retryable)));
    // Healed while the broker is still down: one attempt each, dead again one round further.
    let healed_in_outage = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            outage_rows(ctx)
                .await
                .iter()
                .all(|r| r.retry_count > dead_letter && r.status != EventStatus::Success)
        },
    )
    .await;
    assert!(healed_in_outage, "{:?}", outage_rows(ctx).await);
    assert_eq!(
        count(db, EventStatus::Success).await,
        10,
        "nothing delivered while down"
    );

    // The broker returns; nobody retries anything by hand.
    assert!(cluster.script("start"), "broker restart");
    let outage = down.elapsed();
    let back = Instant::now();
    let first_delivery = std::sync::Mutex::new(None);
    let delivered = wait_until(
        Duration::from_secs(240),
        Duration::from_millis(100),
        || async {
            let success = count(db, EventStatus::Success).await;
            if success > 10 {
                first_delivery.lock().unwrap().get_or_insert(back.elapsed());
            }
            success == (N + 10) as u64
        },
    )
    .await;
    let first_delivery = first_delivery.into_inner().unwrap();
    let all_delivered = back.elapsed();
    // Read one by one: with completion by delete the delivered rows are in the log of
    // deletions (`tests/common/completion.rs`).
    let mut rows = Vec::new();
    for id in &outage_ids {
        rows.push(common::event(db, *id).await);
    }
    let (received, summaries) = clients.receive_and_stop(fleet, &ids).await;
    assert!(
        delivered,
        "not all delivered {all_delivered:?} after the broker's return: {} SUCCESS, {:?}",
        count(db, EventStatus::Success).await,
        summaries
    );
    received.assert_all_arrived(&ids);
    assert_eq!(count(db, EventStatus::Fail).await, 0, "no dead letter left");
    let healed: u64 = summaries.iter().map(|s| s.healed).sum();
    let dead_lettered: u64 = summaries.iter().map(|s| s.dead_lettered).sum();
    assert!(
        healed >= 2 * N as u64,
        "each healed twice at least: {summaries:?}"
    );
    let rounds = rows
        .iter()
        .map(|r| r.retry_count - dead_letter + 1)
        .max()
        .unwrap_or(0);
    eprintln!(
        "{:?}: {N} events dead letters {:.1} s into the outage (retry budget {:.1} s); broker \
         down {:.1} s; after its return the first healed event was delivered after {:.1} s and \
         all {N} after {:.1} s; {healed} healings, {dead_lettered} dead-letterings, at most \
         {rounds} rounds for one event (healing {:?} after a failure, doubling); the consumer \
         got {} messages for {} events ({} duplicates)",
        ctx.backend,
        dead_after.as_secs_f64(),
        RETRY.budget().as_secs_f64(),
        outage.as_secs_f64(),
        first_delivery.unwrap_or_default().as_secs_f64(),
        all_delivered.as_secs_f64(),
        heal().quiet,
        received.all.len(),
        ids.len(),
        received.duplicates()
    );
}
