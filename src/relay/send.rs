//! One send: a claimed event (or, with batch sends, a claim's events) published in a task of
//! its own, within the send timeout.
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use sea_orm_outbox_entity::event_record::Model;
use tokio_util::sync::CancellationToken;

use crate::error::PublishError;
use crate::publisher::{OutboxMessage, Publisher};
use crate::relay::inflight::owner_of;
use crate::relay::Inflight;

/// What became of one send.
pub(crate) enum Sent {
    /// The broker took it.
    Ok,
    /// The publisher failed (or timed out, or panicked).
    Failed(PublishError),
    /// Not attempted: shutdown began, or the lease was lost before the send could start.
    Skipped,
}

/// A send's result, handed from its slot to the recorder.
pub(crate) struct Done {
    /// The event.
    pub(crate) event: Model,
    /// What became of it.
    pub(crate) sent: Sent,
    /// How long the publish call took (`None` when not attempted).
    pub(crate) took: Option<Duration>,
}

impl Done {
    /// `event`, not attempted.
    fn skipped(event: Model) -> Self {
        Done {
            event,
            sent: Sent::Skipped,
            took: None,
        }
    }
}

/// What a slot needs to send, cloned into each send's task.
#[derive(Clone)]
pub(crate) struct SendContext {
    pub(crate) publisher: Arc<dyn Publisher>,
    pub(crate) timeout: Duration,
    pub(crate) inflight: Inflight,
    pub(crate) cancel: CancellationToken,
    /// Ordered mode: every message built here carries [`OutboxMessage::ordered`].
    pub(crate) ordered: bool,
}

impl SendContext {
    /// Sends `event` unless shutdown began or its lease was lost.
    pub(crate) async fn run(self, event: Model) -> Done {
        if self.cancel.is_cancelled() || !self.inflight.start(owner_of(&event), event.id) {
            return Done::skipped(event);
        }
        let started = Instant::now();
        let sent = self.send(&event).await;
        self.inflight.sent(owner_of(&event), event.id);
        Done {
            event,
            sent,
            took: Some(started.elapsed()),
        }
    }

    /// Ordered mode: sends one key's run in id order, one event after the other (with
    /// `batching` in one [`SendContext::run_batch`] call), and stops at the first event not
    /// delivered: the rest are [`Sent::Skipped`], back to `WAIT` uncounted behind it.
    pub(crate) async fn run_ordered(self, run: Vec<Model>, batching: bool) -> Vec<Done> {
        if batching {
            return stop_at_first_failure(self.run_batch_ordered(run).await);
        }
        let mut done = Vec::with_capacity(run.len());
        let mut stop = false;
        for event in run {
            if stop {
                done.push(Done::skipped(event));
                continue;
            }
            let d = self.clone().run(event).await;
            stop = !matches!(d.sent, Sent::Ok);
            done.push(d);
        }
        done
    }

    /// [`SendContext::run_batch`] of the prefix of one key's run up to the first event that
    /// cannot start; the rest are skipped.
    async fn run_batch_ordered(self, run: Vec<Model>) -> Vec<Done> {
        let startable = run
            .iter()
            .take_while(|e| {
                !self.cancel.is_cancelled()
                    && self.inflight.is_queued(owner_of(e), e.id)
                    && self.message(e).is_ok()
            })
            .count()
            // The first event that cannot go still goes to `run_batch`, which records why.
            .saturating_add(1)
            .min(run.len());
        let mut run = run;
        let rest = run.split_off(startable);
        let mut done = self.run_batch(run).await;
        done.extend(rest.into_iter().map(Done::skipped));
        done
    }

    /// The message of a claimed event, marked [`OutboxMessage::ordered`] in ordered mode.
    fn message(&self, event: &Model) -> Result<OutboxMessage, PublishError> {
        OutboxMessage::try_from(event).map(|m| m.with_ordered(self.ordered))
    }

    /// Publishes one claimed event within the send timeout.
    async fn send(&self, event: &Model) -> Sent {
        let message = match self.message(event) {
            Ok(message) => message,
            Err(e) => return Sent::Failed(e),
        };
        // Runs inside the event's `outbox_event` span (see slots.rs).
        #[cfg(feature = "opentelemetry")]
        crate::otel::link_send_span(&tracing::Span::current(), &message);
        // A panicking publisher fails this send (retryable) instead of the whole worker.
        let publish = std::panic::AssertUnwindSafe(self.publisher.publish(&message)).catch_unwind();
        match tokio::time::timeout(self.timeout, publish).await {
            Ok(Ok(Ok(()))) => Sent::Ok,
            Ok(Ok(Err(e))) => Sent::Failed(e),
            Ok(Err(panic)) => Sent::Failed(panicked(&panic)),
            Err(_) => Sent::Failed(self.timed_out()),
        }
    }

    /// Sends `events` in one [`Publisher::publish_batch`] call within one send timeout; events
    /// that cannot start are skipped, an invalid row fails alone, and a timeout or panic fails
    /// every event of the call (retryable).
    pub(crate) async fn run_batch(self, events: Vec<Model>) -> Vec<Done> {
        let mut done = Vec::with_capacity(events.len());
        let mut going = Vec::with_capacity(events.len());
        let mut messages = Vec::with_capacity(events.len());
        for event in events {
            let startable =
                !self.cancel.is_cancelled() && self.inflight.start(owner_of(&event), event.id);
            if !startable {
                done.push(Done::skipped(event));
                continue;
            }
            match self.message(&event) {
                Ok(message) => {
                    messages.push(message);
                    going.push(event);
                }
                Err(e) => {
                    self.inflight.sent(owner_of(&event), event.id);
                    done.push(Done {
                        event,
                        sent: Sent::Failed(e),
                        took: None,
                    });
                }
            }
        }
        if going.is_empty() {
            return done;
        }
        // Runs inside the call's `outbox_batch` span (see slots.rs): one link per message.
        #[cfg(feature = "opentelemetry")]
        for message in &messages {
            crate::otel::link_send_span(&tracing::Span::current(), message);
        }
        let started = Instant::now();
        let publish =
            std::panic::AssertUnwindSafe(self.publisher.publish_batch(&messages)).catch_unwind();
        let results: Vec<Result<(), PublishError>> =
            match tokio::time::timeout(self.timeout, publish).await {
                Ok(Ok(results)) => results,
                Ok(Err(panic)) => vec![Err(panicked(&panic)); going.len()],
                Err(_) => vec![Err(self.timed_out()); going.len()],
            };
        let took = started.elapsed();
        let answered = results.len();
        let mut results = results.into_iter();
        // The call's duration is recorded once (with its first event), not once per event.
        let mut took = Some(took);
        for event in going {
            self.inflight.sent(owner_of(&event), event.id);
            let sent = match results.next() {
                Some(Ok(())) => Sent::Ok,
                Some(Err(e)) => Sent::Failed(e),
                None => Sent::Failed(PublishError::retryable(format!(
                    "the publisher returned {answered} results for {} messages",
                    messages.len()
                ))),
            };
            done.push(Done {
                event,
                sent,
                took: took.take(),
            });
        }
        done
    }

    /// The error of a send the worker gave up on after the send timeout.
    fn timed_out(&self) -> PublishError {
        PublishError::retryable(format!(
            "send timed out after {} ms",
            self.timeout.as_millis()
        ))
    }
}

/// `done` (one key's run) in id order, every event after the first one not delivered turned
/// into [`Sent::Skipped`], so it is sent again after the failed one.
fn stop_at_first_failure(mut done: Vec<Done>) -> Vec<Done> {
    done.sort_by_key(|d| d.event.id);
    let mut failed = false;
    for d in &mut done {
        if failed {
            if matches!(d.sent, Sent::Ok) {
                tracing::warn!(
                    event_id = d.event.id,
                    "ordered mode: the publisher delivered an event after an earlier one of its \
                     key failed in the same batch; it is sent again after that one"
                );
            }
            d.sent = Sent::Skipped;
        } else if !matches!(d.sent, Sent::Ok) {
            failed = true;
        }
    }
    done
}

/// The error of a publish call that panicked (retryable: the publisher's bug, not the event's).
fn panicked(panic: &Box<dyn std::any::Any + Send>) -> PublishError {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    PublishError::retryable(format!("publisher panicked: {what}"))
}
