//! The lease renewer: keeps the leases of a worker's events alive from claim until their
//! outcome is recorded.
use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::relay::{Inflight, Observer, Op, WorkerSummary};

/// What one renewal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// Leases extended.
    pub(crate) renewed: u64,
    /// Events whose lease another instance had reclaimed: their outcome must not be recorded.
    pub(crate) lost: Vec<i64>,
}

/// Leases renewed per statement.
const RENEW_BATCH: u64 = 1000;

/// Renews leases (database clock), each statement guarded by the claim's whole `claim_owner`
/// value, fencing token included.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRenewer {
    db: RelayDb,
    /// Between renewals: a third of the lease.
    interval: Duration,
    /// A send running longer than this (the send timeout + `interval`) is hung and no longer
    /// renewed, so that its lease expires and another instance takes over.
    hung_after: Duration,
    /// Leases per statement (default [`RENEW_BATCH`]).
    pub(crate) batch_size: u64,
}

impl LeaseRenewer {
    /// A lease renewer over the relay's connection `db`, for a worker configured with `c`.
    pub(crate) fn new(db: RelayDb, c: &WorkerConfig) -> Self {
        let interval = c.lease / crate::config::RENEWALS_PER_LEASE;
        LeaseRenewer {
            db,
            interval,
            hung_after: c.send_timeout + interval,
            batch_size: RENEW_BATCH,
        }
    }

    /// Renews the leases of `ids` claimed under `claim_owner`, in batches of `batch_size`; where
    /// a batch renews fewer rows than it names, reads which ids that claim still holds and
    /// reports the others lost. The batches done before a database error stay done.
    pub(crate) async fn run_once(
        &self,
        claim_owner: &str,
        ids: &[i64],
    ) -> Result<Renewal, OutboxError> {
        let mut r = Renewal::default();
        let chunk = usize::try_from(self.batch_size).unwrap_or(usize::MAX);
        for ids in ids.chunks(chunk.max(1)) {
            let n = self.db.run(|d| d.renew_leases(ids, claim_owner)).await?;
            r.renewed += n;
            if n < ids.len() as u64 {
                let still: HashSet<i64> = self
                    .db
                    .query_ids(|d| d.owned_ids(ids, claim_owner))
                    .await?
                    .into_iter()
                    .collect();
                r.lost.extend(ids.iter().filter(|id| !still.contains(id)));
            }
        }
        Ok(r)
    }

    /// Renews what `inflight` holds every `interval` until dropped; lost leases are marked in
    /// `inflight`.
    pub(crate) async fn run(&self, inflight: &Inflight, observer: &Observer) {
        let never = CancellationToken::new();
        super::every(self.interval, &never, observer, move || async move {
            let mut s = WorkerSummary::default();
            for (owner, ids) in inflight.renewable(self.hung_after) {
                match self.run_once(&owner, &ids).await {
                    Ok(r) => observer.renewed(r.renewed, &inflight.lose(&owner, &r.lost)),
                    Err(e) => {
                        let what = "lease renewal failed; retrying";
                        observer.error(&mut s, Op::Renew, &e, what);
                    }
                }
            }
            s
        })
        .await
    }
}
