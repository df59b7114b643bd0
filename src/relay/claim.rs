//! Claiming: every strategy hands the send slots at most as many events as they ask for.
use std::collections::VecDeque;
use std::time::Instant;

use sea_orm_outbox_entity::event_record::Model;
use tokio_util::sync::CancellationToken;

use crate::config::ClaimStrategy;
use crate::driver::{self, Claim};
use crate::error::OutboxError;
use crate::relay::outcome::Recorder;
use crate::relay::{Inflight, Op, Worker, WorkerSummary};

/// What one claim got.
pub(crate) struct Claimed {
    /// The events now leased to this worker, registered in its [`Inflight`].
    pub(crate) events: Vec<Model>,
    /// Whether more due events are likely waiting (the claim got all it asked for).
    pub(crate) more: bool,
    /// Ordered mode: heads were found behind the window lately and more may be there; claim
    /// again at this instant (the next deep claim) even when `more` is false.
    pub(crate) retry_at: Option<Instant>,
}

impl Claimed {
    /// `events`, with `more` likely due, and no deep claim scheduled.
    fn new(events: Vec<Model>, more: bool) -> Self {
        Claimed {
            events,
            more,
            retry_at: None,
        }
    }
}

/// A worker's claimer. Per-row claiming keeps the candidates of its last read (unlocked, not
/// yet claimed) so that a worker with few free slots claims one event at a time without
/// re-reading the table for each; candidates older than the poll delay are read again.
pub(crate) struct Claimer<'w> {
    worker: &'w Worker,
    /// Where claimed events are registered.
    inflight: Inflight,
    candidates: VecDeque<Model>,
    read_at: Instant,
    /// The last read returned fewer than a batch: the table had no more due rows.
    read_short: bool,
    /// Ordered mode: the last deep claim ([`driver::HeadScan::Deep`]) found heads the window
    /// did not hold, so more may be waiting behind it.
    deep_found: bool,
    /// Ordered mode: when the next [`driver::HeadScan::Deep`] claim may run.
    deep_after: Instant,
}

impl<'w> Claimer<'w> {
    pub(crate) fn new(worker: &'w Worker, inflight: &Inflight) -> Self {
        Claimer {
            worker,
            inflight: inflight.clone(),
            candidates: VecDeque::new(),
            read_at: Instant::now(),
            read_short: false,
            deep_found: false,
            deep_after: Instant::now(),
        }
    }

    /// Claims up to `want` due events into the worker's [`Inflight`]; fails only when nothing
    /// could be claimed. `recorder`'s deliveries are completed first in ordered mode
    /// (their successors become claimable only then), else by the batch claim's statement
    /// where the recorder leaves them to it.
    pub(crate) async fn claim(
        &mut self,
        want: u64,
        keys: u64,
        cancel: &CancellationToken,
        mut recorder: Option<&mut Recorder<'_>>,
        s: &mut WorkerSummary,
    ) -> Result<Claimed, OutboxError> {
        let w = self.worker;
        if let (Some(r), Some(_)) = (recorder.as_deref_mut(), w.config.ordered) {
            r.flush(s).await;
        }
        if cancel.is_cancelled() {
            return Ok(Claimed::new(Vec::new(), false));
        }
        w.check_schema().await?;
        // A fencing token of this claim's own (see `crate::instance`).
        let owner = crate::instance::claim_owner(&w.owner);
        let claimed = match (w.config.ordered, w.config.claim_strategy) {
            // Ordered mode: at most `keys` heads (one send slot each) and their runs, `want`
            // events in all. More may be due when every slot got a key or the events filled
            // the claim.
            (Some(policy), _) => self.claim_ordered(&owner, policy, want, keys, s).await?,
            (None, ClaimStrategy::Batch) => self.claim_batch(&owner, want, recorder, s).await?,
            (None, ClaimStrategy::PerRow) => self.claim_per_row(&owner, want, cancel, s).await?,
        };
        s.rounds += 1;
        s.claimed += claimed.events.len() as u64;
        self.inflight
            .claimed(&owner, claimed.events.iter().map(|e| e.id));
        Ok(claimed)
    }

    /// The batch claim of up to `want` events, in one statement with the completion of
    /// one claim's deliveries where `recorder` leaves them to the claim.
    async fn claim_batch(
        &mut self,
        owner: &str,
        want: u64,
        recorder: Option<&mut Recorder<'_>>,
        s: &mut WorkerSummary,
    ) -> Result<Claimed, OutboxError> {
        let with_marks = match recorder {
            Some(r) => r.mark_and_claim(owner, want, s).await,
            None => None,
        };
        let events = match with_marks {
            Some(events) => events,
            None => driver::claim_batch(&self.worker.db, owner, want).await?,
        };
        s.candidates += events.len() as u64;
        let more = events.len() as u64 == want;
        Ok(Claimed::new(events, more))
    }

    /// The ordered claim of up to `keys` heads and `want` events: a window of the oldest due
    /// rows ([`driver::HeadScan::for_heads`]), and when it found too few heads a deep claim
    /// ([`driver::HeadScan::Deep`]) at most every `max(HEAD_SCAN_DEEP_EVERY_MIN, 20 × its
    /// duration)`, which finds heads behind other keys' backlogs.
    async fn claim_ordered(
        &mut self,
        owner: &str,
        policy: crate::OrderedPolicy,
        want: u64,
        keys: u64,
        s: &mut WorkerSummary,
    ) -> Result<Claimed, OutboxError> {
        let w = self.worker;
        let keys = keys.clamp(1, want.max(1));
        let key_count = |events: &[Model]| {
            events
                .iter()
                .map(|e| e.biz_no.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len() as u64
        };
        let window = driver::HeadScan::for_heads(keys);
        let mut events = driver::claim_ordered(&w.db, owner, policy, keys, want, window).await?;
        let mut got_keys = key_count(&events);
        if got_keys < keys && events.len() < want as usize && Instant::now() >= self.deep_after {
            let started = Instant::now();
            let rest = want - events.len() as u64;
            let deep = driver::claim_ordered(
                &w.db,
                owner,
                policy,
                keys - got_keys,
                rest,
                driver::HeadScan::Deep,
            )
            .await;
            let wait = started.elapsed().saturating_mul(20);
            self.deep_after = Instant::now() + wait.max(driver::HEAD_SCAN_DEEP_EVERY_MIN);
            match deep {
                Ok(more) => {
                    self.deep_found = !more.is_empty();
                    events.extend(more);
                    got_keys = key_count(&events);
                }
                // The window's heads are claimed: send them; the deep claim waits its turn.
                Err(e) if !events.is_empty() => {
                    tracing::warn!(error = %e, "ordered deep claim failed; sending the window's heads");
                }
                Err(e) => return Err(e.into()),
            }
        }
        s.candidates += events.len() as u64;
        let more = events.len() as u64 == want || got_keys == keys;
        let retry_at = (!more && self.deep_found).then_some(self.deep_after);
        Ok(Claimed {
            events,
            more,
            retry_at,
        })
    }

    /// The per-row claim: candidates read without locks, each claimed by its own conditional
    /// `UPDATE` decided by `rows_affected`.
    async fn claim_per_row(
        &mut self,
        owner: &str,
        want: u64,
        cancel: &CancellationToken,
        s: &mut WorkerSummary,
    ) -> Result<Claimed, OutboxError> {
        let w = self.worker;
        if self.read_at.elapsed() > w.config.poll_delay {
            self.candidates.clear();
        }
        let mut events = Vec::new();
        let mut read = false;
        let mut failed = false;
        while (events.len() as u64) < want && !cancel.is_cancelled() {
            if self.candidates.is_empty() && !read {
                read = true;
                match w
                    .db
                    .query_events(|d| d.candidates(w.config.batch_size))
                    .await
                {
                    Ok(got) => {
                        s.candidates += got.len() as u64;
                        self.read_short = (got.len() as u64) < w.config.batch_size;
                        self.read_at = Instant::now();
                        self.candidates = got.into();
                        // Each instance starts at a random candidate, so that racing instances
                        // mostly try different rows.
                        let n = self.candidates.len().max(1);
                        let start = uuid::Uuid::new_v4().as_u128() as usize % n;
                        self.candidates.rotate_left(start);
                    }
                    Err(e) if !events.is_empty() => {
                        let what = "candidate read failed; sending what was claimed";
                        w.observer.error(s, Op::Claim, &OutboxError::from(e), what);
                        failed = true;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let Some(event) = self.candidates.pop_front() else {
                break;
            };
            match w
                .db
                .run(|d| d.claim(event.id, event.retry_count, owner))
                .await
                .map(Claim::from)
            {
                Ok(Claim::Won) => events.push(Model {
                    status: sea_orm_outbox_entity::EventStatus::Sending,
                    claim_owner: Some(owner.to_owned()),
                    ..event
                }),
                Ok(Claim::Lost) => w.observer.claim_lost(s, event.id),
                Err(e) => {
                    failed = true;
                    let what = "claim failed; skipping the event this round";
                    w.observer.error(s, Op::Claim, &OutboxError::from(e), what);
                }
            }
        }
        // More may be due unless a claim failed (then wait the poll delay, not spin) or the
        // table had no more due rows.
        let exhausted = self.candidates.is_empty() && self.read_short;
        Ok(Claimed::new(events, !failed && !exhausted))
    }
}
