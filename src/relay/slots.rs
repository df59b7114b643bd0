//! The send slots: up to `send_concurrency` publish calls in flight, each in a task of its own,
//! so a send that hangs holds its own slot and nothing else. A slot carries one event, up to
//! `batch_size` with a publisher that [`crate::Publisher::batches`], or one key's run.
use std::collections::VecDeque;
use std::time::Duration;

use sea_orm_outbox_entity::event_record::Model;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::relay::claim::Claimer;
use crate::relay::outcome::Recorder;
use crate::relay::send::{Done, SendContext};
use crate::relay::{Inflight, Op, Worker, WorkerSummary};

/// Longest a claim waits for all its slots to come free before it claims for fewer (so that
/// sends finishing one by one do not each cost a claim statement).
const REFILL_LINGER: Duration = Duration::from_millis(20);

/// A finished send task, as `JoinSet::join_next` returns it.
type Joined = Result<Vec<Done>, tokio::task::JoinError>;

/// The signals between the pump and the poll timer ([`crate::wake::Wake`]).
#[derive(Default)]
pub(crate) struct Signals {
    /// The pump found no more due events: start the poll delay.
    arm: tokio::sync::Notify,
    /// The poll delay passed (or a commit notified): claim again.
    due: tokio::sync::Notify,
}

impl Signals {
    /// The poll timer: after each arm, waits the poll delay (or a notification) and signals due.
    pub(crate) async fn run_timer(&self, mut wake: crate::wake::Wake, delay: Duration) {
        loop {
            self.arm.notified().await;
            let woken = wake.wait(delay).await;
            tracing::trace!(?woken, "claim again");
            self.due.notify_one();
        }
    }
}

/// A worker's slots and the recorder of their outcomes.
pub(crate) struct Slots<'w> {
    worker: &'w Worker,
    tasks: JoinSet<Vec<Done>>,
    ctx: SendContext,
    /// Events one slot carries: 1, or `batch_size` with batch sends or in ordered mode (one
    /// key's run).
    per_slot: u64,
    recorder: Recorder<'w>,
}

impl<'w> Slots<'w> {
    pub(crate) fn new(worker: &'w Worker, inflight: &Inflight, cancel: &CancellationToken) -> Self {
        let c = &worker.config;
        let batching = worker.publisher.batches();
        Slots {
            worker,
            tasks: JoinSet::new(),
            per_slot: if batching || c.ordered.is_some() {
                c.batch_size
            } else {
                1
            },
            ctx: SendContext {
                publisher: worker.publisher.clone(),
                timeout: c.send_timeout,
                inflight: inflight.clone(),
                cancel: cancel.clone(),
                ordered: c.ordered.is_some(),
                batching,
            },
            recorder: Recorder::new(worker, inflight),
        }
    }

    fn free(&self) -> usize {
        self.worker
            .config
            .send_concurrency
            .saturating_sub(self.tasks.len())
    }

    /// `events` (in claim order) cut into what one slot takes: `per_slot` events, or in
    /// ordered mode one key's run.
    fn slots_of(&self, events: Vec<Model>) -> VecDeque<Vec<Model>> {
        if self.ctx.ordered {
            return runs(events).into();
        }
        let mut events = events.into_iter().peekable();
        let mut chunks = VecDeque::new();
        while events.peek().is_some() {
            chunks.push_back(events.by_ref().take(self.per_slot as usize).collect());
        }
        chunks
    }

    /// Starts the sends of `events`, each slot's ([`Slots::slots_of`]) in a task of its own.
    fn spawn(&mut self, events: Vec<Model>) {
        for chunk in self.slots_of(events) {
            let (first, last) = (chunk[0].id, chunk[chunk.len() - 1].id);
            let (owner, biz_no) = (&self.worker.owner, &chunk[0].biz_no);
            let claim = crate::relay::inflight::owner_of(&chunk[0]);
            let events = chunk.len();
            let span = if self.ctx.ordered {
                tracing::info_span!("outbox_run", events, %biz_no, first_event_id = first, last_event_id = last, %owner, %claim)
            } else if self.per_slot == 1 {
                tracing::info_span!("outbox_event", event_id = first, %biz_no, %owner, %claim)
            } else {
                tracing::info_span!("outbox_batch", events, first_event_id = first, last_event_id = last, %owner, %claim)
            };
            self.tasks
                .spawn(self.ctx.clone().run(chunk).instrument(span));
        }
    }

    /// Records the sends that finished (`first`, from the cancel-safe `join_next`, and every
    /// other one already done); returns whether there were any.
    async fn collect(&mut self, first: Option<Joined>, s: &mut WorkerSummary) -> bool {
        let mut next = first.or_else(|| self.tasks.try_join_next());
        if next.is_none() {
            return false;
        }
        let mut done = Vec::new();
        while let Some(joined) = next {
            match joined {
                Ok(d) => done.extend(d),
                // Aborted (the runtime is shutting down): left SENDING, for the reclaim.
                Err(e) => self.worker.observer.error(
                    s,
                    Op::Send,
                    &e,
                    "send task ended without an outcome; left to the reclaim",
                ),
            }
            next = self.tasks.try_join_next();
        }
        self.recorder.record(done, s).await;
        true
    }

    /// The worker's main loop: claims into free slots while events are due, records outcomes
    /// as sends finish, and waits on `signals` when nothing is due. On cancellation no new
    /// claim or send starts; sends in flight finish (within the send timeout) and are recorded.
    pub(crate) async fn run(mut self, cancel: &CancellationToken, signals: &Signals) {
        let w = self.worker;
        let c = &w.config;
        // A full claim's worth of free slots, or whatever is free after REFILL_LINGER.
        let refill_at = if self.per_slot == 1 {
            c.send_concurrency.min(c.batch_size as usize).max(1)
        } else {
            1
        };
        let mut claimer = Claimer::new(w, &self.ctx.inflight);
        let mut due = true;
        let mut refill_by: Option<Instant> = None;
        let mut s = WorkerSummary::default();
        // Ordered mode: the next deep claim, when heads were found behind the window lately.
        let mut retry_by: Option<Instant> = None;
        loop {
            // Finished sends first: their slots are free, and their marks may ride the claim.
            // Ordered mode: a finished run makes its key's next events heads, which no
            // notification announces.
            let finished = self.collect(None, &mut s).await;
            due |= finished && self.ctx.ordered;
            // A pump that keeps claiming never reaches the `select!` below.
            if self
                .recorder
                .flush_at()
                .is_some_and(|t| t <= Instant::now())
            {
                self.recorder.flush(&mut s).await;
            }
            let stopping = cancel.is_cancelled();
            if stopping && self.tasks.is_empty() {
                break;
            }
            let free = self.free();
            if !stopping && due && free > 0 {
                let lingered = refill_by.is_some_and(|t| t <= Instant::now());
                if free >= refill_at || self.tasks.is_empty() || lingered {
                    refill_by = None;
                    // Events the free slots carry, and (ordered mode) keys: one run per slot.
                    let want = (free as u64)
                        .saturating_mul(self.per_slot)
                        .min(c.batch_size);
                    let keys = (free as u64).min(c.batch_size);
                    let recorder = Some(&mut self.recorder);
                    let claimed = claimer.claim(want, keys, cancel, recorder, &mut s).await;
                    match claimed {
                        Ok(got) => {
                            due = got.more;
                            retry_by = got.retry_at.map(Instant::from_std);
                            self.spawn(got.events);
                        }
                        Err(e) => {
                            let what = "outbox claim failed; retrying after the poll delay";
                            w.observer.error(&mut s, Op::Claim, &e, what);
                            due = false;
                        }
                    }
                    if !due {
                        signals.arm.notify_one();
                    }
                    w.observer.commit(&mut s);
                    continue;
                }
                refill_by.get_or_insert_with(|| Instant::now() + REFILL_LINGER);
            }
            if self.tasks.is_empty() && self.recorder.pending() {
                self.recorder.flush(&mut s).await;
                w.observer.commit(&mut s);
                continue;
            }
            // What the top of the loop recorded reaches the totals before the worker waits.
            w.observer.commit(&mut s);
            tokio::select! {
                joined = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    let finished = self.collect(joined, &mut s).await;
                    due |= finished && self.ctx.ordered;
                }
                () = until(self.recorder.flush_at()) => self.recorder.flush(&mut s).await,
                () = until(refill_by), if due && !stopping => {}
                () = until(retry_by), if !due && !stopping => {
                    retry_by = None;
                    due = true;
                }
                () = signals.due.notified(), if !due && !stopping => due = true,
                () = cancel.cancelled(), if !stopping => {}
            }
            w.observer.commit(&mut s);
        }
        self.recorder.flush(&mut s).await;
        w.observer.commit(&mut s);
    }

    /// One round's sends: `events` (already claimed) through the slots, every outcome recorded.
    /// Events wait for a free slot in claim order, lease-protected (and renewed) meanwhile; at
    /// cancellation the ones not started go back to `WAIT`.
    pub(crate) async fn drain(
        mut self,
        events: Vec<Model>,
        cancel: &CancellationToken,
        s: &mut WorkerSummary,
    ) {
        let mut queue = self.slots_of(events);
        loop {
            if cancel.is_cancelled() && !queue.is_empty() {
                let unsent: Vec<Model> = queue.drain(..).flatten().collect();
                self.recorder.release(unsent, s).await;
            }
            for chunk in queue.drain(..self.free().min(queue.len())) {
                self.spawn(chunk);
            }
            if self.tasks.is_empty() {
                break;
            }
            tokio::select! {
                joined = self.tasks.join_next() => { self.collect(joined, s).await; }
                () = until(self.recorder.flush_at()) => self.recorder.flush(s).await,
            }
        }
        self.recorder.flush(s).await;
    }
}

/// `events` (one ordered claim's) as runs, one per key (`biz_no`), each in id order, the keys
/// in the order of their first event.
fn runs(events: Vec<Model>) -> Vec<Vec<Model>> {
    let mut runs = super::group_by(events, |e| e.biz_no.clone());
    for (_, run) in &mut runs {
        run.sort_by_key(|e| e.id);
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

/// Sleeps until `at`, or for ever when `None`.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
