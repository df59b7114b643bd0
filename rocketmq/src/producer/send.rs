//! How [`RocketMqPublisher`] sends: one message or batch to a queue, and an ordered batch cut
//! into each key's chunks.
use super::*;

impl RocketMqPublisher {
    /// Sends `message` (carrying `count` events, the first `first_id`) once. With `key` (an
    /// ordered message's `biz_no`) to the key's queue ([`queue_of_key`]) whatever the
    /// [`Failover`] mode, with no broker avoidance (the key waits for its queue's broker);
    /// otherwise under [`Failover::Outbox`] to a queue chosen here, else as the client
    /// chooses. Under [`Failover::Outbox`] the outcome updates which brokers are avoided.
    pub(super) async fn send(
        &self,
        message: Outgoing,
        first_id: i64,
        count: usize,
        key: Option<&str>,
    ) -> Result<(), PublishError> {
        let timeout = u64::from(self.config.send_timeout_ms());
        let signer = Signer::of(self.config.credentials.as_ref());
        let avoidance = self.avoidance.as_ref();
        // The client's own timeout does not bound everything a send does (a route lookup
        // through unreachable name servers can outlast it): the send is given up here too, as
        // a retryable error, `SEND_DEADLINE_GRACE` after `send_timeout`, so that the client's
        // own timeout wins whenever it works (its error names the broker and its fault
        // tolerance learns of a hung broker).
        let deadline = self.config.send_timeout + SEND_DEADLINE_GRACE;
        if key.is_none() && avoidance.is_none() {
            let sending = async {
                match message {
                    Outgoing::One(message) => self.producer.send(message, timeout).await,
                    Outgoing::Batch(batch) => self
                        .producer
                        .send_batch(batch.messages, timeout)
                        .await
                        .map(Some),
                }
            };
            return match tokio::time::timeout(deadline, sending).await {
                Ok(sent) => send_outcome(first_id, count, sent, signer),
                Err(_) => Err(no_answer_in_time(timeout)),
            };
        }
        let chosen: Mutex<Option<String>> = Mutex::new(None);
        let select = |queues: &[MessageQueue]| {
            let i = match (key, avoidance) {
                (Some(key), _) => queue_of_key(key, queues.len())?,
                (None, Some(avoidance)) => {
                    let brokers: Vec<&str> =
                        queues.iter().map(|q| q.broker_name().as_str()).collect();
                    avoidance.choose(&brokers, Instant::now())?
                }
                (None, None) => return None, // handled above
            };
            let queue = queues.get(i)?;
            *chosen.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(queue.broker_name().as_str().to_owned());
            Some(queue.clone())
        };
        // The worker's own send timeout may drop this future before the client's timeout
        // returns (both are `send_timeout` by default): the broker chosen then counts as failed
        // too, or a hung broker would stay in the round robin.
        let mut pending = avoidance.map(|avoidance| PendingSend {
            avoidance,
            chosen: &chosen,
            finished: false,
        });
        let sent = tokio::time::timeout(
            deadline,
            self.producer.send_selecting(message, timeout, &select),
        )
        .await;
        let Ok(sent) = sent else {
            // `pending`, not finished, counts the chosen broker as failed when dropped.
            drop(pending);
            return Err(no_answer_in_time(timeout));
        };
        if let Some(p) = pending.as_mut() {
            p.finished = true;
        }
        drop(pending);
        let outcome = send_outcome(first_id, count, sent, signer);
        let broker = chosen.into_inner().unwrap_or_else(|p| p.into_inner());
        if let (Some(avoidance), Some(broker)) = (avoidance, broker) {
            match &outcome {
                Ok(()) => {
                    if avoidance.succeeded(&broker) {
                        tracing::info!(%broker, "RocketMQ broker answers again; sending to it");
                    }
                }
                Err(e) if e.kind == PublishErrorKind::Retryable => {
                    if avoidance.failed(&broker, Instant::now()) == Failed::NewlyAvoided {
                        tracing::warn!(%broker, avoid_ms = avoidance.window().as_millis() as u64,
                            error = %e.message, "RocketMQ send to a broker failed; other brokers take the sends");
                    }
                }
                Err(_) => {}
            }
        }
        outcome
    }

    /// Sends one chunk of [`Publisher::publish_batch`]: a lone message as itself, several as
    /// one batch message; with `key` (ordered messages of one `biz_no`) to the key's queue.
    /// A batch refused for good is sent again message by message, so that only the message at
    /// fault fails for good (with `key` one after the other, stopping at the first failure:
    /// the rest are not sent); any other failure is every message's.
    pub(super) async fn send_chunk(
        &self,
        chunk: Vec<(i64, Message)>,
        key: Option<&str>,
    ) -> Vec<Result<(), PublishError>> {
        if chunk.len() == 1 {
            let (id, message) = chunk.into_iter().next().expect("one message");
            return vec![self.send(Outgoing::One(message), id, 1, key).await];
        }
        let first_id = chunk[0].0;
        let n = chunk.len();
        let messages: Vec<Message> = chunk.iter().map(|(_, m)| m.clone()).collect();
        let outcome = match batch_message(messages) {
            Ok(batch) => self.send(Outgoing::Batch(batch), first_id, n, key).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => vec![Ok(()); n],
            Err(e) if e.kind == PublishErrorKind::Permanent => {
                tracing::warn!(first_event_id = first_id, events = n, error = %e.message,
                    "RocketMQ refused a batch for good; sending its messages one by one");
                if let Some(key) = key {
                    // In order: a later message of the key must not overtake an earlier one.
                    let mut results = Vec::with_capacity(n);
                    let mut failed = false;
                    for (id, message) in chunk {
                        if failed {
                            results.push(Err(not_sent_after_failure(key)));
                            continue;
                        }
                        let r = self.send(Outgoing::One(message), id, 1, Some(key)).await;
                        failed = r.is_err();
                        results.push(r);
                    }
                    return results;
                }
                // Concurrently: within the relay's one send timeout for the whole call, so
                // that the retry of the innocent messages takes one round trip, not n.
                let singles = chunk
                    .into_iter()
                    .map(|(id, message)| self.send(Outgoing::One(message), id, 1, None));
                futures::future::join_all(singles).await
            }
            Err(e) => vec![Err(e); n],
        }
    }

    /// The message of `event` for a batch, its unique id set (so that its encoded size is the
    /// one sent), its encoded size, and whether it must go alone: too large for a batch, or
    /// refused by the client anyway (over the message limit, or an empty body), so that it
    /// cannot fail a batch of others.
    pub(super) fn batch_item(
        &self,
        event: &OutboxMessage,
    ) -> Result<(Message, usize, bool), PublishError> {
        let mut message = self.to_message(event)?;
        MessageClientIDSetter::set_uniq_id(&mut message);
        let size = encode_message(&message).len();
        let alone = size > self.config.max_batch_bytes as usize
            || event.payload.is_empty()
            || event.payload.len() > self.config.max_message_bytes as usize;
        Ok((message, size, alone))
    }

    /// [`Publisher::publish_batch`] of an ordered relay's messages: per key, chunks of
    /// consecutive messages of one topic in event order ([`ordered_chunks`]), sent one after
    /// the other to the key's queue; after a key's first failure its later messages are not
    /// sent (a retryable "not sent" error each). Different keys go concurrently.
    pub(super) async fn publish_batch_ordered(
        &self,
        events: &[OutboxMessage],
    ) -> Vec<Result<(), PublishError>> {
        let limit = self.config.max_batch_bytes as usize;
        let mut built: Vec<Option<Result<Message, PublishError>>> =
            Vec::with_capacity(events.len());
        let mut items = Vec::with_capacity(events.len());
        for event in events {
            let topic = self.config.topic_of(&event.event_type);
            match self.batch_item(event) {
                Ok((message, size, alone)) => {
                    built.push(Some(Ok(message)));
                    items.push(ChunkItem {
                        key: event.biz_no.as_str(),
                        topic: Some(topic),
                        size,
                        alone,
                    });
                }
                Err(e) => {
                    built.push(Some(Err(e)));
                    items.push(ChunkItem {
                        key: event.biz_no.as_str(),
                        topic: None,
                        size: 0,
                        alone: true,
                    });
                }
            }
        }
        // Each key's steps, the messages moved in.
        let plan: Vec<(&str, Vec<KeyStep>)> = ordered_chunks(&items, limit)
            .into_iter()
            .map(|(key, chunks)| {
                let steps = chunks
                    .into_iter()
                    .map(|idx| {
                        let mut messages = Vec::with_capacity(idx.len());
                        let mut broken = None;
                        for &i in &idx {
                            match built[i].take() {
                                Some(Ok(m)) => messages.push((events[i].event_id, m)),
                                Some(Err(e)) => broken = Some(e),
                                None => {}
                            }
                        }
                        let step = match broken {
                            Some(e) => Step::Broken(e),
                            None => Step::Send(messages),
                        };
                        (idx, step)
                    })
                    .collect();
                (key, steps)
            })
            .collect();
        let per_key = plan.into_iter().map(|(key, steps)| async move {
            let mut outcomes: Vec<(usize, Result<(), PublishError>)> = Vec::new();
            let mut failed = false;
            for (idx, step) in steps {
                if failed {
                    outcomes.extend(
                        idx.into_iter()
                            .map(|i| (i, Err(not_sent_after_failure(key)))),
                    );
                    continue;
                }
                let sent = match step {
                    Step::Broken(e) => vec![Err(e)],
                    Step::Send(messages) => self.send_chunk(messages, Some(key)).await,
                };
                failed = sent.iter().any(Result::is_err);
                outcomes.extend(idx.into_iter().zip(sent));
            }
            outcomes
        });
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; events.len()];
        for (i, outcome) in futures::future::join_all(per_key)
            .await
            .into_iter()
            .flatten()
        {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
            .collect()
    }
}

/// One step of a key in [`RocketMqPublisher::publish_batch_ordered`] and the indices of its
/// events in the call.
pub(super) type KeyStep = (Vec<usize>, Step);

/// The topic and encoded size of a key's open chunk in [`ordered_chunks`] (`None`: closed).
pub(super) type OpenChunk<'a> = Option<(&'a str, usize)>;

/// One step of a key in [`RocketMqPublisher::publish_batch_ordered`].
pub(super) enum Step {
    /// A chunk to send (event id, message), in event order.
    Send(Vec<(i64, Message)>),
    /// An event whose message could not be built: it fails, and stops its key.
    Broken(PublishError),
}

/// The error of an ordered message not sent because an earlier message of its key failed in
/// the same call (retryable: it goes again after that one).
pub(super) fn not_sent_after_failure(key: &str) -> PublishError {
    PublishError::retryable(format!(
        "not sent: an earlier event of key {key} failed in the same batch"
    ))
}

/// What [`ordered_chunks`] knows of one message.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkItem<'a> {
    /// Its business key.
    pub(super) key: &'a str,
    /// Its topic; `None` when its message could not be built (it is a chunk of its own).
    pub(super) topic: Option<&'a str>,
    /// Its encoded size in bytes.
    pub(super) size: usize,
    /// Whether it must be sent alone (a chunk of its own).
    pub(super) alone: bool,
}

/// The chunks of an ordered batch: for each key, in the order of the key's first message,
/// the indices into `items` of its chunks in message order. A chunk holds consecutive
/// messages of the key with one topic and at most `limit` encoded bytes; a message that must
/// go alone, or could not be built, is a chunk of its own.
pub(super) fn ordered_chunks<'a>(
    items: &[ChunkItem<'a>],
    limit: usize,
) -> Vec<(&'a str, Vec<Vec<usize>>)> {
    let mut keys: Vec<(&'a str, Vec<Vec<usize>>)> = Vec::new();
    // Per key: its position in `keys`, and the open chunk's topic and size (`None`: closed).
    let mut open: std::collections::HashMap<&'a str, (usize, OpenChunk<'a>)> =
        std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let (k, current) = *open.entry(item.key).or_insert_with(|| {
            keys.push((item.key, Vec::new()));
            (keys.len() - 1, None)
        });
        let chunks = &mut keys[k].1;
        let next = match (item.topic, current) {
            (Some(topic), Some((t, size)))
                if !item.alone && t == topic && size + item.size <= limit =>
            {
                chunks.last_mut().expect("an open chunk").push(i);
                Some((topic, size + item.size))
            }
            (Some(topic), _) if !item.alone => {
                chunks.push(vec![i]);
                Some((topic, item.size))
            }
            _ => {
                chunks.push(vec![i]);
                None
            }
        };
        open.insert(item.key, (k, next));
    }
    keys
}
