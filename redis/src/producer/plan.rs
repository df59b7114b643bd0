//! Which messages of a batch go out in which pipeline ("wave"), and their results.
//!
//! Unordered messages all go in the first wave. In ordered mode a wave carries at most one
//! message per key, so that a key's message is only sent once the previous one of the key was
//! added: after a failed one, the key's later messages are not sent and get a retryable error.
//! One wave per event of the busiest key in the batch, each a single pipeline.
use std::collections::HashSet;

use sea_orm_outbox::{OutboxMessage, PublishError};

/// The results of one batch, filled wave by wave.
pub(super) struct Plan<'a> {
    messages: &'a [OutboxMessage],
    results: Vec<Option<Result<(), PublishError>>>,
    /// Ordered mode: keys with a failed message in this batch.
    failed_keys: HashSet<&'a str>,
}

impl<'a> Plan<'a> {
    /// A plan for `messages`, nothing sent yet.
    pub(super) fn new(messages: &'a [OutboxMessage]) -> Self {
        Plan {
            messages,
            results: vec![None; messages.len()],
            failed_keys: HashSet::new(),
        }
    }

    /// The next wave: the index and command of each message to send now, in batch order.
    /// `build` makes a message's command; a message it refuses gets that error as its result
    /// (and in ordered mode fails its key). A message of a key with an earlier failure gets a
    /// retryable error. Empty when every message has its result.
    pub(super) fn next_wave<C>(
        &mut self,
        mut build: impl FnMut(&OutboxMessage) -> Result<C, PublishError>,
    ) -> Vec<(usize, C)> {
        let mut keys_in_wave: HashSet<&str> = HashSet::new();
        let mut wave = Vec::new();
        for (i, m) in self.messages.iter().enumerate() {
            if self.results[i].is_some() {
                continue;
            }
            let key = m.biz_no.as_str();
            if m.ordered && self.failed_keys.contains(key) {
                self.results[i] = Some(Err(PublishError::retryable(format!(
                    "not sent: an earlier event of key {key} failed in the same batch"
                ))));
                continue;
            }
            if m.ordered && keys_in_wave.contains(key) {
                continue;
            }
            match build(m) {
                Ok(cmd) => {
                    wave.push((i, cmd));
                    if m.ordered {
                        keys_in_wave.insert(key);
                    }
                }
                Err(e) => self.record(i, Err(e)),
            }
        }
        wave
    }

    /// Records message `i`'s result; in ordered mode a failure fails its key.
    pub(super) fn record(&mut self, i: usize, result: Result<(), PublishError>) {
        let m = &self.messages[i];
        if m.ordered && result.is_err() {
            self.failed_keys.insert(m.biz_no.as_str());
        }
        self.results[i] = Some(result);
    }

    /// One result per message, in order; a message without one gets `unsent` (retryable).
    pub(super) fn finish(self, unsent: &str) -> Vec<Result<(), PublishError>> {
        self.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable(unsent))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(keys: &[(i64, &str)], ordered: bool) -> Vec<OutboxMessage> {
        keys.iter()
            .map(|(id, key)| OutboxMessage::new(*id, *key, "E", "{}").with_ordered(ordered))
            .collect()
    }

    /// Sends waves, failing the ids in `fail` (and refusing to build `refuse`); returns the
    /// waves' ids and whether each message ended Ok.
    fn run(messages: &[OutboxMessage], fail: &[i64], refuse: &[i64]) -> (Vec<Vec<i64>>, Vec<bool>) {
        let mut plan = Plan::new(messages);
        let mut waves = Vec::new();
        loop {
            let wave = plan.next_wave(|m| {
                if refuse.contains(&m.event_id) {
                    Err(PublishError::permanent("too large"))
                } else {
                    Ok(m.event_id)
                }
            });
            if wave.is_empty() {
                break;
            }
            waves.push(wave.iter().map(|(_, id)| *id).collect());
            for (i, id) in wave {
                let r = if fail.contains(&id) {
                    Err(PublishError::retryable("scripted"))
                } else {
                    Ok(())
                };
                plan.record(i, r);
            }
        }
        let ok = plan.finish("unsent").iter().map(Result::is_ok).collect();
        (waves, ok)
    }

    #[test]
    fn unordered_messages_go_in_one_wave() {
        let m = batch(&[(1, "A"), (2, "A"), (3, "B"), (4, "A")], false);
        let (waves, ok) = run(&m, &[2], &[3]);
        assert_eq!(waves, [vec![1, 2, 4]]);
        assert_eq!(ok, [true, false, false, true]);
    }

    #[test]
    fn ordered_keys_go_one_message_per_wave_and_stop_at_a_failure() {
        let m = batch(
            &[(1, "A"), (2, "B"), (3, "A"), (4, "A"), (5, "B"), (6, "C")],
            true,
        );
        let (waves, ok) = run(&m, &[3], &[]);
        assert_eq!(waves, [vec![1, 2, 6], vec![3, 5]]);
        assert_eq!(ok, [true, true, false, false, true, true]);
    }

    #[test]
    fn an_ordered_message_refused_before_sending_fails_its_key() {
        let m = batch(&[(1, "A"), (2, "A"), (3, "A"), (4, "B")], true);
        let (waves, ok) = run(&m, &[], &[2]);
        assert_eq!(waves, [vec![1, 4]]);
        assert_eq!(ok, [true, false, false, true]);
        // Refused as the key's first message: the later ones are not sent.
        let (waves, ok) = run(&m, &[], &[1]);
        assert_eq!(waves, [vec![4]]);
        assert_eq!(ok, [false, false, false, true]);
    }
}
