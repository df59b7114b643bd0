//! One slot's sends: a claimed event, a claim's events in one call (batch sends), or one key's
//! run (ordered mode), published in a task of its own, each call within the send timeout.
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
    /// Ordered mode: a slot carries one key's run, and every message built here carries
    /// [`OutboxMessage::ordered`].
    pub(crate) ordered: bool,
    /// The publisher batches and batch sends are on: a slot's events go out in one call.
    pub(crate) batching: bool,
}

impl SendContext {
    /// Sends one slot's events: in one [`SendContext::call`] with `batching`, else one call per
    /// event, one after the other. In ordered mode (one key's run, in id order) it stops at the
    /// first event not delivered: the rest are [`Sent::Skipped`], back to `WAIT` uncounted
    /// behind it.
    pub(crate) async fn run(self, events: Vec<Model>) -> Vec<Done> {
        match (self.batching, self.ordered) {
            (true, true) => stop_at_first_failure(self.call(events).await),
            (true, false) => self.call(events).await,
            (false, _) => {
                let mut done = Vec::with_capacity(events.len());
                let mut stop = false;
                for event in events {
                    let d = if stop {
                        vec![Done::skipped(event)]
                    } else {
                        self.call(vec![event]).await
                    };
                    stop = self.ordered && !matches!(d[0].sent, Sent::Ok);
                    done.extend(d);
                }
                done
            }
        }
    }

    /// Sends `events` in one publish call within one send timeout: [`Publisher::publish_batch`]
    /// with `batching`, else [`Publisher::publish`] of the one event. Events that cannot start
    /// (shutdown began, or the lease was lost) are skipped, an invalid row fails alone (in
    /// ordered mode the events after either are skipped), and a timeout or panic fails every
    /// event of the call (retryable).
    async fn call(&self, events: Vec<Model>) -> Vec<Done> {
        let mut done = Vec::with_capacity(events.len());
        let mut going = Vec::with_capacity(events.len());
        let mut messages = Vec::with_capacity(events.len());
        let mut stopped = false;
        for event in events {
            let startable = !stopped
                && !self.cancel.is_cancelled()
                && self.inflight.start(owner_of(&event), event.id);
            if !startable {
                done.push(Done::skipped(event));
                stopped = self.ordered;
                continue;
            }
            match OutboxMessage::try_from(&event) {
                Ok(message) => {
                    messages.push(message.with_ordered(self.ordered));
                    going.push(event);
                }
                Err(e) => {
                    self.inflight.sent(owner_of(&event), event.id);
                    done.push(Done {
                        event,
                        sent: Sent::Failed(e),
                        took: None,
                    });
                    stopped = self.ordered;
                }
            }
        }
        if going.is_empty() {
            return done;
        }
        // Runs inside the slot's span (see slots.rs): one link per message.
        #[cfg(feature = "opentelemetry")]
        for message in &messages {
            crate::otel::link_send_span(&tracing::Span::current(), message);
        }
        let started = Instant::now();
        let results = if self.batching {
            let publish = self.publisher.publish_batch(&messages);
            let results = self.guarded(publish).await;
            results.unwrap_or_else(|e| vec![Err(e); going.len()])
        } else {
            let publish = self.publisher.publish(&messages[0]);
            vec![self.guarded(publish).await.and_then(|sent| sent)]
        };
        // The call's duration is recorded once (with its first event), not once per event.
        let mut took = Some(started.elapsed());
        let answered = results.len();
        let mut results = results.into_iter();
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

    /// Runs a publish call within the send timeout; a timeout or a panic (the publisher's bug,
    /// not the event's) is a retryable error of the call, not of the whole worker.
    async fn guarded<T>(
        &self,
        publish: impl std::future::Future<Output = T>,
    ) -> Result<T, PublishError> {
        let publish = std::panic::AssertUnwindSafe(publish).catch_unwind();
        match tokio::time::timeout(self.timeout, publish).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(panic)) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(PublishError::retryable(format!(
                    "publisher panicked: {what}"
                )))
            }
            Err(_) => Err(PublishError::retryable(format!(
                "send timed out after {} ms",
                self.timeout.as_millis()
            ))),
        }
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
