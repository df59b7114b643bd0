//! Recording outcomes with owner-guarded statements: deliveries marked `SUCCESS` in groups,
//! failures put back with back-off or dead-lettered one by one, unsent events handed back.
//! An event stays in [`Inflight`] (its lease renewed) until its outcome is recorded here.
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{OutboxError, PublishError};
use crate::relay::send::{Done, Sent};
use crate::relay::{Inflight, Op, Worker, WorkerSummary};
use crate::retry::RetryDecision;
use crate::store::{self, Transition};
use sea_orm_outbox_entity::event_record::Model;

/// Longest a delivered event waits for others before the group is marked `SUCCESS`.
const MARK_LINGER: Duration = Duration::from_millis(20);

/// Records the outcomes of one worker's sends.
pub(crate) struct Recorder<'w> {
    worker: &'w Worker,
    inflight: Inflight,
    /// Delivered, not yet marked.
    delivered: Vec<i64>,
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

    /// Whether deliveries wait for their `SUCCESS` mark.
    pub(crate) fn pending(&self) -> bool {
        !self.delivered.is_empty()
    }

    /// When the waiting deliveries must be marked.
    pub(crate) fn flush_at(&self) -> Option<Instant> {
        self.flush_at
    }

    /// Records finished sends: deliveries join the group waiting for its mark (marked at once
    /// when a batch's worth waits), failures are recorded one by one, unsent events are handed
    /// back in one statement; outcomes of lost leases are dropped (late acks).
    pub(crate) async fn record(&mut self, done: Vec<Done>, s: &mut WorkerSummary) {
        let w = self.worker;
        let mut skipped = Vec::new();
        for Done { event, sent, took } in done {
            if let Some(took) = took {
                crate::metrics::send_duration(took.as_secs_f64());
            }
            if self.inflight.is_lost(event.id) {
                self.finish(&[event.id]);
                w.observer.late_acks(s, 1, "lease lost while sending");
                continue;
            }
            match sent {
                Sent::Ok => {
                    self.delivered.push(event.id);
                    self.flush_at
                        .get_or_insert_with(|| Instant::now() + MARK_LINGER);
                }
                Sent::Skipped => skipped.push(event.id),
                Sent::Failed(err) => {
                    let span = tracing::info_span!("outbox_event", event_id = event.id, biz_no = %event.biz_no, owner = %w.owner);
                    let recorded = self
                        .record_failure(&event, &err, s)
                        .instrument(span.clone())
                        .await;
                    self.finish(&[event.id]);
                    if let Err(e) = recorded {
                        let _enter = span.enter();
                        w.observer.error(
                            s,
                            Op::Record,
                            &e,
                            "outcome not recorded; the event is left to the reclaim",
                        );
                    }
                }
            }
        }
        self.release(&skipped, s).await;
        if self.delivered.len() as u64 >= w.config.batch_size {
            self.flush(s).await;
        }
    }

    /// Marks the waiting deliveries `SUCCESS` in one owner-guarded statement; rows whose lease
    /// was reclaimed meanwhile are late acks.
    pub(crate) async fn flush(&mut self, s: &mut WorkerSummary) {
        self.flush_at = None;
        if self.delivered.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.delivered);
        let w = self.worker;
        let marked = store::mark_success_many(&w.db, &ids, &w.owner).await;
        self.finish(&ids);
        match marked {
            Ok(applied) => w.observer.published(s, &ids, applied),
            Err(e) => w.observer.error(
                s,
                Op::Record,
                &e.into(),
                &format!("could not mark events {ids:?} SUCCESS; the reclaim will resend them"),
            ),
        }
    }

    /// Hands claimed, unsent events back to `WAIT` in one owner-guarded statement.
    pub(crate) async fn release(&mut self, ids: &[i64], s: &mut WorkerSummary) {
        if ids.is_empty() {
            return;
        }
        let w = self.worker;
        let released = store::release_unsent(&w.db, ids, &w.owner).await;
        self.finish(ids);
        match released {
            Ok(n) => {
                w.observer.released(s, n);
                let lost = (ids.len() as u64).saturating_sub(n);
                if lost > 0 {
                    w.observer
                        .late_acks(s, lost, "leases reclaimed before the hand-back");
                }
            }
            Err(e) => w.observer.error(
                s,
                Op::Record,
                &e.into(),
                "could not hand back unsent events; the reclaim will",
            ),
        }
    }

    /// Stops holding `ids` and records their claim-to-outcome time.
    fn finish(&self, ids: &[i64]) {
        for dwell in self.inflight.finish(ids) {
            crate::metrics::sending_dwell(dwell.as_secs_f64());
        }
    }

    /// Puts a failed event back with back-off, or marks it a dead letter.
    async fn record_failure(
        &self,
        event: &Model,
        err: &PublishError,
        s: &mut WorkerSummary,
    ) -> Result<(), OutboxError> {
        let w = self.worker;
        let n = event.retry_count.saturating_add(1);
        let decision = if err.is_retryable() {
            w.config.retry.decide(u32::try_from(n).unwrap_or(u32::MAX))
        } else {
            RetryDecision::DeadLetter
        };
        let t = match decision {
            RetryDecision::Retry(backoff) => {
                let t =
                    store::release_for_retry(&w.db, event.id, &w.owner, n, backoff, &err.message)
                        .await?;
                if t == Transition::Applied {
                    w.observer.retried(s, event, n, backoff, &err.message);
                }
                t
            }
            RetryDecision::DeadLetter => {
                let t = store::mark_fail(&w.db, event.id, &w.owner, n, &err.message).await?;
                if t == Transition::Applied {
                    w.observer
                        .dead_lettered(s, event, n, !err.is_retryable(), &err.message);
                }
                t
            }
        };
        if t == Transition::LeaseLost {
            w.observer
                .late_acks(s, 1, "lease was reclaimed during the send");
        }
        Ok(())
    }
}
