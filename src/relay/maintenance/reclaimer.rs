//! The reclaimer: gives the events of dead or hung senders back to the relay.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::driver::{self, Reclaimed, RelayDb};
use crate::error::OutboxError;
use crate::relay::{Observer, Op, WorkerSummary};

/// Puts every expired lease (database clock) back to `WAIT` with `retry_count + 1`, or marks it
/// `FAIL` once its retries are used up (the driver's `reclaim_stuck`). The guards are checked
/// again on each row, so a lease renewed since the read is left alone.
#[derive(Debug, Clone)]
pub(crate) struct Reclaimer {
    db: RelayDb,
    /// A `SENDING` row whose `claimed_at` (database clock) is older than this is reclaimed.
    lease: Duration,
    /// Reclaims of an event past this many attempts make it a dead letter (`FAIL`).
    max_retries: u32,
    /// Expired leases per statement (default [`driver::RECLAIM_BATCH`]).
    pub(crate) batch_size: u64,
}

/// Between reclaim passes for `lease`: a tenth of it, at most 60 s.
pub(crate) fn interval(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(60))
}

impl Reclaimer {
    /// A reclaimer over the relay's connection `db`, with the worker's lease and retry limit.
    pub(crate) fn new(db: RelayDb, c: &WorkerConfig) -> Self {
        Reclaimer {
            db,
            lease: c.lease,
            max_retries: c.retry.max_retries,
            batch_size: driver::RECLAIM_BATCH,
        }
    }

    /// One pass: batches of `batch_size` expired leases until a batch comes back short; the
    /// batches done before a database error stay done.
    pub(crate) async fn run_once(&self) -> Result<Reclaimed, OutboxError> {
        Ok(driver::reclaim_stuck(&self.db, self.lease, self.max_retries, self.batch_size).await?)
    }

    /// Passes every [`interval`] of the lease (the first at once) until `cancel` fires.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        super::every(interval(self.lease), cancel, observer, move || async move {
            let mut s = WorkerSummary::default();
            match self.run_once().await {
                Ok(r) => observer.reclaimed(&mut s, &r, self.lease),
                Err(e) => {
                    let what = "outbox reclaim failed; retrying after the interval";
                    observer.error(&mut s, Op::Reclaim, &e, what);
                }
            }
            s
        })
        .await
    }
}
