//! Idle latency: commit → publish, one event at a time, to workers that poll
//! (`idle_latency_p50_ms`, `idle_latency_p99_ms`) or wake on commit
//! (`idle_latency_wake_p50_ms`, `idle_latency_wake_p99_ms`: Postgres's `LISTEN`, the
//! process-local wake-up elsewhere; the writer and the workers share this process).
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::{DatabaseConnection, DbBackend, TransactionTrait};
use sea_orm_outbox::{CancellationToken, ClaimStrategy, NewEvent, OutboxExt, WorkerConfig};

use crate::figures::{f1, percentile, Figures};
use crate::relay::{start_workers, worker_config, CountingPublisher};
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::reset;
use crate::Args;

/// A small deterministic generator for the gaps between writes (so that writes do not fall
/// in step with the poll).
struct Lcg(u64);

impl Lcg {
    /// The next pseudo-random number (31 bits).
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Both idle-latency pairs: polling every `--idle-poll-ms`, then woken on commit with the poll
/// delay at its 5 s default (so that only the wake-up can explain a latency below it).
pub async fn figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    let idle_poll = Duration::from_millis(args.idle_poll_ms);
    let polling = format!(
        "{} Batch workers polling every {} ms (no wake-on-commit)",
        args.workers, args.idle_poll_ms
    );
    let skip_idle = args.skip_idle.then_some("--skip-idle");
    let mut run = IdleRun {
        figs,
        bench,
        setup,
        args,
    };
    run.figures("idle_latency", idle_poll, false, &polling, skip_idle)
        .await?;
    // Wake-on-commit: Postgres LISTEN/NOTIFY, the process-local wake-up elsewhere.
    let how = match bench.backend {
        DbBackend::Postgres => "LISTEN/NOTIFY",
        _ => "the process-local wake-up",
    };
    let waking = format!(
        "{} Batch workers woken on commit ({how}), poll delay 5 s",
        args.workers
    );
    let skip_wake = skip_idle;
    run.figures(
        "idle_latency_wake",
        sea_orm_outbox::WorkerConfig::default().poll_delay,
        true,
        &waking,
        skip_wake,
    )
    .await
}

/// What every idle-latency pair is measured with.
struct IdleRun<'a> {
    figs: &'a mut Figures,
    bench: &'a ScratchDb,
    setup: &'a DatabaseConnection,
    args: &'a Args,
}

impl IdleRun<'_> {
    /// `<prefix>_p50_ms` and `<prefix>_p99_ms` of [`idle_latency`] with Batch workers polling
    /// every `poll` (and waking on commit when `wake`), or both skipped with `skip`'s reason.
    async fn figures(
        &mut self,
        prefix: &str,
        poll: Duration,
        wake: bool,
        workers: &str,
        skip: Option<&str>,
    ) -> Result<(), BoxError> {
        let (p50, p99) = (format!("{prefix}_p50_ms"), format!("{prefix}_p99_ms"));
        if let Some(why) = skip {
            self.figs.skip(&p50, why);
            self.figs.skip(&p99, why);
            return Ok(());
        }
        let args = self.args;
        let config = worker_config(
            ClaimStrategy::Batch,
            args.batch,
            args.concurrency,
            poll,
            wake,
        );
        let l = idle_latency(self.bench, self.setup, args, config).await?;
        let note = format!(
            "{} events one at a time, {workers}; max {:.1} ms",
            l.len(),
            l.last().copied().unwrap_or(f64::NAN)
        );
        self.figs.add(&p50, f1(percentile(&l, 50.0)), note.clone());
        self.figs.add(&p99, f1(percentile(&l, 99.0)), note);
        Ok(())
    }
}

/// Commit → publish latencies (ms, sorted) of `--idle-events` events written one at a time,
/// a random gap of up to `--idle-poll-ms` apart, to idle workers of `config`.
async fn idle_latency(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    config: WorkerConfig,
) -> Result<Vec<f64>, BoxError> {
    reset(setup).await?;
    let publisher = Arc::new(CountingPublisher::default());
    let cancel = CancellationToken::new();
    let (_workers, handles) =
        start_workers(bench, args, &config, publisher.clone(), &cancel, "idle").await?;
    let writer = bench.pool(1).await?;
    // Let every worker finish its first (empty) round.
    tokio::time::sleep(config.poll_delay.min(Duration::from_millis(200))).await;
    let mut rng = Lcg(42);
    let mut latencies = Vec::with_capacity(args.idle_events);
    for i in 0..args.idle_events {
        let txn = writer.begin().await?;
        let id = txn
            .with_event(NewEvent::raw(
                format!("IDLE-{i}"),
                "ORDER_CREATED",
                format!("{{\"orderId\":{i}}}"),
            ))
            .await?;
        txn.commit().await?;
        let committed = Instant::now();
        let deadline = committed + Duration::from_secs(args.timeout_s.min(60));
        let published = loop {
            if let Some(at) = publisher.published_at(id) {
                break at;
            }
            if Instant::now() > deadline {
                return Err(format!("idle event {id} not published within the deadline").into());
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        latencies.push(published.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        // Next write after a random gap of up to `--idle-poll-ms`.
        let gap = rng.next() % (args.idle_poll_ms * 1000).max(1);
        tokio::time::sleep(Duration::from_micros(gap)).await;
    }
    cancel.cancel();
    for h in handles {
        h.await?;
    }
    writer.close().await?;
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(latencies)
}
