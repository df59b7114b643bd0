//! Ordered mode's test publisher and settings, shared by the suites that run ordered relays.
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm_outbox::{
    InMemoryPublisher, OrderedPolicy, OutboxMessage, PublishError, Publisher, RetryPolicy,
    WorkerConfig,
};

/// Whether event `id` is one of the ~10 % whose first attempt fails (a hash of the id, so the
/// same events fail on every run and backend).
pub fn flaky(id: i64) -> bool {
    ((id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).is_multiple_of(10)
}

/// Publishes into memory and checks, as it goes, what ordered mode promises: never two sends
/// of one key at once, and no event delivered before every earlier (known) event of its key
/// was delivered. Optionally fails the first attempt of the [`flaky`] events (retryably) and
/// refuses the `poison` ids for good.
#[derive(Default)]
pub struct OrderCheck {
    pub sent: InMemoryPublisher,
    pub flaky: bool,
    pub attempts: Mutex<HashMap<i64, u32>>,
    pub poison: Mutex<HashSet<i64>>,
    /// The ids of each key the test wrote, ascending.
    pub keys: Mutex<HashMap<String, Vec<i64>>>,
    pub delivered: Mutex<HashMap<String, HashSet<i64>>>,
    pub in_flight: Mutex<HashSet<String>>,
    pub violations: Mutex<Vec<String>>,
    /// Batch sends: `publish_batch` sends its messages one by one and stops at the first
    /// failure (the rest fail unsent), as one RocketMQ batch request succeeds or fails whole.
    pub batching: bool,
    /// The messages of each `publish_batch` call (key, id).
    pub calls: Mutex<Vec<Vec<(String, i64)>>>,
}

impl OrderCheck {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn outcome(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let attempt = {
            let mut a = self.attempts.lock().unwrap();
            let n = a.entry(m.event_id).or_default();
            *n += 1;
            *n
        };
        if self.poison.lock().unwrap().contains(&m.event_id) {
            return Err(PublishError::permanent("scripted: refused for good"));
        }
        if self.flaky && attempt == 1 && flaky(m.event_id) {
            return Err(PublishError::retryable("scripted: first attempt fails"));
        }
        Ok(())
    }

    /// Records a delivery of `m`, checking that the earlier events of its key were delivered.
    fn delivered(&self, m: &OutboxMessage) {
        let missing = {
            let keys = self.keys.lock().unwrap();
            let mut delivered = self.delivered.lock().unwrap();
            let done = delivered.entry(m.biz_no.clone()).or_default();
            let missing = keys.get(&m.biz_no).and_then(|ids| {
                ids.iter()
                    .take_while(|&&id| id < m.event_id)
                    .find(|id| !done.contains(id))
                    .copied()
            });
            done.insert(m.event_id);
            missing
        };
        if let Some(earlier) = missing {
            self.violation(format!(
                "event {} of {} delivered before event {earlier}",
                m.event_id, m.biz_no
            ));
        }
    }

    /// For each key of `keys`: its events in the order of their first delivery.
    pub fn first_deliveries(&self) -> HashMap<String, Vec<i64>> {
        let mut seen = HashSet::new();
        let mut out: HashMap<String, Vec<i64>> = HashMap::new();
        for m in self.sent.messages() {
            if seen.insert(m.event_id) {
                out.entry(m.biz_no.clone()).or_default().push(m.event_id);
            }
        }
        out
    }

    /// Asserts that no send broke the order (showing the first ten that did).
    pub fn assert_in_order(&self) {
        let v = self.violations.lock().unwrap();
        assert!(
            v.is_empty(),
            "{} order violations, the first: {:?}",
            v.len(),
            &v[..v.len().min(10)]
        );
    }
}

#[async_trait]
impl Publisher for OrderCheck {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if !self.in_flight.lock().unwrap().insert(m.biz_no.clone()) {
            self.violation(format!("two sends of key {} at once", m.biz_no));
        }
        // Let other sends run meanwhile, so that overlapping sends of one key would show.
        tokio::task::yield_now().await;
        let result = self.outcome(m);
        if result.is_ok() {
            self.delivered(m);
            self.sent.publish(m).await?;
        }
        self.in_flight.lock().unwrap().remove(&m.biz_no);
        result
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        self.calls.lock().unwrap().push(
            messages
                .iter()
                .map(|m| (m.biz_no.clone(), m.event_id))
                .collect(),
        );
        let mut results = Vec::with_capacity(messages.len());
        for m in messages {
            if results.iter().any(Result::is_err) {
                results.push(Err(PublishError::retryable("scripted: batch stopped")));
                continue;
            }
            results.push(self.publish(m).await);
        }
        results
    }

    fn batches(&self) -> bool {
        self.batching
    }
}

/// The suites' settings in ordered mode: 4 send slots, claims of 20, back-off 50 ms.
pub fn ordered_config(owner: &str, policy: OrderedPolicy) -> WorkerConfig {
    super::test_config(owner)
        .ordered(Some(policy))
        .send_concurrency(4)
        .batch_size(20)
        .retry(RetryPolicy::new(
            3,
            Duration::from_millis(50),
            Duration::from_secs(1),
        ))
}
