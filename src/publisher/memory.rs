use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{OutboxMessage, Publisher};
use crate::error::PublishError;

/// A publisher that records every message it is given, in order, and reports success. Share
/// one (`Arc`) between workers to count what a race published, duplicates included.
#[derive(Debug, Default)]
pub struct InMemoryPublisher {
    sent: Mutex<Vec<OutboxMessage>>,
}

impl InMemoryPublisher {
    /// An empty publisher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every message published so far, in order, duplicates included.
    pub fn messages(&self) -> Vec<OutboxMessage> {
        self.lock().clone()
    }

    /// How many messages were published, duplicates included.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing was published.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The distinct event ids published.
    pub fn distinct_ids(&self) -> HashSet<i64> {
        self.lock().iter().map(|m| m.event_id).collect()
    }

    /// Publications beyond the first of each event id.
    pub fn duplicates(&self) -> usize {
        self.len() - self.distinct_ids().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OutboxMessage>> {
        // A panic while holding the lock cannot leave the Vec half-written: keep going.
        self.sent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Publisher for InMemoryPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        self.lock().push(m.clone());
        Ok(())
    }
}
