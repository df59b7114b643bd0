//! Through the real broker (run when `ROCKETMQ_NAMESRV_ADDR` is set):
//! - `rocketmq_raw_eps`: the crate's publisher alone (no database) sending the relay's messages
//!   (same body, keys, tag, properties) with the relay's one-message concurrency (workers ×
//!   concurrency sends in flight), one message per send;
//! - `rocketmq_raw_batch_eps`: the same messages through `publish_batch` in batches of
//!   `--batch` events, workers × `--rocketmq-batch-concurrency` batches in flight (what the
//!   relay's batch sends keep in flight);
//! - `rocketmq_relay_eps`: W workers with batch sends (the default) draining N `WAIT` events
//!   through `RocketMqPublisher`, until every row is `SUCCESS`; a consumer counts what arrived
//!   (`rocketmq_received`, `rocketmq_duplicates`);
//! - `rocketmq_relay_single_eps`: the same with a publisher that does not batch (one message per send,
//!   `--concurrency` sends in flight per worker), and `batch_over_single`;
//! - `relay_over_raw`, `relay_over_raw_batch`;
//! - `rocketmq_latency_p50_ms` / `_p99_ms`: commit → received by the consumer for events
//!   written one at a time (Postgres waking on commit, poll delay 5 s; other backends polling
//!   every `--idle-poll-ms`);
//! - with `--rocketmq-scaling`: `rocketmq_relay_eps_w<W>` for W = 1, 2, 4, 8 (batch sends).
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use sea_orm_outbox::{CancellationToken, ClaimStrategy, OutboxMessage, PublishError, Publisher};
use sea_orm_outbox_rocketmq::RocketMqConsumer;
use sea_orm_outbox_rocketmq::{RocketMqConfig, RocketMqPublisher};

use crate::cpu::{CpuMark, CpuUse};
use crate::figures::{f1, f3, percentile, Figures};
use crate::relay::{build_workers, open_pools, spawn_workers, start_workers, worker_config};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{fill, reset, status_counts};
use crate::Args;

/// The figures of this phase, in the order printed.
const NAMES: [&str; 12] = [
    "rocketmq_raw_eps",
    "rocketmq_raw_batch_eps",
    "rocketmq_relay_eps",
    "relay_over_raw",
    "relay_over_raw_batch",
    "rocketmq_relay_single_eps",
    "batch_over_single",
    "rocketmq_noop_relay_eps",
    "relay_over_noop",
    "rocketmq_latency_p50_ms",
    "rocketmq_latency_p99_ms",
    "rocketmq_duplicates",
];

/// The message the relay sends for bench row `id` (see `setup::fill`).
pub(crate) fn message(id: i64) -> OutboxMessage {
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
pub(crate) async fn raw(
    p: &Arc<dyn Publisher>,
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
                    for sent in p.publish_batch(&batch).await {
                        sent?;
                    }
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
pub(crate) struct RelayRun {
    pub(crate) eps: f64,
    pub(crate) secs: f64,
    received: usize,
    duplicates: usize,
    /// Publish calls and the time spent in them (summed over the calls, which overlap).
    calls: u64,
    in_calls: Duration,
    cpu: CpuUse,
}

impl RelayRun {
    /// Where the time went: publish calls, their mean duration, and the CPU split.
    pub(crate) fn profile(&self) -> String {
        let mean = if self.calls == 0 {
            0.0
        } else {
            self.in_calls.as_secs_f64() * 1000.0 / self.calls as f64
        };
        format!(
            "{} publish calls, mean {mean:.2} ms, {:.2} s in calls; {}",
            self.calls,
            self.in_calls.as_secs_f64(),
            self.cpu
        )
    }
}

/// Delegates to a publisher, counting its calls and the time spent in them.
struct Timed {
    inner: Arc<dyn Publisher>,
    calls: AtomicU64,
    micros: AtomicU64,
}

impl Timed {
    fn new(inner: Arc<dyn Publisher>) -> Arc<Self> {
        Arc::new(Timed {
            inner,
            calls: AtomicU64::new(0),
            micros: AtomicU64::new(0),
        })
    }
    fn count(&self, started: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Publisher for Timed {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let t = Instant::now();
        let r = self.inner.publish(m).await;
        self.count(t);
        r
    }
    async fn publish_batch(&self, m: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let t = Instant::now();
        let r = self.inner.publish_batch(m).await;
        self.count(t);
        r
    }
    fn batches(&self) -> bool {
        self.inner.batches()
    }
}

/// A publisher that sends nothing and batches: the relay's database side alone, with the same
/// calls as through the broker.
struct NoopBatches;

#[async_trait::async_trait]
impl Publisher for NoopBatches {
    async fn publish(&self, _: &OutboxMessage) -> Result<(), PublishError> {
        Ok(())
    }
    async fn publish_batch(&self, m: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        vec![Ok(()); m.len()]
    }
    fn batches(&self) -> bool {
        true
    }
}

/// The publisher it wraps, one message per `publish` call: it does not batch.
struct OneByOne(Arc<dyn Publisher>);

#[async_trait::async_trait]
impl Publisher for OneByOne {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        self.0.publish(m).await
    }
}

/// How the relay sends in a run.
#[derive(Clone, Copy)]
pub(crate) enum Sends {
    /// Batch sends (the default), `--rocketmq-batch-concurrency` batches in flight per worker.
    Batches,
    /// One message per send, `--concurrency` in flight per worker.
    Single,
}

/// `workers` workers drain `n` WAIT rows through `p` (topic `topic`, read by `consumer`).
pub(crate) async fn relay(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    workers: usize,
    sends: Sends,
    (p, consumer): (Arc<dyn Publisher>, Option<&RocketMqConsumer>),
    n: u64,
) -> Result<RelayRun, BoxError> {
    reset(setup).await?;
    fill(setup, n, "WAIT").await?;
    let mut args = args.clone();
    args.workers = workers;
    let poll = Duration::from_millis(args.poll_delay_ms);
    let concurrency = match sends {
        Sends::Batches => args.rocketmq_batch_concurrency,
        Sends::Single => args.concurrency,
    };
    let config = worker_config(ClaimStrategy::Batch, args.batch, concurrency, poll, false)
        .completion(args.completion.into());
    let p: Arc<dyn Publisher> = match sends {
        Sends::Batches => p,
        Sends::Single => Arc::new(OneByOne(p)),
    };
    let cancel = CancellationToken::new();
    let deadline = Duration::from_secs(args.timeout_s);
    let timed = Timed::new(p);
    // The workers and their pools' connections exist before the clock starts, as in the
    // no-op relay phases and the in-database drain; their start-up is timed.
    let ws = build_workers(
        bench,
        &args,
        &config,
        timed.clone() as Arc<dyn Publisher>,
        &format!("rmq{workers}"),
    )
    .await?;
    open_pools(&ws, &args).await?;
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    let handles = spawn_workers(&ws, &cancel);
    let drain = async {
        let published = || ws.iter().map(|w| w.summary().published).sum::<u64>();
        while published() < n && start.elapsed() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        start.elapsed().as_secs_f64()
    };
    // Received while the relay drains, then 2 s more for late duplicates.
    let receive = async {
        let Some(consumer) = consumer else {
            return Vec::new();
        };
        let mut got = consumer
            .collect_until(deadline, |got| {
                got.iter()
                    .filter_map(|m| m.event_id)
                    .collect::<HashSet<_>>()
                    .len() as u64
                    >= n
            })
            .await;
        got.extend(
            consumer
                .collect_until(Duration::from_secs(2), |_| false)
                .await,
        );
        got
    };
    let drained = async {
        let secs = drain.await;
        (secs, cpu.since(bench.backend))
    };
    let ((secs, cpu), got) = tokio::join!(drained, receive);
    cancel.cancel();
    for h in handles {
        h.await?;
    }
    for w in ws {
        w.db().clone().close().await.ok();
    }
    // Every event delivered: none left to send, and (with completion by update) every row
    // SUCCESS; with completion by delete a delivered event leaves no row.
    let counts = status_counts(setup).await?;
    let success = counts.get("SUCCESS").copied().unwrap_or(0);
    let left: i64 = counts
        .iter()
        .filter(|(s, _)| *s != "SUCCESS")
        .map(|(_, c)| c)
        .sum();
    let kept = match args.completion {
        crate::CompletionArg::Update => n as i64,
        crate::CompletionArg::Delete => 0,
    };
    if left != 0 || success != kept {
        return Err(format!(
            "relay W={workers} through the broker: {left} of {n} not delivered after {secs:.1} s \
             ({counts:?})"
        )
        .into());
    }
    let distinct: HashSet<i64> = got.iter().filter_map(|m| m.event_id).collect();
    Ok(RelayRun {
        eps: n as f64 / secs,
        secs,
        received: if consumer.is_some() {
            distinct.len()
        } else {
            n as usize
        },
        duplicates: got.len() - distinct.len(),
        calls: timed.calls.load(Ordering::Relaxed),
        in_calls: Duration::from_micros(timed.micros.load(Ordering::Relaxed)),
        cpu,
    })
}

/// Commit → received latencies (ms, sorted) of `--rocketmq-latency-events` events written one
/// at a time through `with_event`, a pseudo-random gap of up to `--idle-poll-ms` apart, to 3
/// idle workers sending through `p`; received = when `consumer`'s poll returned it.
async fn latency(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    (p, consumer): (&Arc<RocketMqPublisher>, &RocketMqConsumer),
) -> Result<(Vec<f64>, String), BoxError> {
    reset(setup).await?;
    let postgres = bench.backend == sea_orm::DbBackend::Postgres;
    let (poll, how) = if postgres {
        (
            sea_orm_outbox::WorkerConfig::default().poll_delay,
            "waking on commit, poll delay 5 s".to_owned(),
        )
    } else {
        let poll = Duration::from_millis(args.idle_poll_ms);
        (poll, format!("polling every {} ms", args.idle_poll_ms))
    };
    let config = worker_config(
        ClaimStrategy::Batch,
        args.batch,
        args.rocketmq_batch_concurrency,
        poll,
        postgres,
    );
    let cancel = CancellationToken::new();
    let (ws, handles) = start_workers(
        bench,
        args,
        &config,
        p.clone() as Arc<dyn Publisher>,
        &cancel,
        "rmqlat",
    )
    .await?;
    let writer = bench.pool(1).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut seed: u64 = 42;
    let mut latencies = Vec::with_capacity(args.rocketmq_latency_events);
    for i in 0..args.rocketmq_latency_events {
        let txn = sea_orm::TransactionTrait::begin(&writer).await?;
        let id = sea_orm_outbox::OutboxExt::with_event(
            &txn,
            sea_orm_outbox::NewEvent::raw(
                format!("LAT-{i}"),
                "ORDER_CREATED",
                format!("{{\"orderId\":{i}}}"),
            ),
        )
        .await?;
        txn.commit().await?;
        let committed = Instant::now();
        let deadline = committed + Duration::from_secs(30);
        'wait: loop {
            for m in consumer.poll(Duration::from_millis(50)).await {
                if m.event_id == Some(id) {
                    latencies.push(committed.elapsed().as_secs_f64() * 1000.0);
                    break 'wait;
                }
            }
            if Instant::now() > deadline {
                return Err(format!("latency event {id} not received within 30 s").into());
            }
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let gap = (seed >> 33) % (args.idle_poll_ms * 1000).max(1);
        tokio::time::sleep(Duration::from_micros(gap)).await;
    }
    cancel.cancel();
    for h in handles {
        h.await?;
    }
    for w in ws {
        w.db().clone().close().await.ok();
    }
    writer.close().await?;
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok((latencies, how))
}

/// A consumer (first: it creates the topic on every broker master) and a publisher on a topic
/// of their own.
async fn clients(
    addr: &str,
    prefix: &str,
) -> Result<(Arc<RocketMqPublisher>, RocketMqConsumer), BoxError> {
    let topic = unique(prefix);
    let consumer = RocketMqConsumer::start(addr, &unique("outbox_bench_cg"), &topic).await?;
    let p = publisher(addr, &topic).await?;
    Ok((p, consumer))
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
    let batches_in_flight = args.workers * args.rocketmq_batch_concurrency;

    // Raw: a topic of its own, created (and its route known) by a first send.
    let raw_topic = unique("OUTBOX_BENCH_RAW");
    let p = publisher(&addr, &raw_topic).await?;
    p.publish(&message(0)).await?;
    let dynamic: Arc<dyn Publisher> = p.clone();
    let raw_eps = raw(&dynamic, n, in_flight, 1).await?;
    figs.add(
        "rocketmq_raw_eps",
        f1(raw_eps),
        format!("{n} sends of one message, {in_flight} in flight, no database"),
    );
    let raw_batch_eps = raw(&dynamic, n, batches_in_flight, args.batch).await?;
    drop(dynamic);
    figs.add(
        "rocketmq_raw_batch_eps",
        f1(raw_batch_eps),
        format!(
            "{n} messages through publish_batch in batches of {}, {batches_in_flight} batches in \
             flight, no database",
            args.batch
        ),
    );
    shutdown(p).await;

    let mut duplicates = 0;
    let mut lost = 0;
    let mut tally = |r: &RelayRun| {
        duplicates += r.duplicates;
        lost += (n as usize).saturating_sub(r.received);
    };
    let (p, consumer) = clients(&addr, "OUTBOX_BENCH_RELAY").await?;
    let r = relay(
        bench,
        setup,
        args,
        args.workers,
        Sends::Batches,
        (p.clone() as Arc<dyn Publisher>, Some(&consumer)),
        n,
    )
    .await?;
    tally(&r);
    figs.add(
        "rocketmq_relay_eps",
        f1(r.eps),
        format!(
            "{} workers, Batch {}, batch sends, {} batches in flight per worker: {n} events in \
             {:.2} s; received {}, duplicates {}; {}",
            args.workers,
            args.batch,
            args.rocketmq_batch_concurrency,
            r.secs,
            r.received,
            r.duplicates,
            r.profile()
        ),
    );
    figs.add(
        "relay_over_raw",
        f3(r.eps / raw_eps),
        "rocketmq_relay_eps / rocketmq_raw_eps (goal >= 2)",
    );
    figs.add(
        "relay_over_raw_batch",
        f3(r.eps / raw_batch_eps),
        "rocketmq_relay_eps / rocketmq_raw_batch_eps (goal >= 0.8)",
    );
    consumer.shutdown().await;
    shutdown(p).await;

    let (p, consumer) = clients(&addr, "OUTBOX_BENCH_SINGLE").await?;
    let single = relay(
        bench,
        setup,
        args,
        args.workers,
        Sends::Single,
        (p.clone() as Arc<dyn Publisher>, Some(&consumer)),
        n,
    )
    .await?;
    tally(&single);
    figs.add(
        "rocketmq_relay_single_eps",
        f1(single.eps),
        format!(
            "the same without batches: one message per send, {} in flight per worker; \
             {n} events in {:.2} s; received {}, duplicates {}; {}",
            args.concurrency,
            single.secs,
            single.received,
            single.duplicates,
            single.profile()
        ),
    );
    figs.add(
        "batch_over_single",
        f3(r.eps / single.eps),
        "rocketmq_relay_eps / rocketmq_relay_single_eps",
    );
    consumer.shutdown().await;
    shutdown(p).await;

    // The same relay with a publisher that sends nothing: the database side's share.
    let nothing = Arc::new(NoopBatches) as Arc<dyn Publisher>;
    let noop = relay(
        bench,
        setup,
        args,
        args.workers,
        Sends::Batches,
        (nothing, None),
        n,
    )
    .await?;
    figs.add(
        "rocketmq_noop_relay_eps",
        f1(noop.eps),
        format!(
            "the rocketmq_relay_eps run with a publisher that sends nothing (batches): the \
             database side alone; {n} events in {:.2} s; {}",
            noop.secs,
            noop.profile()
        ),
    );
    figs.add(
        "relay_over_noop",
        f3(r.eps / noop.eps),
        "rocketmq_relay_eps / rocketmq_noop_relay_eps: how much of the database side's pace the \
         broker leaves",
    );

    let (p, consumer) = clients(&addr, "OUTBOX_BENCH_LATENCY").await?;
    let (l, how) = latency(bench, setup, args, (&p, &consumer)).await?;
    let note = format!(
        "{} events one at a time, 3 workers {how}, commit -> consumer; max {:.1} ms",
        l.len(),
        l.last().copied().unwrap_or(f64::NAN)
    );
    figs.add(
        "rocketmq_latency_p50_ms",
        f1(percentile(&l, 50.0)),
        note.clone(),
    );
    figs.add("rocketmq_latency_p99_ms", f1(percentile(&l, 99.0)), note);
    consumer.shutdown().await;
    shutdown(p).await;

    if args.rocketmq_scaling {
        for w in [1, 2, 4, 8] {
            let (p, consumer) = clients(&addr, "OUTBOX_BENCH_SCALE").await?;
            let r = relay(
                bench,
                setup,
                args,
                w,
                Sends::Batches,
                (p.clone() as Arc<dyn Publisher>, Some(&consumer)),
                n,
            )
            .await?;
            tally(&r);
            figs.add(
                &format!("rocketmq_relay_eps_w{w}"),
                f1(r.eps),
                format!(
                    "{w} workers, batch sends: {n} events in {:.2} s; received {}, duplicates {}; {}",
                    r.secs, r.received, r.duplicates, r.profile()
                ),
            );
            consumer.shutdown().await;
            shutdown(p).await;
        }
    }
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
