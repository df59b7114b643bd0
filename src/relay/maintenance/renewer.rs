//! The lease renewer: keeps the leases of a worker's events alive from claim until their
//! outcome is recorded.
use std::collections::HashSet;
use std::time::Duration;

use crate::config::WorkerConfig;
use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::relay::{Inflight, Observer, Op, WorkerSummary};

/// Default leases renewed per statement.
const DEFAULT_RENEW_BATCH: u64 = 1000;

/// How often the [`LeaseRenewer`] renews, and when it gives up on a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRenewerConfig {
    /// Between renewals (a worker's: a third of its lease).
    pub(crate) interval: Duration,
    /// A send running longer than this is hung and no longer renewed, so that its lease
    /// expires and another instance takes over (a worker's: its send timeout + `interval`).
    pub(crate) hung_after: Duration,
    /// Leases per statement (default [`DEFAULT_RENEW_BATCH`]).
    pub(crate) batch_size: u64,
}

impl LeaseRenewerConfig {
    /// The worker's settings: renew every lease/3, give up on a send at send timeout + lease/3.
    pub(crate) fn for_worker(c: &WorkerConfig) -> Self {
        let interval = c.lease / 3;
        LeaseRenewerConfig {
            interval,
            hung_after: c.send_timeout + interval,
            batch_size: DEFAULT_RENEW_BATCH,
        }
    }
}

/// What one renewal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// Leases extended.
    pub(crate) renewed: u64,
    /// Events whose lease another instance had reclaimed: their outcome must not be recorded.
    pub(crate) lost: Vec<i64>,
}

/// Renews leases (database clock), each statement guarded by the claim's whole `claim_owner`
/// value, fencing token included.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRenewer {
    db: RelayDb,
    config: LeaseRenewerConfig,
}

impl LeaseRenewer {
    /// A lease renewer over the relay's connection `db`.
    pub(crate) fn on(db: RelayDb, config: LeaseRenewerConfig) -> Self {
        LeaseRenewer { db, config }
    }

    /// Renews the leases of `ids`, claimed under `claim_owner` (the `claim_owner` value the
    /// claim wrote), in batches of `batch_size`; where a batch renews fewer rows than it names,
    /// reads which ids are still held by that claim and reports the others lost.
    ///
    /// # Errors
    /// [`OutboxError::InvalidArgument`] when `claim_owner` is empty or longer than the
    /// `claim_owner` column (128 characters); a database error (batches done before it stay
    /// done).
    pub(crate) async fn run_once(
        &self,
        claim_owner: &str,
        ids: &[i64],
    ) -> Result<Renewal, OutboxError> {
        let max = sea_orm_outbox_entity::event_record::CLAIM_OWNER_MAX_LEN;
        if claim_owner.trim().is_empty() || claim_owner.chars().count() > max {
            return Err(OutboxError::InvalidArgument(format!(
                "claim_owner must be 1 to {max} characters"
            )));
        }
        let mut r = Renewal::default();
        let chunk = usize::try_from(self.config.batch_size).unwrap_or(usize::MAX);
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
    /// `inflight`. Errors are logged and counted, and the loop goes on.
    pub(crate) async fn run(&self, inflight: &Inflight, observer: &Observer) {
        let mut s = WorkerSummary::default();
        loop {
            tokio::time::sleep(self.config.interval).await;
            for claim in inflight.renewable(self.config.hung_after) {
                match self.run_once(&claim.owner, &claim.ids).await {
                    Ok(r) => {
                        let lost = inflight.lose(&claim.owner, &r.lost);
                        observer.renewed(r.renewed, &lost);
                    }
                    Err(e) => {
                        observer.error(&mut s, Op::Renew, &e, "lease renewal failed; retrying");
                        observer.commit(&mut s);
                    }
                }
            }
        }
    }
}
