//! [`WorkerSummary`]: the counts a worker keeps of what it did.

/// What a worker did: per round from [`crate::Worker::run_once`], in total from
/// [`crate::Worker::run`] and [`crate::Worker::summary`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerSummary {
    /// Claim rounds completed (one claim statement, or one per-row claim pass, each, that did
    /// not fail).
    pub rounds: u64,
    /// Candidates read (per-row claiming) or rows claimed (batch claiming).
    pub candidates: u64,
    /// Claims won.
    pub claimed: u64,
    /// Claims lost to another instance (normal under contention).
    pub claim_lost: u64,
    /// Events published and completed (deleted, or marked `SUCCESS`).
    pub published: u64,
    /// Failed sends put back to `WAIT` with back-off.
    pub retried: u64,
    /// Events marked `FAIL` by this worker's sends or reclaims (dead letters).
    pub dead_lettered: u64,
    /// Outcomes not recorded because the lease had been lost meanwhile (late acks).
    pub late_acks: u64,
    /// Expired leases handled by this worker's reclaim passes (to `WAIT` or `FAIL`).
    pub reclaimed: u64,
    /// Claimed events handed back unsent at shutdown.
    pub released: u64,
    /// Dead letters this worker's healing passes put back to `WAIT`
    /// ([`crate::WorkerConfig::heal_dead_letters`]).
    pub healed: u64,
    /// Sends refused because of the publisher's own configuration or permissions
    /// ([`crate::PublishErrorKind::Configuration`]): put back to `WAIT` without counting the
    /// attempt.
    pub config_faults: u64,
    /// Database errors met by claims, outcome records, lease renewals, reclaims, healing passes
    /// and gauge refreshes (the worker logs them, exports them as `outbox_errors_total{op}` and goes on).
    pub errors: u64,
}

impl WorkerSummary {
    /// Adds `o`'s counts to these.
    pub(crate) fn add(&mut self, o: &WorkerSummary) {
        self.rounds += o.rounds;
        self.candidates += o.candidates;
        self.claimed += o.claimed;
        self.claim_lost += o.claim_lost;
        self.published += o.published;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.late_acks += o.late_acks;
        self.reclaimed += o.reclaimed;
        self.released += o.released;
        self.healed += o.healed;
        self.config_faults += o.config_faults;
        self.errors += o.errors;
    }
}
