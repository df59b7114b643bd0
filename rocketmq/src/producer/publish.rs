//! [`RocketMqPublisher`] as the relay's [`Publisher`], and the messages it builds: one per event,
//! batch messages, and the outcome of a send.
use super::*;

#[async_trait]
impl Publisher for RocketMqPublisher {
    /// Sends the event's message once. Under [`Failover::Outbox`] the queue is chosen here
    /// ([`Failover`]); the outcome of the send updates which brokers are avoided. Never sent a
    /// second time within one call: a failure is returned (retryable unless the message itself
    /// was refused) and the outbox's retry sends it again, to another broker if this one failed.
    ///
    /// An [`OutboxMessage::ordered`] message goes to its key's queue instead, whatever the
    /// [`Failover`] mode: the queue `biz_no`'s Java `String.hashCode()` picks among the
    /// route's queues (the rule of Java's `SelectMessageQueueByHash`), so that every relay
    /// sends one key to one queue and an orderly consumer sees the key in order. No broker is
    /// avoided for it: while its queue's broker is down its sends fail (retryable) and the key
    /// waits, the other keys go on; the outcome still updates the avoidance memory.
    async fn publish(&self, event: &OutboxMessage) -> Result<(), PublishError> {
        let message = self.to_message(event)?;
        let key = event.ordered.then_some(event.biz_no.as_str());
        self.send(Outgoing::One(message), event.event_id, 1, key)
            .await
    }

    /// Sends `events` as RocketMQ batch messages: one per topic ([`RocketMqConfig::topic_of`])
    /// and at most [`RocketMqConfig::max_batch_bytes`] of encoded messages each (the
    /// client's wire encoding), in event order, the topics' batches concurrently. A batch goes
    /// to one queue of one broker and is stored all or nothing, so each event's result is its
    /// batch's. One topic's batches go one after the other, in event order.
    ///
    /// An event whose message alone exceeds `max_batch_bytes` is sent alone, and fails alone
    /// (permanently: the client refuses it, `MESSAGE_ILLEGAL`) when its body exceeds
    /// [`RocketMqConfig::max_message_bytes`]; so does an event with an empty body. A batch
    /// refused for good anyway is sent again message by message (concurrently, within the same
    /// call), so that only the message at fault becomes a dead letter. A batch that failed
    /// otherwise (time-out, broker down or busy) fails for each of its events, retryable, and
    /// the relay puts each back with its own back-off; under [`Failover::Outbox`] its broker is
    /// then avoided like after a failed single send. Never sent a second time within one call
    /// except in the permanent case above, whose first attempt the broker refused.
    ///
    /// Ordered messages ([`OutboxMessage::ordered`]; when any message of the call is, all are
    /// treated so): per key, chunks of consecutive messages of one topic (at most
    /// `max_batch_bytes` each) in event order, sent one after the other to the key's queue
    /// (see [`Publisher::publish`] here); after a key's first failed chunk its later messages
    /// are not sent and fail retryably ("not sent: an earlier event of key K failed ...").
    /// Different keys go concurrently. A chunk refused for good is sent again message by
    /// message in order, stopping at the first failure.
    async fn publish_batch(&self, events: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        if events.iter().any(|e| e.ordered) {
            return self.publish_batch_ordered(events).await;
        }
        let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; events.len()];
        let mut chunks: Vec<(String, Vec<usize>, Vec<(i64, Message)>, usize)> = Vec::new();
        let limit = self.config.max_batch_bytes as usize;
        // Per topic, the chunk being filled (an index into `chunks`).
        let mut open: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, event) in events.iter().enumerate() {
            let mut message = match self.to_message(event) {
                Ok(m) => m,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            // Set here (the client would set it while sending) so that the size is the one sent.
            MessageClientIDSetter::set_uniq_id(&mut message);
            let size = encode_message(&message).len();
            let topic = self.config.topic_of(&event.event_type);
            // Alone: too large for a batch, refused by the client anyway (over the message
            // limit, or an empty body), so that it cannot fail a batch of others.
            let alone = size > limit
                || event.payload.is_empty()
                || event.payload.len() > self.config.max_message_bytes as usize;
            let fits = open
                .get(topic)
                .is_some_and(|&c| !alone && chunks[c].3 + size <= limit);
            if fits {
                let c = open[topic];
                chunks[c].1.push(i);
                chunks[c].2.push((event.event_id, message));
                chunks[c].3 += size;
            } else {
                chunks.push((
                    topic.to_owned(),
                    vec![i],
                    vec![(event.event_id, message)],
                    size,
                ));
                if alone {
                    open.remove(topic);
                } else {
                    open.insert(topic, chunks.len() - 1);
                }
            }
        }
        // One topic's chunks one after the other (the broker keeps a topic's events in the
        // order given), the topics concurrently.
        let mut by_topic: Vec<(String, Vec<(Vec<usize>, Vec<(i64, Message)>)>)> = Vec::new();
        for (topic, idx, msgs, _) in chunks {
            match by_topic.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, list)) => list.push((idx, msgs)),
                None => by_topic.push((topic, vec![(idx, msgs)])),
            }
        }
        let per_topic = by_topic.into_iter().map(|(_, list)| async move {
            let mut outcomes = Vec::new();
            for (idx, msgs) in list {
                outcomes.push((idx, self.send_chunk(msgs, None).await));
            }
            outcomes
        });
        for (idx, sent) in futures::future::join_all(per_topic)
            .await
            .into_iter()
            .flatten()
        {
            for (i, outcome) in idx.into_iter().zip(sent) {
                results[i] = Some(outcome);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
            .collect()
    }

    /// `true`: [`Publisher::publish_batch`] sends RocketMQ batch messages.
    fn batches(&self) -> bool {
        true
    }
}

/// A send in flight under [`Failover::Outbox`]: dropped before it finished (the caller gave up
/// on it, e.g. the worker's send timeout), it counts as a failure of the broker it chose.
pub(super) struct PendingSend<'a> {
    pub(super) avoidance: &'a BrokerAvoidance,
    pub(super) chosen: &'a Mutex<Option<String>>,
    pub(super) finished: bool,
}

impl Drop for PendingSend<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let broker = self
            .chosen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(broker) = broker {
            if self.avoidance.failed(&broker, Instant::now()) == Failed::NewlyAvoided {
                tracing::warn!(%broker, avoid_ms = self.avoidance.window().as_millis() as u64,
                    "RocketMQ send to a broker was given up (no answer in time); other brokers take the sends");
            }
        }
    }
}

/// How long after its `send_timeout` the publisher gives up a send the client has not answered
/// (500 milliseconds): the client's own timeout comes first whenever it bounds the send.
pub(super) const SEND_DEADLINE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The retryable error of a send the client did not answer within `timeout_ms`
/// milliseconds (the configured `send_timeout`).
pub(super) fn no_answer_in_time(timeout_ms: u64) -> PublishError {
    PublishError::retryable(format!(
        "RocketMQ send timed out: no answer from the client within the send_timeout of \
         {timeout_ms} ms"
    ))
}

/// What a send's result means for the event (`signer`: the credentials in use, for the text of
/// a `NO_PERMISSION` answer).
pub(super) fn send_outcome(
    first_id: i64,
    count: usize,
    sent: ClientResult<Option<SendResult>>,
    signer: Signer<'_>,
) -> Result<(), PublishError> {
    match sent {
        Ok(Some(result)) if result.send_status == SendStatus::SendOk => {
            tracing::debug!(
                event_id = first_id,
                events = count,
                msg_id = result.msg_id.as_ref().map_or("-", |m| m.as_str()),
                offset_msg_id = result.offset_msg_id.as_deref().unwrap_or("-"),
                queue_id = result.message_queue.as_ref().map_or(-1, |q| q.queue_id()),
                queue_offset = result.queue_offset,
                broker = result
                    .message_queue
                    .as_ref()
                    .map_or("-", |q| q.broker_name().as_str()),
                "RocketMQ send ok"
            );
            Ok(())
        }
        Ok(Some(result)) => Err(PublishError::retryable(format!(
            "RocketMQ send status {:?} (not SEND_OK; msgId {})",
            result.send_status,
            result.msg_id.as_ref().map_or("-", |m| m.as_str())
        ))),
        Ok(None) => Err(PublishError::retryable("RocketMQ send returned no result")),
        Err(e) => Err(classify_for(&e, signer)),
    }
}

/// Longest the credentials check at start may take.
pub(super) const VERIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks a broker for the maximum offset of a queue of `config.topic` (or of `TBW102` when the
/// topic has no route yet), a signed read-only request: `NO_PERMISSION` means the credentials
/// (or their absence) are rejected. When no broker can be asked the check is skipped (INFO).
///
/// # Errors
/// [`OutboxError::InvalidConfig`] naming the access key when the broker answers
/// `NO_PERMISSION`.
pub(super) async fn verify_credentials(
    producer: &mut DefaultMQProducer,
    config: &RocketMqConfig,
) -> Result<(), OutboxError> {
    let check = async {
        let mut queue = None;
        let mut why = String::new();
        for topic in [
            config.topic.as_str(),
            TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC,
        ] {
            match Box::pin(producer.fetch_publish_message_queues(topic)).await {
                Ok(queues) if !queues.is_empty() => {
                    queue = queues.into_iter().next();
                    break;
                }
                Ok(_) => why = format!("no queues for {topic}"),
                Err(e) => why = format!("no route for {topic}: {}", client_error_text(&e)),
            }
        }
        let Some(queue) = queue else {
            return Err(why);
        };
        match Box::pin(producer.max_offset(&queue)).await {
            Ok(_) => {
                tracing::debug!(topic = %queue.topic(), broker = %queue.broker_name(), "RocketMQ broker accepted the publisher's credentials");
                Ok(true)
            }
            Err(e) if is_no_permission(&e) => Ok(false),
            Err(e) => Err(client_error_text(&e)),
        }
    };
    match tokio::time::timeout(VERIFY_TIMEOUT, check).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(OutboxError::InvalidConfig(no_permission_text(Signer::of(
            config.credentials.as_ref(),
        )))),
        Ok(Err(why)) => {
            tracing::info!(reason = %why, "RocketMQ credentials not checked at start (no broker could be asked); a rejection by the broker later keeps events WAIT, uncounted");
            Ok(())
        }
        Err(_) => {
            tracing::info!(
                timeout_ms = VERIFY_TIMEOUT.as_millis() as u64,
                "RocketMQ credentials not checked at start (no answer in time)"
            );
            Ok(())
        }
    }
}

/// What one send carries: one message, or a batch of one topic's messages.
pub(super) enum Outgoing {
    One(Message),
    Batch(MessageBatch),
}

/// `messages` (one topic, each with its unique id set) as one RocketMQ batch message, built as
/// the client builds one (`DefaultMQProducer::batch`): the messages encoded one after another
/// in the batch's body, the batch with a unique id of its own.
///
/// # Errors
/// A permanent [`PublishError`] when the client refuses to batch them (topics differ).
pub(super) fn batch_message(messages: Vec<Message>) -> Result<MessageBatch, PublishError> {
    let mut batch = MessageBatch::generate_from_messages(messages).map_err(|e| {
        PublishError::permanent(format!(
            "RocketMQ batch could not be built: {}",
            error_text(&e)
        ))
    })?;
    for message in &mut batch.messages {
        MessageClientIDSetter::set_uniq_id(message);
    }
    MessageClientIDSetter::set_uniq_id(&mut batch.final_message);
    let body = encode_messages(&batch.messages);
    batch.set_body(body);
    Ok(batch)
}

/// The message for `event` on `topic` (see [`RocketMqPublisher::to_message`]).
pub(super) fn build_message(topic: &str, event: &OutboxMessage) -> Result<Message, PublishError> {
    let mut builder = Message::builder()
        .topic(topic)
        .tags(event.event_type.as_str())
        .key(event.biz_no.as_str())
        .body_slice(event.payload.as_bytes());
    if let Some((name, _)) = event.headers.iter().find(|(n, _)| limits::is_reserved(n)) {
        return Err(PublishError::permanent(format!(
            "event {}: the header name {name} is reserved for RocketMQ's own properties",
            event.event_id
        )));
    }
    let fixed = event.properties();
    let headers = event.headers.iter().map(|(n, v)| (n.as_str(), v.clone()));
    for (name, value) in fixed.into_iter().chain(headers) {
        builder = builder.raw_property(name, value).map_err(|e| {
            PublishError::permanent(format!("message property {name}: {}", error_text(&e)))
        })?;
    }
    builder.build().map_err(|e| {
        PublishError::permanent(format!("message could not be built: {}", error_text(&e)))
    })
}
