//! Recording outcomes with statements guarded by each event's claim (`claim_owner`): deliveries
//! completed per claim (deleted, or marked `SUCCESS`; [`crate::Completion`]), failures put back with back-off or dead-lettered, unsent events
//! handed back. An event stays in [`Inflight`] (its lease renewed) until recorded here.
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::inflight::owner_of;
use super::send::{Done, Sent};
use super::{Inflight, Op, Worker, WorkerSummary};
use crate::driver::{self, Driver, Transition};
use crate::error::{DbErrorKind, FailureKind, OutboxError, PublishError};
use crate::retry::RetryDecision;
use sea_orm_outbox_entity::event_record::Model;

/// Longest a delivered event waits for others before the group is completed.
const MARK_LINGER: Duration = Duration::from_millis(20);

/// Records the outcomes of one worker's sends.
pub(crate) struct Recorder<'w> {
    worker: &'w Worker,
    inflight: Inflight,
    /// Delivered, not yet marked.
    delivered: Vec<Model>,
    /// When the oldest of `delivered` has waited [`MARK_LINGER`].
    flush_at: Option<Instant>,
}

impl<'w> Recorder<'w> {
    pub(crate) fn new(worker: &'w Worker, inflight: &Inflight) -> Self {
        Recorder {
            worker,
            inflight: inflight.clone(),
            delivered: Vec::new(),
            flush_at: None,
        }
    }

    /// Whether deliveries wait for their completion.
    pub(crate) fn pending(&self) -> bool {
        !self.delivered.is_empty()
    }

    /// When the waiting deliveries must be marked.
    pub(crate) fn flush_at(&self) -> Option<Instant> {
        self.flush_at
    }

    /// Records finished sends: deliveries wait for their group's mark, failures are recorded
    /// one by one, unsent events handed back; outcomes of lost leases are dropped (late acks).
    pub(crate) async fn record(&mut self, done: Vec<Done>, s: &mut WorkerSummary) {
        let w = self.worker;
        let mut skipped = Vec::new();
        for Done { event, sent, took } in done {
            if let Some(took) = took {
                metrics::histogram!(crate::metrics::SEND_DURATION).record(took.as_secs_f64());
            }
            if self.inflight.is_lost(owner_of(&event), event.id) {
                self.finish(owner_of(&event), &[event.id]);
                w.observer.late_acks(s, 1, "lease lost while sending");
                continue;
            }
            match sent {
                Sent::Ok => {
                    self.delivered.push(event);
                    self.flush_at
                        .get_or_insert_with(|| Instant::now() + MARK_LINGER);
                }
                Sent::Skipped => skipped.push(event),
                Sent::Failed(err) => self.fail(&event, &err, None, s).await,
            }
        }
        self.release(skipped, s).await;
        if self.delivered.len() as u64 >= w.config.batch_size && !self.marks_with_claim() {
            self.flush(s).await;
        }
    }

    /// Completes the waiting deliveries, one statement per claim. When a group's statement
    /// fails because of one of its rows ([`row_fault`]), its events are marked one by one; any
    /// other failure leaves this group and the rest to the reclaim, logged once.
    pub(crate) async fn flush(&mut self, s: &mut WorkerSummary) {
        self.flush_at = None;
        let mut groups = by_claim(std::mem::take(&mut self.delivered)).into_iter();
        while let Some((owner, events)) = groups.next() {
            let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
            let completion = self.worker.config.completion;
            let e = match self
                .worker
                .db
                .run(|d| d.complete(&ids, &owner, completion))
                .await
            {
                Ok(applied) => {
                    self.marked(&owner, &ids, applied, s);
                    continue;
                }
                Err(e) => e,
            };
            let unmarked = if !row_fault(&e) {
                Err((events, e))
            } else if let [event] = &events[..] {
                self.mark_unmarkable(event, e, s).await;
                Ok(())
            } else {
                tracing::warn!(
                    error = %e, claim = %owner, event_ids = ?ids,
                    "marking events SUCCESS together failed; marking them one by one"
                );
                self.mark_one_by_one(events, s).await
            };
            // Not because of a row: this group and the rest are left to the reclaim (which
            // resends them), logged once.
            if let Err((unmarked, e)) = unmarked {
                let mut ids = Vec::new();
                for event in unmarked.into_iter().chain(groups.flat_map(|(_, g)| g)) {
                    self.finish(owner_of(&event), &[event.id]);
                    ids.push(event.id);
                }
                let what =
                    format!("could not mark events {ids:?} SUCCESS; the reclaim will resend them");
                let e = OutboxError::from(e);
                self.worker.observer.error(s, Op::Record, &e, &what);
                return;
            }
        }
    }

    /// Completes each of `events` (one claim's) on its own; at the first failure not of
    /// its row it returns the events not marked, with the error.
    async fn mark_one_by_one(
        &mut self,
        events: Vec<Model>,
        s: &mut WorkerSummary,
    ) -> Result<(), (Vec<Model>, sea_orm::DbErr)> {
        let w = self.worker;
        let mut rest = events.into_iter();
        while let Some(event) = rest.next() {
            match w
                .db
                .transition(|d| d.complete(&[event.id], owner_of(&event), w.config.completion))
                .await
            {
                Ok(t) => {
                    let applied = u64::from(t == Transition::Applied);
                    self.marked(owner_of(&event), &[event.id], applied, s);
                }
                Err(e) if row_fault(&e) => self.mark_unmarkable(&event, e, s).await,
                Err(e) => return Err((std::iter::once(event).chain(rest).collect(), e)),
            }
        }
        Ok(())
    }

    /// The completion of `event` failed with `e` because of the row itself: the event
    /// (delivered, but not markable) is put back like a failed send, with the database's error
    /// in `last_error`.
    async fn mark_unmarkable(&mut self, event: &Model, e: sea_orm::DbErr, s: &mut WorkerSummary) {
        let e = OutboxError::from(e);
        let err = PublishError::retryable(format!("delivered, but the SUCCESS mark failed: {e}"));
        self.fail(event, &err, Some(&e), s).await;
    }

    /// Records the failure `err` of `event` in the event's span: puts it back with back-off
    /// (uncounted for a configuration fault) or marks it a dead letter, with `last_error` the
    /// message after the prefix of its [`FailureKind`], and stops holding it.
    /// `unmarked` is the error of the completion of a delivered event that `err` stands for.
    async fn fail(
        &mut self,
        event: &Model,
        err: &PublishError,
        unmarked: Option<&OutboxError>,
        s: &mut WorkerSummary,
    ) {
        let (w, owner) = (self.worker, owner_of(event));
        // The kind goes into `last_error` as its prefix: only a retryable failure's dead letter
        // is ever healed, never a delivered event whose mark failed.
        let kind = match unmarked {
            Some(_) => FailureKind::Unmarked,
            None => FailureKind::from(err.kind),
        };
        let why = &kind.record(&err.message);
        let span = tracing::info_span!("outbox_event", event_id = event.id, biz_no = %event.biz_no, owner = %w.owner, claim = %owner);
        let n = event.retry_count.saturating_add(1);
        let decision = w
            .config
            .retry
            .decide(u32::try_from(n).unwrap_or(u32::MAX), err);
        let recorded = async {
            let t = match decision {
                RetryDecision::Retry(backoff) => {
                    w.db.transition(|d| d.release_for_retry(event.id, owner, backoff, why, true))
                        .await?
                }
                RetryDecision::Uncounted(delay) => {
                    w.db.transition(|d| d.release_for_retry(event.id, owner, delay, why, false))
                        .await?
                }
                RetryDecision::DeadLetter => {
                    w.db.transition(|d| d.mark_fail(event.id, owner, why))
                        .await?
                }
            };
            match t {
                Transition::Applied => w.observer.failed(s, event, n, decision, err),
                Transition::LeaseLost => {
                    w.observer
                        .late_acks(s, 1, "lease was reclaimed during the send")
                }
            }
            Ok::<(), OutboxError>(())
        }
        .instrument(span.clone())
        .await;
        self.finish(owner, &[event.id]);
        let _enter = span.enter();
        let (e, what) = match (&recorded, unmarked) {
            (Ok(()), None) => return,
            (Ok(()), Some(e)) => (
                e,
                "delivered, but the SUCCESS mark failed; the event is put back like a failed send",
            ),
            (Err(e), None) => (e, "outcome not recorded; the event is left to the reclaim"),
            (Err(e), Some(_)) => (
                e,
                "delivered, but neither the SUCCESS mark nor the retry could be recorded; the \
                 event is left to the reclaim",
            ),
        };
        w.observer.error(s, Op::Record, e, what);
    }

    /// Hands claimed, unsent events back to `WAIT`, one owner-guarded statement per claim.
    pub(crate) async fn release(&mut self, events: Vec<Model>, s: &mut WorkerSummary) {
        for (owner, events) in by_claim(events) {
            let w = self.worker;
            let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
            let released = w.db.run(|d| d.release_unsent(&ids, &owner)).await;
            self.finish(&owner, &ids);
            match released {
                Ok(n) => w.observer.released(s, &ids, n),
                Err(e) => w.observer.error(
                    s,
                    Op::Record,
                    &OutboxError::from(e),
                    "could not hand back unsent events; the reclaim will",
                ),
            }
        }
    }

    /// `ids` of claim `owner` were completed: `applied` of them were still ours, the
    /// rest are late acks.
    fn marked(&mut self, owner: &str, ids: &[i64], applied: u64, s: &mut WorkerSummary) {
        self.finish(owner, ids);
        self.worker.observer.published(s, ids, applied);
    }

    /// Stops holding `ids` of `owner`'s claim and records their claim-to-outcome times.
    fn finish(&self, owner: &str, ids: &[i64]) {
        for dwell in self.inflight.finish(owner, ids) {
            metrics::histogram!(crate::metrics::SENDING_DWELL).record(dwell.as_secs_f64());
        }
    }
}

/// Marking with the next claim: the pump's batch claim marks one claim's deliveries in its own
/// statement; every other path uses `flush`.
impl Recorder<'_> {
    /// Whether deliveries wait for the next claim's statement: batch claims, unordered, and a
    /// backend with the single statement (Postgres).
    pub(crate) fn marks_with_claim(&self) -> bool {
        use sea_orm::ConnectionTrait;
        let (c, db) = (&self.worker.config, &self.worker.db);
        // Not in ordered mode: the claim in the same statement would read the marked events as
        // still SENDING (one snapshot) and take none of their successors.
        c.ordered.is_none()
            && c.claim_strategy == crate::ClaimStrategy::Batch
            && Driver::of(db.get_database_backend()).is_some_and(Driver::mark_and_claim_in_one)
    }

    /// Marks the waiting deliveries of one claim (the largest group; any other claim's are
    /// completed now, on their own) in the statement that claims up to `want` events for
    /// `owner` ([`driver::mark_success_and_claim_batch`]), and returns the events claimed.
    /// `None` when nothing waits for the claim, or when the statement failed: nothing of it
    /// happened, and the deliveries are marked on their own.
    pub(crate) async fn mark_and_claim(
        &mut self,
        owner: &str,
        want: u64,
        s: &mut WorkerSummary,
    ) -> Option<Vec<Model>> {
        if !self.marks_with_claim() {
            return None;
        }
        let mut groups = by_claim(std::mem::take(&mut self.delivered));
        let largest = (0..groups.len()).max_by_key(|&i| groups[i].1.len())?;
        let (done_owner, done) = groups.swap_remove(largest);
        self.delivered = groups.into_iter().flat_map(|(_, g)| g).collect();
        self.flush(s).await;
        let ids: Vec<i64> = done.iter().map(|e| e.id).collect();
        let db = &self.worker.db;
        let completion = self.worker.config.completion;
        match driver::mark_success_and_claim_batch(db, &ids, &done_owner, completion, owner, want)
            .await
        {
            Ok(got) => {
                self.marked(&done_owner, &ids, got.marked, s);
                Some(got.claimed)
            }
            Err(e) => {
                tracing::debug!(error = %e, "marking with the claim failed; marking, then claiming");
                self.delivered = done;
                self.flush(s).await;
                None
            }
        }
    }
}

/// Whether a failed statement failed because of a row it touched (a trigger, a constraint: the
/// database's [`DbErrorKind::Other`]) rather than because of the database or the connection
/// (lost connection, transient conflict, missing table), which every other row would meet too.
fn row_fault(e: &sea_orm::DbErr) -> bool {
    crate::driver::db_error_kind(e) == DbErrorKind::Other
}

/// `events` grouped by the claim they were taken in (their `claim_owner`), in first-seen order.
fn by_claim(events: Vec<Model>) -> Vec<(String, Vec<Model>)> {
    super::group_by(events, |e| owner_of(e).to_owned())
}
