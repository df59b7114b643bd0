//! Ordered batches sent in rounds, for publishers whose broker does not keep the order of the
//! messages within one request.
use std::collections::{HashMap, HashSet};
use std::future::Future;

use tokio::time::Instant;

use super::OutboxMessage;
use crate::error::PublishError;

/// Sends `messages` in rounds through `send`, so that no message of an ordered key
/// ([`OutboxMessage::ordered`]) goes out before the key's earlier one was accepted, and returns
/// one result per message, in the order given.
///
/// A round holds the next message of each ordered key, and the first round also every
/// unordered message, in batch order; there are as many rounds as the busiest key has messages.
/// `send` sends one round (as one broker request, a pipeline, or concurrent sends) and returns
/// one result per message of the round, in the round's order (a missing one counts as a
/// retryable failure, an extra one is ignored). Once a message of an ordered key fails, the
/// key's later messages are not sent and get a retryable error, as
/// [`crate::Publisher::publish_batch`] requires. A round whose turn comes at or after
/// `deadline` (the end of the send timeout; a `std::time::Instant` converts with
/// [`Instant::from_std`]) is not sent either: its messages, and those of every later round, fail
/// retryably.
pub async fn send_in_key_rounds<'m, F, Fut>(
    messages: &'m [OutboxMessage],
    deadline: Instant,
    mut send: F,
) -> Vec<Result<(), PublishError>>
where
    F: FnMut(Vec<&'m OutboxMessage>) -> Fut,
    Fut: Future<Output = Vec<Result<(), PublishError>>>,
{
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut next_round: HashMap<&str, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let round = if m.ordered {
            let n = next_round.entry(m.biz_no.as_str()).or_insert(0);
            *n += 1;
            *n - 1
        } else {
            0
        };
        if rounds.len() <= round {
            rounds.resize_with(round + 1, Vec::new);
        }
        rounds[round].push(i);
    }
    let mut results: Vec<Option<Result<(), PublishError>>> = vec![None; messages.len()];
    let mut failed: HashSet<&str> = HashSet::new();
    for round in rounds {
        let mut todo = Vec::with_capacity(round.len());
        for i in round {
            let m = &messages[i];
            if m.ordered && failed.contains(m.biz_no.as_str()) {
                results[i] = Some(Err(PublishError::retryable(format!(
                    "not sent: an earlier event of key {} failed in the same batch",
                    m.biz_no
                ))));
            } else {
                todo.push(i);
            }
        }
        if todo.is_empty() {
            continue;
        }
        if Instant::now() >= deadline {
            for i in todo {
                results[i] = Some(Err(PublishError::retryable(
                    "not sent: the send timeout passed before its turn",
                )));
            }
            continue;
        }
        let mut sent = send(todo.iter().map(|&i| &messages[i]).collect())
            .await
            .into_iter();
        for i in todo {
            let result = sent
                .next()
                .unwrap_or_else(|| Err(PublishError::retryable("not sent")));
            if result.is_err() && messages[i].ordered {
                failed.insert(messages[i].biz_no.as_str());
            }
            results[i] = Some(result);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(PublishError::retryable("not sent"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(keys: &[(i64, &str)], ordered: bool) -> Vec<OutboxMessage> {
        keys.iter()
            .map(|(id, key)| OutboxMessage::new(*id, *key, "E", "{}").with_ordered(ordered))
            .collect()
    }

    /// The results of [`run`].
    type Results = Vec<Result<(), PublishError>>;

    /// Sends in rounds, failing the ids in `fail`; returns the rounds' ids and the results.
    async fn run(messages: &[OutboxMessage], fail: &[i64]) -> (Vec<Vec<i64>>, Results) {
        let mut rounds = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let results = send_in_key_rounds(messages, deadline, |round| {
            rounds.push(round.iter().map(|m| m.event_id).collect::<Vec<_>>());
            let out = round
                .iter()
                .map(|m| {
                    if fail.contains(&m.event_id) {
                        Err(PublishError::retryable("scripted"))
                    } else {
                        Ok(())
                    }
                })
                .collect();
            async move { out }
        })
        .await;
        (rounds, results)
    }

    /// Whether each result is Ok.
    fn ok(results: &Results) -> Vec<bool> {
        results.iter().map(Result::is_ok).collect()
    }

    /// Unordered messages go in one round, whatever their keys; a failure fails only itself.
    #[tokio::test]
    async fn unordered_messages_go_in_one_round() {
        let m = batch(&[(1, "A"), (2, "A"), (3, "B")], false);
        let (rounds, results) = run(&m, &[1]).await;
        assert_eq!(rounds, vec![vec![1, 2, 3]]);
        assert_eq!(ok(&results), vec![false, true, true]);
    }

    /// A round holds one message per ordered key; after a failure the key's later messages
    /// are not sent and fail retryably, other keys go on.
    #[tokio::test]
    async fn an_ordered_key_stops_at_its_first_failure() {
        let m = batch(&[(1, "A"), (2, "B"), (3, "A"), (4, "A"), (5, "B")], true);
        let (rounds, results) = run(&m, &[3]).await;
        assert_eq!(rounds, vec![vec![1, 2], vec![3, 5]]);
        assert_eq!(ok(&results), vec![true, true, false, false, true]);
        let skipped = results[3].as_ref().expect_err("event 4 is not sent");
        assert!(skipped.is_retryable(), "{skipped:?}");
        assert!(
            skipped.message.contains("earlier event of key A"),
            "{skipped:?}"
        );
    }

    /// An unordered message of an ordered key's `biz_no` goes in the first round and does not
    /// stop the key; nothing is sent for an empty batch.
    #[tokio::test]
    async fn unordered_messages_never_stop_a_key() {
        let mut m = batch(&[(1, "A"), (2, "A")], false);
        m.extend(batch(&[(3, "A"), (4, "A")], true));
        let (rounds, results) = run(&m, &[1, 2]).await;
        assert_eq!(rounds, vec![vec![1, 2, 3], vec![4]]);
        assert_eq!(ok(&results), vec![false, false, true, true]);
        let (rounds, results) = run(&[], &[]).await;
        assert!(rounds.is_empty() && results.is_empty());
    }

    /// A round whose `send` returns too few results: the missing ones fail retryably, and fail
    /// their keys.
    #[tokio::test]
    async fn a_missing_result_is_a_retryable_failure() {
        let m = batch(&[(1, "A"), (2, "B"), (3, "A")], true);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let results = send_in_key_rounds(&m, deadline, |_round| async { vec![Ok(())] }).await;
        assert!(results[0].is_ok());
        assert!(results[1].as_ref().is_err_and(PublishError::is_retryable));
        assert!(results[2].is_ok(), "key A's first message was accepted");
    }

    /// A round whose turn comes after the deadline is not sent: its messages fail retryably.
    /// The clock is paused: it moves only when every task waits, so the first round starts
    /// before the deadline and its sleep ends exactly at it.
    #[tokio::test(start_paused = true)]
    async fn no_round_starts_after_the_deadline() {
        let m = batch(&[(1, "A"), (2, "A"), (3, "A")], true);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let mut sent = Vec::new();
        let results = send_in_key_rounds(&m, deadline, |round| {
            sent.extend(round.iter().map(|m| m.event_id));
            let n = round.len();
            async move {
                // The first round lasts until the deadline.
                tokio::time::sleep_until(deadline).await;
                vec![Ok(()); n]
            }
        })
        .await;
        assert_eq!(sent, vec![1], "only the first round is sent");
        assert!(results[0].is_ok());
        for late in &results[1..] {
            let e = late.as_ref().expect_err("not sent");
            assert!(e.is_retryable(), "{e:?}");
            assert!(e.message.contains("send timeout passed"), "{e:?}");
        }
    }
}
