//! Through the real broker (issue 14; run when `ROCKETMQ_NAMESRV_ADDR` is set):
//! - `rocketmq_raw_eps`: the crate's publisher alone (no database) sending the relay's messages
//!   (same body, keys, tag, properties) with the relay's concurrency (workers × concurrency
//!   sends in flight), one message per send;
//! - `rocketmq_raw_batch_eps`: the same messages as RocketMQ batch messages of `--batch`
//!   events, one batch in flight per worker;
//! - `rocketmq_relay_eps`: W workers draining N `WAIT` events through `RocketMqPublisher`, until
//!   every row is `SUCCESS`; a consumer counts what arrived (`rocketmq_received`,
//!   `rocketmq_duplicates`);
//! - `relay_over_raw`, `relay_over_raw_batch`;
//! - with `--rocketmq-scaling`: `rocketmq_relay_eps_w<W>` for W = 1, 2, 4, 8.
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use sea_orm_outbox::publisher::RocketMqConsumer;
use sea_orm_outbox::{
    CancellationToken, ClaimStrategy, OutboxMessage, PublishError, Publisher, RocketMqConfig,
    RocketMqPublisher,
};

use crate::figures::{f1, f3, Figures};
use crate::relay::{start_workers, worker_config};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{fill, reset, status_counts};
use crate::Args;

/// The figures of this phase, in the order printed.
const NAMES: [&str; 5] = [
    "rocketmq_raw_eps",
    "rocketmq_raw_batch_eps",
    "rocketmq_relay_eps",
    "relay_over_raw",
    "relay_over_raw_batch",
];

/// The message the relay sends for bench row `id` (see `setup::fill`).
fn message(id: i64) -> OutboxMessage {
    OutboxMessage::new(
        id,
        format!("BENCH-{id}"),
        "ORDER_CREATED",
        format!(r#"{{"orderId":{id},"amountCents":1234}}"#),
    )
}

/// A unique topic or group name.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// A started publisher on `topic`.
async fn publisher(addr: &str, topic: &str) -> Result<Arc<RocketMqPublisher>, BoxError> {
    let config = RocketMqConfig::new(addr)
        .topic(topic)
        .producer_group(unique("outbox_bench_pg"));
    Ok(Arc::new(RocketMqPublisher::start(config).await?))
}

/// Stops a shared publisher once it is no longer shared.
async fn shutdown(p: Arc<RocketMqPublisher>) {
    if let Ok(p) = Arc::try_unwrap(p) {
        p.shutdown().await;
    }
}

/// `n` messages from `tasks` tasks, each sending `per_send` events per call (1: `publish`, more:
/// `publish_batch`); events per second.
async fn raw(
    p: &Arc<RocketMqPublisher>,
    n: u64,
    tasks: usize,
    per_send: u64,
) -> Result<f64, BoxError> {
    let next = Arc::new(AtomicU64::new(1));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (p, next) = (p.clone(), next.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(per_send, Ordering::SeqCst);
                if first > n {
                    return Ok::<(), PublishError>(());
                }
                let last = (first + per_send - 1).min(n);
                let batch: Vec<_> = (first..=last).map(|i| message(i as i64)).collect();
                if per_send == 1 {
                    p.publish(&batch[0]).await?;
                } else {
                    p.publish_batch(&batch).await?;
                }
            }
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// What one relay run through the broker measured.
struct RelayRun {
    eps: f64,
    secs: f64,
    received: usize,
    duplicates: usize,
}

/// `workers` workers drain `n` WAIT rows through `p` (topic `topic`, read by `consumer`).
async fn relay(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    workers: usize,
    p: &Arc<RocketMqPublisher>,
    consumer: &RocketMqConsumer,
    n: u64,
) -> Result<RelayRun, BoxError> {
    reset(setup).await?;
    fill(setup, n, "WAIT").await?;
    let mut args = args.clone();
    args.workers = workers;
    let poll = Duration::from_millis(args.poll_delay_ms);
    let config = worker_config(
        ClaimStrategy::Batch,
        args.batch,
        args.concurrency,
        poll,
        false,
    );
    let cancel = CancellationToken::new();
    let deadline = Duration::from_secs(args.timeout_s);
    let start = Instant::now();
    let (ws, handles) = start_workers(
        bench,
        &args,
        &config,
        p.clone() as Arc<dyn Publisher>,
        &cancel,
        &format!("rmq{workers}"),
    )
    .await?;
    let drain = async {
        let published = || ws.iter().map(|w| w.summary().published).sum::<u64>();
        while published() < n && start.elapsed() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        start.elapsed().as_secs_f64()
    };
    // Received while the relay drains, then 2 s more for late duplicates.
    let receive = consumer.collect_until(deadline, |got| {
        got.iter()
            .filter_map(|m| m.event_id)
            .collect::<HashSet<_>>()
            .len() as u64
            >= n
    });
    let (secs, mut got) = tokio::join!(drain, receive);
    got.extend(
        consumer
            .collect_until(Duration::from_secs(2), |_| false)
            .await,
    );
    cancel.cancel();
    for h in handles {
        h.await?;
    }
    for w in ws {
        w.db().clone().close().await.ok();
    }
    let counts = status_counts(setup).await?;
    let success = counts.get("SUCCESS").copied().unwrap_or(0);
    if success != n as i64 {
        return Err(format!(
            "rocketmq relay W={workers}: {success} of {n} SUCCESS after {secs:.1} s ({counts:?})"
        )
        .into());
    }
    let distinct: HashSet<i64> = got.iter().filter_map(|m| m.event_id).collect();
    Ok(RelayRun {
        eps: n as f64 / secs,
        secs,
        received: distinct.len(),
        duplicates: got.len() - distinct.len(),
    })
}

/// The phase's figures (`rocketmq_duplicates`: what the consumer got twice over every relay run).
///
/// # Errors
/// A database, broker or client error, or an event that never reached the consumer.
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    let Some(addr) = std::env::var("ROCKETMQ_NAMESRV_ADDR")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        for name in NAMES {
            figs.skip(name, "ROCKETMQ_NAMESRV_ADDR unset");
        }
        return Ok(());
    };
    let n = args.rocketmq_events;
    let in_flight = args.workers * args.concurrency;

    // Raw: a topic of its own, created (and its route known) by a first send.
    let raw_topic = unique("OUTBOX_BENCH_RAW");
    let p = publisher(&addr, &raw_topic).await?;
    p.publish(&message(0)).await?;
    let raw_eps = raw(&p, n, in_flight, 1).await?;
    figs.add(
        "rocketmq_raw_eps",
        f1(raw_eps),
        format!("{n} sends of one message, {in_flight} in flight, no database"),
    );
    let raw_batch_eps = raw(&p, n, args.workers, args.batch).await?;
    figs.add(
        "rocketmq_raw_batch_eps",
        f1(raw_batch_eps),
        format!(
            "{n} messages in batches of {}, {} batches in flight, no database",
            args.batch, args.workers
        ),
    );
    shutdown(p).await;

    // The relay: the consumer first (it creates the topic on every broker master).
    let topic = unique("OUTBOX_BENCH_RELAY");
    let consumer = RocketMqConsumer::start(&addr, &unique("outbox_bench_cg"), &topic).await?;
    let p = publisher(&addr, &topic).await?;
    let r = relay(bench, setup, args, args.workers, &p, &consumer, n).await?;
    figs.add(
        "rocketmq_relay_eps",
        f1(r.eps),
        format!(
            "{} workers, Batch {}, concurrency {}, one message per send: {n} events in {:.2} s; \
             received {}, duplicates {}",
            args.workers, args.batch, args.concurrency, r.secs, r.received, r.duplicates
        ),
    );
    figs.add(
        "relay_over_raw",
        f3(r.eps / raw_eps),
        "rocketmq_relay_eps / rocketmq_raw_eps",
    );
    figs.add(
        "relay_over_raw_batch",
        f3(r.eps / raw_batch_eps),
        "rocketmq_relay_eps / rocketmq_raw_batch_eps",
    );
    let mut duplicates = r.duplicates;
    let mut lost = (n as usize).saturating_sub(r.received);
    if args.rocketmq_scaling {
        for w in [1, 2, 4, 8] {
            let topic = unique("OUTBOX_BENCH_SCALE");
            let consumer =
                RocketMqConsumer::start(&addr, &unique("outbox_bench_cg"), &topic).await?;
            let p = publisher(&addr, &topic).await?;
            let r = relay(bench, setup, args, w, &p, &consumer, n).await?;
            figs.add(
                &format!("rocketmq_relay_eps_w{w}"),
                f1(r.eps),
                format!(
                    "{w} workers: {n} events in {:.2} s; received {}, duplicates {}",
                    r.secs, r.received, r.duplicates
                ),
            );
            duplicates += r.duplicates;
            lost += (n as usize).saturating_sub(r.received);
            consumer.shutdown().await;
            shutdown(p).await;
        }
    }
    consumer.shutdown().await;
    shutdown(p).await;
    figs.add(
        "rocketmq_duplicates",
        duplicates,
        "messages the consumer received more than once, all relay runs (at-least-once: a send \
         answered late or refused as busy after the broker stored it is sent again)",
    );
    if lost > 0 {
        return Err(format!("{lost} events never reached the consumer").into());
    }
    Ok(())
}
