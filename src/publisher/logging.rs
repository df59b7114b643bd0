use async_trait::async_trait;

use super::{OutboxMessage, Publisher};
use crate::error::PublishError;

/// A publisher that only logs each message at INFO (target `sea_orm_outbox::publisher`) and
/// reports success. For trying the relay without a broker.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoggingPublisher;

#[async_trait]
impl Publisher for LoggingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        tracing::info!(
            target: "sea_orm_outbox::publisher",
            event_id = m.event_id,
            biz_no = %m.biz_no,
            event_type = %m.event_type,
            payload = %m.payload,
            "message"
        );
        Ok(())
    }
}
