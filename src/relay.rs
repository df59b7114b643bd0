//! The relay: a worker that claims due events, publishes them and records the outcome.
//!
//! Many instances run a worker over the same table at once. No lock is held across broker I/O:
//! events are claimed by conditional `UPDATE`s (`claim` or `claim_batch`);
//! the instance whose update took a row holds its lease, the others skip it. Every later
//! transition is guarded by the owner, so an instance whose lease was reclaimed cannot
//! overwrite the new owner's outcome. Delivery is at-least-once.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use sea_orm::DatabaseConnection;
use sea_orm_outbox_entity::event_record::Model;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{ClaimStrategy, WorkerConfig};
use crate::error::{OutboxError, PublishError};
use crate::instance::instance_id;
use crate::metrics as m;
use crate::publisher::{OutboxMessage, Publisher};
use crate::retry::RetryDecision;
use crate::store::{self, Claim, Transition};
use crate::wake::Wake;

/// What a worker did: per round from [`Worker::run_once`], in total from [`Worker::run`] and
/// [`Worker::summary`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerSummary {
    /// Rounds run.
    pub rounds: u64,
    /// Candidates read (per-row claiming) or rows claimed (batch claiming).
    pub candidates: u64,
    /// Claims won.
    pub claimed: u64,
    /// Claims lost to another instance (normal under contention).
    pub claim_lost: u64,
    /// Events published and marked `SUCCESS`.
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
        self.released += o.released;
        self.errors += o.errors;
    }
}

/// What became of one send.
enum Sent {
    Ok,
    Failed(PublishError),
    /// Not attempted: shutdown began, or the lease was lost before the send started.
    Skipped,
}

/// Where each event of a round is, shared between the sends and the lease renewal.
#[derive(Clone)]
struct Inflight(Arc<Mutex<HashMap<i64, Phase>>>);

#[derive(Clone, Copy)]
enum Phase {
    /// Claimed at this instant, send not started.
    Queued(Instant),
    /// Claimed, send started at this instant.
    Sending(Instant, Instant),
    /// The lease was found reclaimed: do not send, do not mark.
    Lost(Instant),
}

impl Inflight {
    fn new(ids: impl Iterator<Item = i64>) -> Self {
        let now = Instant::now();
        Inflight(Arc::new(Mutex::new(
            ids.map(|id| (id, Phase::Queued(now))).collect(),
        )))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Phase>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the send of `id` started; false when its lease is already lost, or when (with
    /// `deadline`, i.e. without lease renewal) the claim is so old that the send could outlive
    /// the lease: such an event is handed back unsent rather than sent twice.
    fn start(&self, id: i64, deadline: Option<Duration>) -> bool {
        let mut map = self.lock();
        match map.get(&id).copied() {
            Some(Phase::Queued(claimed)) if deadline.is_some_and(|d| claimed.elapsed() > d) => {
                false
            }
            Some(Phase::Queued(claimed)) => {
                map.insert(id, Phase::Sending(claimed, Instant::now()));
                true
            }
            _ => false,
        }
    }

    fn is_lost(&self, id: i64) -> bool {
        matches!(self.lock().get(&id), Some(Phase::Lost(_)))
    }

    /// Stops tracking `id` (its outcome is being recorded) and returns its claim-to-now time.
    /// A lost event stays tracked as lost so that `is_lost` still answers.
    fn finish(&self, id: i64) -> Duration {
        let mut map = self.lock();
        match map.get(&id).copied() {
            Some(Phase::Lost(claimed)) => claimed.elapsed(),
            Some(Phase::Queued(claimed)) | Some(Phase::Sending(claimed, _)) => {
                map.remove(&id);
                claimed.elapsed()
            }
            None => Duration::ZERO,
        }
    }

    /// Ids whose lease should be renewed now: queued, or sending for less than `hung_after`.
    fn renewable(&self, hung_after: Duration) -> Vec<i64> {
        self.lock()
            .iter()
            .filter_map(|(id, phase)| match phase {
                Phase::Queued(_) => Some(*id),
                Phase::Sending(_, started) if started.elapsed() < hung_after => Some(*id),
                _ => None,
            })
            .collect()
    }

    fn lose(&self, ids: &[i64]) {
        let mut map = self.lock();
        for id in ids {
            if let Some(Phase::Queued(c) | Phase::Sending(c, _)) = map.get(id).copied() {
                map.insert(*id, Phase::Lost(c));
            }
        }
    }
}

/// Longest a delivered event waits for others before the group is marked `SUCCESS`.
const MARK_LINGER: Duration = Duration::from_millis(20);

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A relay instance. Run one per service instance (or several, each with its own id); they
/// coordinate through the table alone. A pool of 4 connections is enough for one worker (a
/// round, the lease renewal, the reclaim pass and the gauge refresh each use one at a time), 5
/// on Postgres with wake-on-commit (the `LISTEN` connection holds one); fewer only makes them
/// wait for each other.
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
    /// [`OutboxError::InvalidConfig`] when `config` fails [`WorkerConfig::validate`], or when
    /// `db` is a backend whose feature this crate was built without (`postgres`, `mysql`,
    /// `sqlite`): the relay would run without that backend's wake-up and error handling.
    pub fn new(
        db: DatabaseConnection,
        publisher: Arc<dyn Publisher>,
        config: WorkerConfig,
    ) -> Result<Self, OutboxError> {
        config.validate()?;
        crate::store::dialect::check_backend_feature(db.get_database_backend())?;
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

    /// The pool this worker uses.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
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
    /// rate); with `drain` on, a round that found a full batch is followed at once. A reclaim
    /// pass runs at start and every `reclaim_interval`. Errors are logged and counted; the loop
    /// goes on (a database restart is survived). On cancellation no new send starts, sends in
    /// flight finish (bounded by the send timeout) and are recorded, and claimed events not yet
    /// sent go back to `WAIT` at once.
    pub async fn run(&self, cancel: CancellationToken) -> WorkerSummary {
        let span = tracing::info_span!("outbox_worker", owner = %self.owner);
        let mut wake = Wake::new(&self.db, self.config.wake_on_commit).await;
        let rounds = async {
            while !cancel.is_cancelled() {
                let full = match self.run_once(&cancel).await {
                    Ok(round) => round.candidates >= self.config.batch_size,
                    Err(e) => {
                        self.record(&WorkerSummary {
                            errors: 1,
                            ..Default::default()
                        });
                        tracing::error!(error = %e, "outbox round failed; retrying after the poll delay");
                        false
                    }
                };
                if full && self.config.drain {
                    continue;
                }
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    woken = wake.wait(self.config.poll_delay) => {
                        tracing::trace!(?woken, "next round");
                    }
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
        let gauges = async {
            let Some(every) = self.config.gauge_interval else {
                return;
            };
            while !cancel.is_cancelled() {
                match crate::ops::backlog(&self.db).await {
                    Ok(b) => m::backlog(&b),
                    Err(e) => tracing::warn!(error = %e, "backlog gauges not refreshed"),
                }
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        };
        async { tokio::join!(rounds, reclaims, gauges) }
            .instrument(span.clone())
            .await;
        let total = self.summary();
        tracing::info!(parent: &span, ?total, "outbox worker stopped");
        total
    }

    /// One round: claim up to `batch_size` due events (per the claim strategy), publish them
    /// (up to `send_concurrency` at once, each within the send timeout, leases renewed while
    /// sends are in flight), then record every outcome with owner-guarded statements. One
    /// event's failure never stops the others. When `cancel` fires, no new claim or send starts.
    ///
    /// # Errors
    /// Only when nothing could be claimed because of the database; errors on single events are
    /// logged and counted in the returned summary (the event is left to the reclaim).
    pub async fn run_once(&self, cancel: &CancellationToken) -> Result<WorkerSummary, OutboxError> {
        let mut round = WorkerSummary {
            rounds: 1,
            ..Default::default()
        };
        let result = self
            .round(cancel, &mut round)
            .instrument(tracing::debug_span!("outbox_round", owner = %self.owner))
            .await;
        self.record(&round);
        result.map(|()| round)
    }

    async fn round(
        &self,
        cancel: &CancellationToken,
        round: &mut WorkerSummary,
    ) -> Result<(), OutboxError> {
        let claimed = self.claim(cancel, round).await?;
        if claimed.is_empty() {
            return Ok(());
        }
        let inflight = Inflight::new(claimed.iter().map(|e| e.id));
        let _renewal = self
            .config
            .lease_renewal
            .then(|| self.spawn_renewal(inflight.clone()));

        // Outcomes are recorded as they become ready: whatever sends have finished together are
        // marked in one statement, so a slow send never holds back the others' marks.
        let concurrency = self.config.send_concurrency;
        // Without renewal a queued event's lease runs from its claim: start its send only while
        // the send timeout still fits in the lease.
        let start_by = (!self.config.lease_renewal)
            .then(|| self.config.lease.saturating_sub(self.config.send_timeout));
        let mut outcomes = futures::stream::iter(claimed)
            .map(|event| {
                let inflight = inflight.clone();
                let span = tracing::info_span!("outbox_event", event_id = event.id, biz_no = %event.biz_no, owner = %self.owner);
                async move {
                    let outcome = if cancel.is_cancelled() || !inflight.start(event.id, start_by) {
                        Sent::Skipped
                    } else {
                        self.send(&event).await
                    };
                    (event, outcome)
                }
                .instrument(span)
            })
            .buffer_unordered(concurrency)
            .ready_chunks(concurrency);
        // Deliveries are marked SUCCESS together: when the round's sends are done, when a
        // batch's worth is waiting, or MARK_LINGER after the first one waits, whichever comes
        // first (so a hung send holds back no mark for long).
        let mut delivered: Vec<i64> = Vec::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        loop {
            let next = match flush_at {
                Some(at) => tokio::select! {
                    chunk = outcomes.next() => Some(chunk),
                    _ = tokio::time::sleep_until(at) => None,
                },
                None => Some(outcomes.next().await),
            };
            match next {
                Some(Some(chunk)) => {
                    let done = self.record_outcomes(chunk, &inflight, round).await;
                    if delivered.is_empty() && !done.is_empty() {
                        flush_at = Some(tokio::time::Instant::now() + MARK_LINGER);
                    }
                    delivered.extend(done);
                    if delivered.len() as u64 >= self.config.batch_size {
                        self.mark_delivered(std::mem::take(&mut delivered), round)
                            .await;
                        flush_at = None;
                    }
                }
                Some(None) => {
                    self.mark_delivered(delivered, round).await;
                    break;
                }
                None => {
                    self.mark_delivered(std::mem::take(&mut delivered), round)
                        .await;
                    flush_at = None;
                }
            }
        }
        Ok(())
    }

    /// Marks `delivered` SUCCESS in one owner-guarded statement; rows whose lease was reclaimed
    /// meanwhile are late acks.
    async fn mark_delivered(&self, delivered: Vec<i64>, round: &mut WorkerSummary) {
        if delivered.is_empty() {
            return;
        }
        match store::mark_success_many(&self.db, &delivered, &self.owner).await {
            Ok(applied) => {
                round.published += applied;
                m::published(applied);
                tracing::info!(owner = %self.owner, published = applied, event_ids = ?delivered, "events published");
                let late = delivered.len() as u64 - applied;
                if late > 0 {
                    round.late_acks += late;
                    m::late_acks(late);
                    tracing::warn!(owner = %self.owner, late, "leases reclaimed during the send; those outcomes were not recorded (late acks)");
                }
            }
            Err(e) => {
                round.errors += 1;
                tracing::error!(owner = %self.owner, error = %e, event_ids = ?delivered, "could not mark events SUCCESS; the reclaim will resend them");
            }
        }
    }

    /// Records a set of finished sends: unsent events handed back in one `UPDATE`, failures one
    /// by one; outcomes of lost leases are dropped (late acks). Returns the delivered ids, which
    /// the caller marks in groups.
    async fn record_outcomes(
        &self,
        chunk: Vec<(Model, Sent)>,
        inflight: &Inflight,
        round: &mut WorkerSummary,
    ) -> Vec<i64> {
        let mut delivered = Vec::new();
        let mut skipped = Vec::new();
        for (event, outcome) in &chunk {
            let span = tracing::info_span!("outbox_event", event_id = event.id, biz_no = %event.biz_no, owner = %self.owner);
            m::sending_dwell(inflight.finish(event.id).as_secs_f64());
            if inflight.is_lost(event.id) {
                round.late_acks += 1;
                m::late_acks(1);
                tracing::warn!(parent: &span, "lease lost while sending; outcome not recorded (late ack)");
                continue;
            }
            match outcome {
                Sent::Ok => delivered.push(event.id),
                Sent::Skipped => skipped.push(event.id),
                Sent::Failed(err) => {
                    if let Err(e) = self
                        .record_failure(event, err, round)
                        .instrument(span.clone())
                        .await
                    {
                        round.errors += 1;
                        tracing::error!(parent: &span, error = %e, "outcome not recorded; the event is left to the reclaim");
                    }
                }
            }
        }
        if !skipped.is_empty() {
            match store::release_unsent(&self.db, &skipped, &self.owner).await {
                Ok(n) => {
                    round.released += n;
                    tracing::info!(owner = %self.owner, released = n, "claimed events handed back unsent at shutdown");
                }
                Err(e) => {
                    round.errors += 1;
                    tracing::error!(owner = %self.owner, error = %e, "could not hand back unsent events; the reclaim will");
                }
            }
        }
        delivered
    }

    /// Claims this round's events.
    async fn claim(
        &self,
        cancel: &CancellationToken,
        round: &mut WorkerSummary,
    ) -> Result<Vec<Model>, OutboxError> {
        let claimed = match self.config.claim_strategy {
            ClaimStrategy::Batch => {
                if cancel.is_cancelled() {
                    return Ok(Vec::new());
                }
                let claimed =
                    store::claim_batch(&self.db, &self.owner, self.config.batch_size).await?;
                round.candidates = claimed.len() as u64;
                claimed
            }
            ClaimStrategy::PerRow => {
                let candidates = store::select_candidates(&self.db, self.config.batch_size).await?;
                round.candidates = candidates.len() as u64;
                let mut claimed = Vec::with_capacity(candidates.len());
                for event in candidates {
                    if cancel.is_cancelled() {
                        break;
                    }
                    match store::claim(&self.db, event.id, event.retry_count, &self.owner).await {
                        Ok(Claim::Won) => claimed.push(event),
                        Ok(Claim::Lost) => {
                            round.claim_lost += 1;
                            m::claim_lost();
                            tracing::debug!(event_id = event.id, owner = %self.owner, "claim lost to another instance; skipping");
                        }
                        Err(e) => {
                            round.errors += 1;
                            tracing::error!(event_id = event.id, error = %e, "claim failed; skipping the event this round");
                        }
                    }
                }
                claimed
            }
        };
        round.claimed = claimed.len() as u64;
        Ok(claimed)
    }

    /// Publishes one claimed event within the send timeout.
    async fn send(&self, event: &Model) -> Sent {
        let message = OutboxMessage::from(event);
        let started = Instant::now();
        // A panicking publisher fails this send (retryable) instead of the whole worker.
        let publish = std::panic::AssertUnwindSafe(self.publisher.publish(&message)).catch_unwind();
        let result = tokio::time::timeout(self.config.send_timeout, publish)
            .await
            .map(|r| {
                r.unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(PublishError::retryable(format!(
                        "publisher panicked: {what}"
                    )))
                })
            });
        m::send_duration(started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(())) => Sent::Ok,
            Ok(Err(e)) => Sent::Failed(e),
            Err(_) => Sent::Failed(PublishError::retryable(format!(
                "send timed out after {} ms",
                self.config.send_timeout.as_millis()
            ))),
        }
    }

    /// Renews the leases of the round's unfinished events every lease/3 until dropped. An event
    /// whose send has run past the send timeout (plus one renewal period) is not renewed: such a
    /// send is hung, and its lease must expire so that another instance can take over. Events
    /// whose renewal finds the lease gone are marked lost (their outcome will not be recorded).
    fn spawn_renewal(&self, inflight: Inflight) -> AbortOnDrop {
        let db = self.db.clone();
        let owner = self.owner.clone();
        let every = self.config.lease / 3;
        let hung_after = self.config.send_timeout + every;
        AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let live = inflight.renewable(hung_after);
                if live.is_empty() {
                    continue;
                }
                match store::renew_leases(&db, &live, &owner).await {
                    Ok(n) if n as usize == live.len() => {
                        tracing::debug!(%owner, renewed = n, "leases renewed");
                    }
                    Ok(_) => match store::owned_ids(&db, &live, &owner).await {
                        Ok(still) => {
                            let still: HashSet<i64> = still.into_iter().collect();
                            let gone: Vec<i64> =
                                live.into_iter().filter(|id| !still.contains(id)).collect();
                            tracing::warn!(%owner, ?gone, "lease lost (reclaimed by another instance); these events will not be marked");
                            inflight.lose(&gone);
                        }
                        Err(e) => tracing::error!(%owner, error = %e, "lease check failed"),
                    },
                    Err(e) => {
                        tracing::error!(%owner, error = %e, "lease renewal failed; retrying")
                    }
                }
            }
        }))
    }

    /// Puts a failed event back with back-off, or marks it a dead letter.
    async fn record_failure(
        &self,
        event: &Model,
        err: &PublishError,
        round: &mut WorkerSummary,
    ) -> Result<(), OutboxError> {
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
                    m::retry();
                    tracing::warn!(retry_count = n, backoff_ms = backoff.as_millis() as u64, error = %err.message, "send failed; will retry");
                }
                t
            }
            RetryDecision::DeadLetter => {
                let t = store::mark_fail(&self.db, event.id, &self.owner, n, &err.message).await?;
                if t == Transition::Applied {
                    round.dead_lettered += 1;
                    m::dead_letters(1);
                    tracing::error!(retry_count = n, permanent = !err.is_retryable(), error = %err.message, "event is a dead letter (FAIL); needs a person");
                }
                t
            }
        };
        if t == Transition::LeaseLost {
            round.late_acks += 1;
            m::late_acks(1);
            tracing::warn!("lease was reclaimed during the send; outcome not recorded (late ack)");
        }
        Ok(())
    }

    /// One reclaim pass: every `SENDING` row whose lease (`claimed_at`, database clock) is older
    /// than `lease` goes back to `WAIT` with `retry_count + 1`, or to `FAIL` once its retries are
    /// used up (`reclaim_stuck`). Logs the count at WARN when there was any.
    ///
    /// # Errors
    /// A database error.
    pub async fn reclaim_once(&self) -> Result<u64, OutboxError> {
        let r = store::reclaim_stuck(
            &self.db,
            self.config.lease,
            self.config.retry.max_retries,
            store::RECLAIM_BATCH,
        )
        .await?;
        if r.total() > 0 {
            m::reclaimed(r.total());
            tracing::warn!(owner = %self.owner, reclaimed = r.total(), requeued = r.requeued, dead_lettered = r.dead_lettered,
                lease_ms = self.config.lease.as_millis() as u64, "reclaimed events whose sender died or hung mid-send");
        }
        if r.dead_lettered > 0 {
            m::dead_letters(r.dead_lettered);
            tracing::error!(owner = %self.owner, count = r.dead_lettered, "events failed by expired leases past the retry limit (FAIL)");
        }
        self.record(&WorkerSummary {
            reclaimed: r.total(),
            dead_lettered: r.dead_lettered,
            ..Default::default()
        });
        Ok(r.total())
    }
}
