//! The relay: W workers (own pools) with a no-op counting publisher drain N `WAIT` events, per
//! claim strategy (`per_row_eps`, `batch_eps` and their duplicates and lost claims), and the
//! comparisons (`relay_over_limit`, `batch_over_per_row`, `duplicates`).
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sea_orm::{DatabaseConnection, DbBackend};
use sea_orm_outbox::RelayPool;

/// The fewest connections a relay pool may have (`RelayPool::Own`).
const MIN_RELAY_POOL_CONNECTIONS: u32 = 3;
use sea_orm_outbox::{
    CancellationToken, ClaimStrategy, OutboxMessage, PublishError, Publisher, Worker, WorkerConfig,
    WorkerSummary,
};

use crate::cpu::{CpuMark, CpuUse};
use crate::figures::{f1, f3, Figures};
use crate::scan::{pg_explain, ScanResult};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{fill_keyed, pg_batch_claim_sql, reset, status_counts};
use crate::{Args, CompletionArg};

/// The no-op publisher: counts, remembers the first publish instant of every id. With
/// `batching` it takes a claim's events in one `publish_batch` call, as `RocketMqPublisher`
/// does (the relay's default path: one send task per claim); without it one call per event.
#[derive(Default)]
pub struct CountingPublisher {
    total: AtomicU64,
    first: Mutex<HashMap<i64, Instant>>,
    batching: bool,
    /// Ordered phases: the largest id published so far per key, and how many first
    /// publications came after a larger id of their key (per-key order broken).
    order: Option<Mutex<HashMap<String, i64>>>,
    order_violations: AtomicU64,
}

impl CountingPublisher {
    /// A publisher that batches (`publish_batch`) when `batching`.
    pub fn new(batching: bool) -> Self {
        CountingPublisher {
            batching,
            ..Self::default()
        }
    }
    /// [`CountingPublisher::new`] that also checks per-key order
    /// ([`CountingPublisher::order_violations`]).
    pub fn checking_order(batching: bool) -> Self {
        CountingPublisher {
            batching,
            order: Some(Mutex::new(HashMap::new())),
            ..Self::default()
        }
    }
    /// First publications of an event after a larger id of its key (with
    /// [`CountingPublisher::checking_order`]; 0 otherwise).
    pub fn order_violations(&self) -> u64 {
        self.order_violations.load(Ordering::SeqCst)
    }
    /// Records the first publication of `m` in the per-key order check.
    fn check_order(&self, m: &OutboxMessage, first: bool) {
        let Some(order) = &self.order else { return };
        if !first {
            return;
        }
        let mut last = order.lock().unwrap_or_else(|p| p.into_inner());
        let top = last.entry(m.biz_no.clone()).or_insert(m.event_id);
        if *top > m.event_id {
            self.order_violations.fetch_add(1, Ordering::SeqCst);
        } else {
            *top = m.event_id;
        }
    }
    /// The first publish instant per id.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Instant>> {
        self.first.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Ids published at least once.
    fn distinct(&self) -> u64 {
        self.lock().len() as u64
    }
    /// Publications beyond the first per id.
    fn duplicates(&self) -> u64 {
        self.total.load(Ordering::SeqCst) - self.distinct()
    }
    /// When `id` was first published.
    pub fn published_at(&self, id: i64) -> Option<Instant> {
        self.lock().get(&id).copied()
    }
}

#[async_trait]
impl Publisher for CountingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let now = Instant::now();
        self.total.fetch_add(1, Ordering::SeqCst);
        let first = self.lock().insert(m.event_id, now).is_none();
        self.check_order(m, first);
        Ok(())
    }

    async fn publish_batch(&self, ms: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let now = Instant::now();
        self.total.fetch_add(ms.len() as u64, Ordering::SeqCst);
        let firsts: Vec<bool> = {
            let mut first = self.lock();
            ms.iter()
                .map(|m| match first.entry(m.event_id) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(now);
                        true
                    }
                    std::collections::hash_map::Entry::Occupied(_) => false,
                })
                .collect()
        };
        for (m, first) in ms.iter().zip(firsts) {
            self.check_order(m, first);
        }
        vec![Ok(()); ms.len()]
    }

    fn batches(&self) -> bool {
        self.batching
    }
}

/// What one relay phase measured.
pub struct RelayResult {
    eps: f64,
    secs: f64,
    total: WorkerSummary,
    duplicates: u64,
    cpu: CpuUse,
    /// Postgres, batch strategy: the claim statement EXPLAINed over the full backlog.
    claim_plan: Option<ScanResult>,
    /// First publications after a larger id of the same key (checked with `keys` only).
    pub order_violations: u64,
    /// The database server's CPU µs per event from the start until InnoDB's purge caught up
    /// after the drain (MySQL/MariaDB; elsewhere until the drain's end).
    pub server_us_settled: f64,
    /// Postgres: WAL bytes written per event during the drain.
    pub wal_bytes_per_event: Option<f64>,
}

impl RelayResult {
    /// Events per second.
    pub fn eps(&self) -> f64 {
        self.eps
    }
    /// Wall seconds of the drain.
    pub fn secs(&self) -> f64 {
        self.secs
    }
    /// The workers' summaries added up.
    pub fn total(&self) -> &WorkerSummary {
        &self.total
    }
    /// CPU of this process and of the database server during the drain.
    pub fn cpu(&self) -> &CpuUse {
        &self.cpu
    }
}

/// The workers' settings of a phase (drain on).
pub fn worker_config(
    strategy: ClaimStrategy,
    batch: u64,
    concurrency: usize,
    poll: Duration,
    wake: bool,
) -> WorkerConfig {
    WorkerConfig::default()
        .wake_on_commit(wake)
        .claim_strategy(strategy)
        .batch_size(batch)
        .send_concurrency(concurrency)
        .poll_delay(poll)
}

/// The workers of a phase and their running tasks.
pub type Running = (
    Vec<Arc<Worker>>,
    Vec<tokio::task::JoinHandle<WorkerSummary>>,
);

/// Starts `args.workers` workers with `config` (each with a pool of `--pool` connections and the
/// instance id `bench-<label>-<n>`) publishing to `publisher` until `cancel`.
pub async fn start_workers(
    bench: &ScratchDb,
    args: &Args,
    config: &WorkerConfig,
    publisher: Arc<dyn Publisher>,
    cancel: &CancellationToken,
    label: &str,
) -> Result<Running, BoxError> {
    let workers = build_workers(bench, args, config, publisher, label).await?;
    let handles = spawn_workers(&workers, cancel);
    Ok((workers, handles))
}

/// Creates `args.workers` workers with `config` (each with a pool of `--pool` connections and
/// the instance id `bench-<label>-<n>`) publishing to `publisher`, without starting them.
pub async fn build_workers(
    bench: &ScratchDb,
    args: &Args,
    config: &WorkerConfig,
    publisher: Arc<dyn Publisher>,
    label: &str,
) -> Result<Vec<Arc<Worker>>, BoxError> {
    let mut workers = Vec::new();
    for w in 0..args.workers {
        // The LISTEN connection of wake-on-commit comes on top of the pool's working ones.
        let extra = u32::from(config.wake_on_commit && bench.backend == DbBackend::Postgres);
        let db = bench.pool(args.pool + extra).await?;
        // The relay's own pool (guarded) of the same size, or the bench's pool itself.
        let pool = if args.shared_pool {
            RelayPool::Shared
        } else {
            RelayPool::Own {
                max_connections: (args.pool + extra).max(MIN_RELAY_POOL_CONNECTIONS),
            }
        };
        let worker = Arc::new(Worker::new(
            db,
            publisher.clone(),
            config
                .clone()
                .instance_id(format!("bench-{label}-{w}"))
                .relay_pool(pool),
        )?);
        workers.push(worker);
    }
    Ok(workers)
}

/// Opens the working connections of each worker's own pool (`--pool`, at least
/// [`MIN_RELAY_POOL_CONNECTIONS`], as `build_workers` sizes it; the relay opens them lazily),
/// so that a timed phase does not count their start-up: the in-database drain's connections
/// are opened before its clock starts too. Concurrent pings: each holds its connection until
/// it ends, so the pool opens one per ping.
pub async fn open_pools(workers: &[Arc<Worker>], args: &Args) -> Result<(), BoxError> {
    let n = if args.shared_pool {
        args.pool
    } else {
        args.pool.max(MIN_RELAY_POOL_CONNECTIONS)
    };
    for w in workers {
        futures::future::try_join_all((0..n).map(|_| w.db().ping())).await?;
    }
    Ok(())
}

/// Runs `workers` in tasks of their own until `cancel`.
pub fn spawn_workers(
    workers: &[Arc<Worker>],
    cancel: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<WorkerSummary>> {
    workers
        .iter()
        .map(|w| {
            let (w, cancel) = (w.clone(), cancel.clone());
            tokio::spawn(async move { w.run(cancel).await })
        })
        .collect()
}

/// Drains `events` WAIT rows (a key each, or spread over `keys` keys, then checking per-key
/// order) with the workers of `config`; checks that every one ended SUCCESS.
pub async fn relay(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    config: WorkerConfig,
    label: &str,
    events: u64,
    keys: Option<u64>,
) -> Result<RelayResult, BoxError> {
    reset(setup).await?;
    fill_keyed(setup, events, "WAIT", keys).await?;
    let claim_plan =
        if bench.backend == DbBackend::Postgres && config.claim_strategy == ClaimStrategy::Batch {
            let claim = pg_batch_claim_sql("bench-probe", config.batch_size);
            Some(pg_explain(setup, &claim).await?)
        } else {
            None
        };
    // The per-row phase is the seed's relay: one send per event.
    let batching = config.claim_strategy == ClaimStrategy::Batch && !args.noop_single;
    let publisher = Arc::new(if keys.is_some() {
        CountingPublisher::checking_order(batching)
    } else {
        CountingPublisher::new(batching)
    });
    let cancel = CancellationToken::new();
    // The workers and their pools' connections exist before the clock starts, as the
    // in-database drain's connections do; their start-up (schema check, reclaim pass, first
    // gauges, first claims) is timed.
    let config = config.completion(args.completion.into());
    let workers = build_workers(bench, args, &config, publisher.clone(), label).await?;
    open_pools(&workers, args).await?;
    let wal_before = crate::cpu::wal_bytes(setup).await;
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    let handles = spawn_workers(&workers, &cancel);
    let deadline = start + Duration::from_secs(args.timeout_s);
    let published = || workers.iter().map(|w| w.summary().published).sum::<u64>();
    while published() < events && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_drain = cpu.since(bench.backend);
    let wal_after = crate::cpu::wal_bytes(setup).await;
    cancel.cancel();
    let mut total = WorkerSummary::default();
    for h in handles {
        let s = h.await?;
        total.rounds += s.rounds;
        total.candidates += s.candidates;
        total.claimed += s.claimed;
        total.claim_lost += s.claim_lost;
        total.published += s.published;
        total.late_acks += s.late_acks;
        total.released += s.released;
        total.errors += s.errors;
    }
    for w in workers {
        w.db().clone().close().await.ok();
    }
    let settle = crate::cpu::settle_purge(setup).await;
    let server_us_settled = cpu.since(bench.backend).server_us_per_event(events);
    let counts = status_counts(setup).await?;
    let success = counts.get("SUCCESS").copied().unwrap_or(0);
    // With completion by delete a delivered event leaves no row.
    let (done, left) = match args.completion {
        CompletionArg::Update => (success, counts.values().sum::<i64>() - success),
        CompletionArg::Delete => (publisher.distinct() as i64, counts.values().sum::<i64>()),
    };
    if done != events as i64 || left != 0 || total.published != events {
        return Err(format!(
            "{label}: {done} of {events} events delivered after {secs:.1} s, {left} rows left \
             (statuses {counts:?}, summary {total:?})"
        )
        .into());
    }
    if settle > Duration::from_millis(100) {
        eprintln!(
            "{label}: InnoDB purge caught up {:.2} s after the drain",
            settle.as_secs_f64()
        );
    }
    Ok(RelayResult {
        eps: events as f64 / secs,
        secs,
        total,
        duplicates: publisher.duplicates(),
        cpu: cpu_drain,
        server_us_settled,
        wal_bytes_per_event: match (wal_before, wal_after) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / events as f64),
            _ => None,
        },
        claim_plan,
        order_violations: publisher.order_violations(),
    })
}

/// `<key>_eps`, `duplicates_<key>` and `claim_lost_per_event_<key>` of `strategy` (key
/// `per_row` or `batch`; Postgres batch also `batch_claim_ms`), or `<key>_eps` skipped with
/// `--skip-per-row` / `--skip-batch`.
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    strategy: ClaimStrategy,
) -> Result<Option<RelayResult>, BoxError> {
    let (key, label, skip, flag, batch, concurrency, kind) = match strategy {
        ClaimStrategy::PerRow => (
            "per_row",
            "per-row",
            args.skip_per_row,
            "--skip-per-row",
            args.per_row_batch,
            args.per_row_concurrency,
            "PerRow batch",
        ),
        _ => (
            "batch",
            "batch",
            args.skip_batch,
            "--skip-batch",
            args.batch,
            args.concurrency,
            "Batch",
        ),
    };
    if skip {
        figs.skip(&format!("{key}_eps"), flag);
        return Ok(None);
    }
    let poll = Duration::from_millis(args.poll_delay_ms);
    let config = worker_config(strategy, batch, concurrency, poll, false);
    let r = relay(bench, setup, args, config, label, args.events, None).await?;
    figs.add(
        &format!("{key}_eps"),
        f1(r.eps),
        format!(
            "{} workers, {kind} {batch}, concurrency {concurrency}, {}, drain, poll {} ms: {:.2} s, {} rounds; {}; µs/event: bench {:.1}, db server {:.1}",
            args.workers,
            if strategy == ClaimStrategy::Batch && !args.noop_single { "batch sends" } else { "one publish call per event" },
            args.poll_delay_ms,
            r.secs,
            r.total.rounds,
            r.cpu,
            r.cpu.us_per_event(r.secs, args.events).0,
            r.cpu.us_per_event(r.secs, args.events).1
        ),
    );
    if let Some(p) = &r.claim_plan {
        figs.add(
            "batch_claim_ms",
            f3(p.median_ms),
            format!(
                "library claim statement over the full backlog (rolled back), median of 20: {}, {} buffers",
                p.plan,
                p.buffers.unwrap_or(0)
            ),
        );
    }
    if key == "batch" {
        figs.add(
            "relay_server_us_per_event",
            f1(r.server_us_settled),
            format!(
                "database server CPU per delivered event (/proc), completion {}, from the start \
                 until InnoDB's purge caught up (MySQL/MariaDB) or the drain's end",
                args.completion.as_str()
            ),
        );
        match r.wal_bytes_per_event {
            Some(b) => figs.add(
                "relay_wal_bytes_per_event",
                f1(b),
                format!(
                    "pg_stat_wal.wal_bytes during the drain / events, completion {}",
                    args.completion.as_str()
                ),
            ),
            None => figs.skip("relay_wal_bytes_per_event", "Postgres only"),
        }
    }
    figs.add(
        &format!("duplicates_{key}"),
        r.duplicates,
        "publications beyond the first per event id",
    );
    figs.add(
        &format!("claim_lost_per_event_{key}"),
        f3(r.total.claim_lost as f64 / args.events as f64),
        format!(
            "{} claims lost, {} won, {} errors",
            r.total.claim_lost, r.total.claimed, r.total.errors
        ),
    );
    Ok(Some(r))
}

/// `relay_over_limit`, `relay_over_best_limit`, `batch_over_per_row` and `duplicates` (both
/// strategies); returns the duplicates.
pub fn comparison_figures(
    figs: &mut Figures,
    limit: Option<f64>,
    best_limit: Option<f64>,
    per_row: Option<&RelayResult>,
    batch: Option<&RelayResult>,
) -> u64 {
    match (batch, limit) {
        (Some(b), Some(l)) => figs.add(
            "relay_over_limit",
            f3(b.eps / l),
            "batch_eps / db_limit_eps",
        ),
        _ => figs.skip("relay_over_limit", "needs batch and db_limit"),
    }
    match (batch, best_limit) {
        (Some(b), Some(l)) => figs.add(
            "relay_over_best_limit",
            f3(b.eps / l),
            "batch_eps / db_limit_best_eps (goal >= 0.8, Postgres)",
        ),
        _ => figs.skip("relay_over_best_limit", "needs batch and db_limit_best"),
    }
    match (batch, per_row) {
        (Some(b), Some(p)) => figs.add(
            "batch_over_per_row",
            f1(b.eps / p.eps),
            "batch_eps / per_row_eps",
        ),
        _ => figs.skip("batch_over_per_row", "needs batch and per_row"),
    }
    let dups = per_row.map_or(0, |r| r.duplicates) + batch.map_or(0, |r| r.duplicates);
    figs.add("duplicates", dups, "both strategies");
    dups
}
