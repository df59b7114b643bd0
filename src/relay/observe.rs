//! The one place that observes what the relay did: each outcome updates the summary, the metric
//! and the log together, so the three cannot drift.
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::driver::Reclaimed;
use crate::error::PublishError;
use crate::metrics as m;
use crate::relay::WorkerSummary;
use crate::retry::RetryDecision;
use sea_orm_outbox_entity::event_record::Model;

/// The step that met an error: the `op` label of `outbox_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Claiming events (a batch claim, a candidate read or one per-row claim).
    Claim,
    /// Recording an outcome (completion, retry, FAIL, hand-back).
    Record,
    /// Renewing the leases in flight.
    Renew,
    /// Reclaiming expired leases.
    Reclaim,
    /// Healing dead letters.
    Heal,
    /// Writing the worker's heartbeat.
    Heartbeat,
    /// Refreshing the gauges.
    Gauges,
    /// A send task that ended without an outcome (the runtime is shutting down).
    Send,
    /// Deleting delivered events past the retention period.
    Retention,
}

impl Op {
    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::Record => "record",
            Op::Renew => "renew",
            Op::Reclaim => "reclaim",
            Op::Heal => "heal",
            Op::Heartbeat => "heartbeat",
            Op::Gauges => "gauges",
            Op::Send => "send",
            Op::Retention => "retention",
        }
    }
}

/// Counts, metrics and logs of one worker. Each method takes the summary `s` it counts into (a
/// round's, or a service's pass); [`Observer::commit`] adds it to the worker's totals.
pub(crate) struct Observer {
    owner: String,
    totals: Mutex<WorkerSummary>,
    /// When the last configuration-fault ERROR line was written, and the faults since.
    config_faults: Mutex<(Option<Instant>, u64)>,
    /// Configuration faults since the last successful publish (for [`crate::Worker::health`]).
    faults_since_success: AtomicU64,
}

/// Shortest time between two ERROR lines about configuration faults of one worker (the ones in
/// between are logged at DEBUG and counted into the next line).
const CONFIG_FAULT_LOG_EVERY: Duration = Duration::from_secs(10);

impl Observer {
    pub(crate) fn new(owner: &str) -> Self {
        Observer {
            owner: owner.to_owned(),
            totals: Mutex::new(WorkerSummary::default()),
            config_faults: Mutex::new((None, 0)),
            faults_since_success: AtomicU64::new(0),
        }
    }

    /// Configuration faults ([`crate::PublishErrorKind::Configuration`]) since the worker's
    /// last successful publish (since its start before the first).
    pub(crate) fn faults_since_success(&self) -> u64 {
        self.faults_since_success.load(Ordering::Relaxed)
    }

    /// The worker's totals so far.
    pub(crate) fn totals(&self) -> WorkerSummary {
        *self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `s` to the totals and empties it.
    pub(crate) fn commit(&self, s: &mut WorkerSummary) {
        if *s != WorkerSummary::default() {
            let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
            totals.add(&std::mem::take(s));
        }
    }

    /// An error in step `op`; `what` says what is left undone.
    pub(crate) fn error(&self, s: &mut WorkerSummary, op: Op, e: &dyn Display, what: &str) {
        s.errors += 1;
        metrics::counter!(m::ERRORS, "op" => op.as_str()).increment(1);
        tracing::error!(owner = %self.owner, op = op.as_str(), error = %e, "{what}");
    }

    /// A per-row claim another instance won.
    pub(crate) fn claim_lost(&self, s: &mut WorkerSummary, event_id: i64) {
        s.claim_lost += 1;
        metrics::counter!(m::CLAIM_LOST).increment(1);
        tracing::debug!(event_id, owner = %self.owner, "claim lost to another instance; skipping");
    }

    /// `ids` completed in one statement that changed `applied` rows; the others' leases had
    /// been reclaimed meanwhile (late acks).
    pub(crate) fn published(&self, s: &mut WorkerSummary, ids: &[i64], applied: u64) {
        s.published += applied;
        if applied > 0 {
            self.faults_since_success.store(0, Ordering::Relaxed);
        }
        metrics::counter!(m::PUBLISHED).increment(applied);
        tracing::info!(owner = %self.owner, published = applied, event_ids = ?ids, "events published");
        let late = (ids.len() as u64).saturating_sub(applied);
        self.late_acks(s, late, "leases reclaimed during the send");
    }

    /// `n` outcomes (if any) not recorded because the lease was lost (`why`).
    pub(crate) fn late_acks(&self, s: &mut WorkerSummary, n: u64, why: &str) {
        if n > 0 {
            s.late_acks += n;
            metrics::counter!(m::LATE_ACKS).increment(n);
            tracing::warn!(owner = %self.owner, late = n, "{why}; outcome not recorded (late ack)");
        }
    }

    /// The failure `err` of `event`'s attempt `attempt`, recorded as `decision`.
    pub(crate) fn failed(
        &self,
        s: &mut WorkerSummary,
        event: &Model,
        attempt: i32,
        decision: RetryDecision,
        err: &PublishError,
    ) {
        let error = &err.message;
        match decision {
            RetryDecision::Retry(backoff) => {
                s.retried += 1;
                metrics::counter!(m::RETRIES).increment(1);
                // The event's id and biz_no are in the line itself, not only in its (INFO) span,
                // so that a WARN-level filter still says which event.
                tracing::warn!(event_id = event.id, biz_no = %event.biz_no, retry_count = attempt, backoff_ms = backoff.as_millis() as u64, %error, "send failed; will retry");
            }
            RetryDecision::Uncounted(delay) => self.config_fault(s, event, delay, error),
            RetryDecision::DeadLetter => {
                s.dead_lettered += 1;
                metrics::counter!(m::DEAD_LETTERS).increment(1);
                let permanent = !err.is_retryable();
                tracing::error!(event_id = event.id, biz_no = %event.biz_no, retry_count = attempt, permanent, %error, "event is a dead letter (FAIL); needs a person");
            }
        }
    }

    /// A send refused because of the publisher's own configuration or permissions, put back to
    /// `WAIT` uncounted, due again after `delay`. Logs ERROR at most once per
    /// [`CONFIG_FAULT_LOG_EVERY`] (with how many events met it since the last line), DEBUG
    /// otherwise.
    fn config_fault(&self, s: &mut WorkerSummary, event: &Model, delay: Duration, error: &str) {
        s.config_faults += 1;
        self.faults_since_success.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(m::CONFIG_FAULTS).increment(1);
        let since_last_line = {
            let mut log = self.config_faults.lock().unwrap_or_else(|p| p.into_inner());
            log.1 += 1;
            let due = log
                .0
                .is_none_or(|last| last.elapsed() >= CONFIG_FAULT_LOG_EVERY);
            due.then(|| std::mem::replace(&mut *log, (Some(Instant::now()), 0)).1)
        };
        match since_last_line {
            Some(events) => {
                tracing::error!(owner = %self.owner, events, event_id = event.id, delay_ms = delay.as_millis() as u64, %error,
                "the publisher is misconfigured (credentials or permissions): events stay WAIT, not counted as attempts, until it is fixed")
            }
            None => {
                tracing::debug!(event_id = event.id, biz_no = %event.biz_no, delay_ms = delay.as_millis() as u64, %error,
                "send refused by the publisher's configuration; back to WAIT uncounted")
            }
        }
    }

    /// `ids` of one claim handed back unsent (shutdown began) by a statement that changed `n`
    /// rows; the others' leases had been reclaimed meanwhile (late acks).
    pub(crate) fn released(&self, s: &mut WorkerSummary, ids: &[i64], n: u64) {
        s.released += n;
        metrics::counter!(m::RELEASED).increment(n);
        tracing::info!(owner = %self.owner, released = n, "claimed events handed back to WAIT unsent (shutdown)");
        let late = (ids.len() as u64).saturating_sub(n);
        self.late_acks(s, late, "leases reclaimed before the hand-back");
    }

    /// A reclaim pass's result (lease `lease`).
    pub(crate) fn reclaimed(&self, s: &mut WorkerSummary, r: &Reclaimed, lease: Duration) {
        s.reclaimed += r.total();
        s.dead_lettered += r.dead_lettered;
        if r.total() > 0 {
            metrics::counter!(m::RECLAIMED).increment(r.total());
            tracing::warn!(owner = %self.owner, reclaimed = r.total(), requeued = r.requeued, dead_lettered = r.dead_lettered,
                lease_ms = lease.as_millis() as u64, "reclaimed events whose sender died or hung mid-send");
        }
        if r.dead_lettered > 0 {
            metrics::counter!(m::DEAD_LETTERS).increment(r.dead_lettered);
            tracing::error!(owner = %self.owner, count = r.dead_lettered, "events failed by expired leases past the retry limit (FAIL)");
        }
    }

    /// A healing pass of `policy` that put `n` dead letters back to `WAIT`.
    pub(crate) fn healed(&self, s: &mut WorkerSummary, n: u64, policy: &crate::HealPolicy) {
        s.healed += n;
        if n > 0 {
            metrics::counter!(m::HEALED).increment(n);
            tracing::info!(owner = %self.owner, healed = n, quiet_ms = policy.quiet.as_millis() as u64, rounds = policy.rounds,
                "dead letters of transient failures healed: back to WAIT, due now");
        }
    }

    /// A lease renewal: `renewed` leases extended, `lost` found reclaimed by another instance.
    pub(crate) fn renewed(&self, renewed: u64, lost: &[i64]) {
        tracing::debug!(owner = %self.owner, renewed, "leases renewed");
        if !lost.is_empty() {
            tracing::warn!(owner = %self.owner, gone = ?lost, "lease lost (reclaimed by another instance); these events will not be marked");
        }
    }
}
