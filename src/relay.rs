//! The relay: a worker that claims due events, publishes them and records the outcome.
//!
//! Many instances run a worker over the same table at once. No lock is held across broker I/O:
//! each event is claimed with one conditional `UPDATE` ([`store::claim`]); the instance whose
//! `UPDATE` affected one row holds the lease, the others skip it. Every later transition is
//! guarded by the owner, so an instance whose lease was reclaimed cannot overwrite the new
//! owner's outcome. Delivery is at-least-once.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::event_record::Model;
use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::WorkerConfig;
use crate::error::{OutboxError, PublishError};
use crate::instance::instance_id;
use crate::publisher::{OutboxMessage, Publisher};
use crate::retry::RetryDecision;
use crate::store::{self, Claim, Transition};

/// What a worker did: per round from [`Worker::run_once`], in total from [`Worker::run`] and
/// [`Worker::summary`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Rounds run.
    pub rounds: u64,
    /// Candidates read (due `WAIT` rows, before claiming).
    pub candidates: u64,
    /// Claims won.
    pub claimed: u64,
    /// Claims lost to another instance (normal under contention).
    pub claim_lost: u64,
    /// Events published and marked `SUCCESS`.
    pub published: u64,
    /// Failed sends put back to `WAIT` with back-off.
    pub retried: u64,
    /// Events marked `FAIL` (dead letters).
    pub dead_lettered: u64,
    /// Outcomes not recorded because the lease had been reclaimed meanwhile (late acks).
    pub late_acks: u64,
    /// Leases reclaimed by this worker's reclaim passes.
    pub reclaimed: u64,
    /// Database errors met (the worker logs them and goes on).
    pub errors: u64,
}

impl WorkerSummary {
    fn add(&mut self, o: &WorkerSummary) {
        self.rounds += o.rounds;
        self.candidates += o.candidates;
        self.claimed += o.claimed;
        self.claim_lost += o.claim_lost;
        self.published += o.published;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.late_acks += o.late_acks;
        self.reclaimed += o.reclaimed;
        self.errors += o.errors;
    }
}

/// A relay instance. Run one per service instance (or several, each with its own id); they
/// coordinate through the table alone.
///
/// ```no_run
/// # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::sync::Arc;
/// use sea_orm_outbox::{LoggingPublisher, Worker, WorkerConfig};
/// use tokio_util::sync::CancellationToken;
///
/// let worker = Worker::new(db, Arc::new(LoggingPublisher), WorkerConfig::default().service_name("order"))?;
/// let cancel = CancellationToken::new();
/// let handle = tokio::spawn({ let cancel = cancel.clone(); async move { worker.run(cancel).await } });
/// // ... on shutdown:
/// cancel.cancel();
/// let summary = handle.await.expect("worker task");
/// # let _ = summary; Ok(()) }
/// ```
pub struct Worker {
    db: DatabaseConnection,
    publisher: Arc<dyn Publisher>,
    config: WorkerConfig,
    owner: String,
    totals: Mutex<WorkerSummary>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker over `db` sending through `publisher`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `config` fails [`WorkerConfig::validate`].
    pub fn new(
        db: DatabaseConnection,
        publisher: Arc<dyn Publisher>,
        config: WorkerConfig,
    ) -> Result<Self, OutboxError> {
        config.validate()?;
        let owner = config
            .instance_id
            .clone()
            .unwrap_or_else(|| instance_id(&config.service_name, None));
        Ok(Worker {
            db,
            publisher,
            config,
            owner,
            totals: Mutex::new(WorkerSummary::default()),
        })
    }

    /// The instance id this worker writes into `claim_owner`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The configuration in force.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Totals so far.
    pub fn summary(&self) -> WorkerSummary {
        *self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, delta: &WorkerSummary) {
        self.totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(delta);
    }

    /// Runs rounds and reclaim passes until `cancel` fires, then returns the totals.
    ///
    /// Rounds are separated by a fixed delay (`poll_delay` after a round ends, not a fixed
    /// rate). A reclaim pass runs at start and every `reclaim_interval`. Errors are logged and
    /// counted; the loop goes on (a database restart is survived). On cancellation no new event
    /// is claimed, the send in flight finishes (bounded by the send timeout) and is recorded.
    pub async fn run(&self, cancel: CancellationToken) -> WorkerSummary {
        let span = tracing::info_span!("outbox_worker", owner = %self.owner);
        let rounds = async {
            while !cancel.is_cancelled() {
                if let Err(e) = self.run_once(&cancel).await {
                    self.record(&WorkerSummary {
                        errors: 1,
                        ..Default::default()
                    });
                    tracing::error!(error = %e, "outbox round failed; retrying after the poll delay");
                }
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(self.config.poll_delay) => {}
                }
            }
        };
        let reclaims = async {
            while !cancel.is_cancelled() {
                if let Err(e) = self.reclaim_once().await {
                    self.record(&WorkerSummary {
                        errors: 1,
                        ..Default::default()
                    });
                    tracing::error!(error = %e, "outbox reclaim failed; retrying after the interval");
                }
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(self.config.reclaim_interval) => {}
                }
            }
        };
        tokio::join!(rounds, reclaims);
        let total = self.summary();
        tracing::info!(parent: &span, ?total, "outbox worker stopped");
        total
    }

    /// One round: read up to `batch_size` due candidates, then claim, publish and record each in
    /// turn. One event's failure never stops the others. Stops claiming when `cancel` fires.
    ///
    /// # Errors
    /// Only when the candidates cannot be read; errors on single events are logged and counted
    /// in the returned summary.
    pub async fn run_once(&self, cancel: &CancellationToken) -> Result<WorkerSummary, OutboxError> {
        let mut round = WorkerSummary {
            rounds: 1,
            ..Default::default()
        };
        let result = async {
            let candidates = store::select_candidates(&self.db, self.config.batch_size).await?;
            round.candidates = candidates.len() as u64;
            for event in &candidates {
                if cancel.is_cancelled() {
                    break;
                }
                let span = tracing::info_span!(
                    "outbox_event",
                    event_id = event.id,
                    biz_no = %event.biz_no,
                    owner = %self.owner
                );
                if let Err(e) = self
                    .process(event, &mut round)
                    .instrument(span.clone())
                    .await
                {
                    round.errors += 1;
                    tracing::error!(parent: &span, error = %e, "outbox event left for the reclaim");
                }
            }
            Ok::<_, OutboxError>(())
        }
        .instrument(tracing::debug_span!("outbox_round", owner = %self.owner))
        .await;
        self.record(&round);
        result.map(|()| round)
    }

    /// Claims, publishes and records one candidate.
    async fn process(&self, event: &Model, round: &mut WorkerSummary) -> Result<(), OutboxError> {
        match store::claim(&self.db, event.id, event.retry_count, &self.owner).await? {
            Claim::Lost => {
                round.claim_lost += 1;
                tracing::debug!("claim lost to another instance; skipping");
                return Ok(());
            }
            Claim::Won => round.claimed += 1,
        }
        let message = OutboxMessage::from(event);
        let outcome =
            match tokio::time::timeout(self.config.send_timeout, self.publisher.publish(&message))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(PublishError::retryable(format!(
                    "send timed out after {} ms",
                    self.config.send_timeout.as_millis()
                ))),
            };
        let transition = match outcome {
            Ok(()) => {
                let t = store::mark_success(&self.db, event.id, &self.owner).await?;
                if t == Transition::Applied {
                    round.published += 1;
                    tracing::info!(event_type = %event.event_type, "event published");
                }
                t
            }
            Err(err) => self.record_failure(event, &err, round).await?,
        };
        if transition == Transition::LeaseLost {
            round.late_acks += 1;
            tracing::warn!("lease was reclaimed during the send; outcome not recorded (late ack)");
        }
        Ok(())
    }

    /// Puts a failed event back with back-off, or marks it a dead letter.
    async fn record_failure(
        &self,
        event: &Model,
        err: &PublishError,
        round: &mut WorkerSummary,
    ) -> Result<Transition, OutboxError> {
        let n = event.retry_count.saturating_add(1);
        let decision = if err.is_retryable() {
            self.config
                .retry
                .decide(u32::try_from(n).unwrap_or(u32::MAX))
        } else {
            RetryDecision::DeadLetter
        };
        let t = match decision {
            RetryDecision::Retry(backoff) => {
                let t = store::release_for_retry(
                    &self.db,
                    event.id,
                    &self.owner,
                    n,
                    backoff,
                    &err.message,
                )
                .await?;
                if t == Transition::Applied {
                    round.retried += 1;
                    tracing::warn!(retry_count = n, backoff_ms = backoff.as_millis() as u64, error = %err.message, "send failed; will retry");
                }
                t
            }
            RetryDecision::DeadLetter => {
                let t = store::mark_fail(&self.db, event.id, &self.owner, n, &err.message).await?;
                if t == Transition::Applied {
                    round.dead_lettered += 1;
                    tracing::error!(retry_count = n, permanent = !err.is_retryable(), error = %err.message, "event is a dead letter (FAIL); needs a person");
                }
                t
            }
        };
        Ok(t)
    }

    /// One reclaim pass: every `SENDING` row whose lease (`claimed_at`, database clock) is older
    /// than `lease` goes back to `WAIT`. Logs the count at WARN when there was any.
    ///
    /// # Errors
    /// A database error.
    pub async fn reclaim_once(&self) -> Result<u64, OutboxError> {
        let n = store::reclaim_stuck(&self.db, self.config.lease).await?;
        if n > 0 {
            tracing::warn!(owner = %self.owner, reclaimed = n, lease_ms = self.config.lease.as_millis() as u64,
                "reclaimed events whose sender died or hung mid-send");
        }
        self.record(&WorkerSummary {
            reclaimed: n,
            ..Default::default()
        });
        Ok(n)
    }

    /// The pool this worker uses.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }
}

/// Polls `check` every `every` until it returns true or `deadline` passes; returns whether it
/// did. Handy in tests and demos that wait for the outbox to drain.
pub async fn wait_until<F, Fut>(deadline: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}
