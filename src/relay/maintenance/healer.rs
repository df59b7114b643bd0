//! The healer: puts dead letters of transient failures back to `WAIT` round by round
//! ([`crate::HealPolicy`]).
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::driver::{self, RelayDb};
use crate::error::OutboxError;
use crate::relay::{Observer, Op, WorkerSummary};
use crate::retry::HealPolicy;

/// Heals the dead letters whose round is due (the driver's `heal_dead_letters`): one guarded
/// statement per batch of rows, so that of several instances one heals each row per round.
#[derive(Debug, Clone)]
pub(crate) struct Healer {
    db: RelayDb,
    policy: HealPolicy,
    /// The worker's retry limit: a dead letter of used-up retries has `retry_count` one above.
    max_retries: u32,
    /// Dead letters per statement (default [`driver::RECLAIM_BATCH`]).
    pub(crate) batch_size: u64,
}

/// Between healing passes for `policy`: a quarter of its quiet period, 50 ms to 60 s.
pub(crate) fn interval(policy: &HealPolicy) -> Duration {
    (policy.quiet / 4).clamp(Duration::from_millis(50), Duration::from_secs(60))
}

impl Healer {
    /// The healer of a worker configured with `c` over the relay's connection `db`; `None`
    /// when `c` heals no dead letter.
    pub(crate) fn new(db: RelayDb, c: &WorkerConfig) -> Option<Self> {
        let policy = c.heal_dead_letters?;
        Some(Healer {
            db,
            policy,
            max_retries: c.retry.max_retries,
            batch_size: driver::RECLAIM_BATCH,
        })
    }

    /// The policy it heals by.
    pub(crate) fn policy(&self) -> HealPolicy {
        self.policy
    }

    /// One pass: batches of `batch_size` due dead letters until a batch comes back short;
    /// returns how many were healed (the batches done before a database error stay done).
    pub(crate) async fn run_once(&self) -> Result<u64, OutboxError> {
        let (db, policy) = (&self.db, &self.policy);
        Ok(driver::heal_dead_letters(db, self.max_retries, policy, self.batch_size).await?)
    }

    /// Passes every [`interval`] of the policy (the first at once) until `cancel` fires.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        super::every(
            interval(&self.policy),
            cancel,
            observer,
            move || async move {
                let mut s = WorkerSummary::default();
                match self.run_once().await {
                    Ok(n) => observer.healed(&mut s, n, &self.policy),
                    Err(e) => {
                        let what = "healing dead letters failed; retrying after the interval";
                        observer.error(&mut s, Op::Heal, &e, what);
                    }
                }
                s
            },
        )
        .await
    }
}
