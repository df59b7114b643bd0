//! The consumer that counts what arrived: a lite-pull consumer (an orderly push consumer in
//! ordered runs) in a group of the run's own, recording every reception of every `eventId`
//! and, in order, the first reception of each.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sea_orm_outbox_rocketmq::RocketMqConsumer;

use crate::scratch::BoxError;
use crate::Run;

/// What the consumer received.
#[derive(Default)]
pub struct Received {
    /// Receptions per event id.
    pub per_event: HashMap<i64, u32>,
    /// Where each reception came from: (queue id, queue offset, commit-log offset).
    pub places: HashMap<i64, Vec<(i32, i64, i64)>>,
    /// Every message received.
    pub total: u64,
    /// The first reception of each event, in the order received: (business key, event id).
    pub firsts: Vec<(String, i64)>,
    /// Messages without an `eventId`.
    pub without_id: u64,
    /// When each poll that returned messages returned (the consumer's receive times), with the
    /// distinct events received by then.
    pub arrivals: Vec<(Instant, usize)>,
}

/// The consumer task of a run.
pub struct Consumer {
    received: Arc<Mutex<Received>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Consumer {
    /// Starts consuming the run's topic in the group `chaos_cg_<run id>` (creating the topic
    /// when missing): orderly in ordered runs.
    pub async fn start(run: &Run) -> Result<Self, BoxError> {
        let group = format!("chaos_cg_{}", run.id);
        let consumer = if run.args.ordered.is_some() {
            RocketMqConsumer::start_orderly(&run.namesrv, &group, &run.topic).await?
        } else {
            RocketMqConsumer::start(&run.namesrv, &group, &run.topic).await?
        };
        let received = Arc::new(Mutex::new(Received::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let received = received.clone();
            let stop = stop.clone();
            async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch = consumer.poll(Duration::from_millis(500)).await;
                    let mut r = received.lock().unwrap_or_else(|p| p.into_inner());
                    let arrived = (!batch.is_empty()).then(Instant::now);
                    for m in batch {
                        r.total += 1;
                        match m.event_id {
                            Some(id) => {
                                let n = r.per_event.entry(id).or_default();
                                *n += 1;
                                if *n == 1 {
                                    r.firsts.push((m.keys.clone().unwrap_or_default(), id));
                                }
                                r.places.entry(id).or_default().push((
                                    m.queue_id,
                                    m.queue_offset,
                                    m.commit_log_offset,
                                ));
                            }
                            None => r.without_id += 1,
                        }
                    }
                    if let Some(at) = arrived {
                        let distinct = r.per_event.len();
                        r.arrivals.push((at, distinct));
                    }
                }
                consumer.shutdown().await;
            }
        });
        Ok(Consumer {
            received,
            stop,
            task,
        })
    }

    /// What was received so far, shared (for a fault that waits for a share of the events).
    pub fn shared(&self) -> Arc<Mutex<Received>> {
        self.received.clone()
    }

    /// What was received so far.
    pub fn received(&self) -> MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops consuming; returns everything received.
    pub async fn stop(self) -> Received {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.ok();
        let mut r = self.received.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *r)
    }
}
