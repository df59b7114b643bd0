//! The reclaimer: gives the events of dead or hung senders back to the relay.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::driver::{self, Reclaimed, RelayDb};
use crate::error::OutboxError;
use crate::relay::{Observer, Op, WorkerSummary};

/// What the [`Reclaimer`] does and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReclaimerConfig {
    /// A `SENDING` row whose `claimed_at` (database clock) is older than this is reclaimed.
    pub(crate) lease: Duration,
    /// Reclaims of an event past this many attempts make it a dead letter (`FAIL`).
    pub(crate) max_retries: u32,
    /// Between passes (default a tenth of the lease, at most 60 s).
    pub(crate) interval: Duration,
    /// Expired leases per statement (default [`driver::RECLAIM_BATCH`]); a pass goes on until a
    /// batch comes back short.
    pub(crate) batch_size: u64,
}

impl ReclaimerConfig {
    /// Reclaims leases older than `lease`, dead-lettering past `max_retries`, every tenth of the
    /// lease (at most every [`crate::config::MAX_RECLAIM_INTERVAL`]) with the default batch size.
    pub(crate) fn new(lease: Duration, max_retries: u32) -> Self {
        ReclaimerConfig {
            lease,
            max_retries,
            interval: crate::config::reclaim_interval(lease),
            batch_size: driver::RECLAIM_BATCH,
        }
    }

    /// The worker's settings: its lease and retry limit.
    pub(crate) fn for_worker(c: &WorkerConfig) -> Self {
        Self::new(c.lease, c.retry.max_retries)
    }
}

/// Puts every expired lease (database clock) back to `WAIT` with `retry_count + 1`, or marks it
/// `FAIL` once its retries are used up (the driver's `reclaim_stuck`). The guards are checked
/// again on each row, so a lease renewed since the read is left alone.
#[derive(Debug, Clone)]
pub(crate) struct Reclaimer {
    db: RelayDb,
    config: ReclaimerConfig,
}

impl Reclaimer {
    /// A reclaimer over the relay's connection `db`.
    pub(crate) fn on(db: RelayDb, config: ReclaimerConfig) -> Self {
        Reclaimer { db, config }
    }

    /// One pass: batches of at most `batch_size` expired leases until a batch comes back short
    /// (a million expired leases after an outage are a thousand short statements).
    ///
    /// # Errors
    /// A database error (batches done before it stay done).
    pub(crate) async fn run_once(&self) -> Result<Reclaimed, OutboxError> {
        let c = &self.config;
        Ok(driver::reclaim_stuck(&self.db, c.lease, c.max_retries, c.batch_size).await?)
    }

    /// Passes every `interval` (the first at once) until `cancel` fires; errors are logged and
    /// counted, and the loop goes on.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        let mut s = WorkerSummary::default();
        while !cancel.is_cancelled() {
            match self.run_once().await {
                Ok(r) => observer.reclaimed(&mut s, &r, self.config.lease),
                Err(e) => observer.error(
                    &mut s,
                    Op::Reclaim,
                    &e,
                    "outbox reclaim failed; retrying after the interval",
                ),
            }
            observer.commit(&mut s);
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}
