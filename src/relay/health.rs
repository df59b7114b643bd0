//! [`Worker::health`]: the table's health, and this worker's own.
use crate::error::OutboxError;
use crate::ops::{reason, Health, HealthCode, HealthStatus, HealthThresholds};
use crate::outbox::Outbox;
use crate::relay::Worker;

impl Worker {
    /// The health of this worker's table ([`crate::ops::health`] with the default
    /// [`HealthThresholds`]) and of this worker: [`HealthCode::ListenDown`] (degraded) while
    /// its wake-on-commit `LISTEN` is down and it polls, [`HealthCode::PublisherMisconfigured`]
    /// (failing) when its publisher refused sends for its own configuration or credentials
    /// ([`crate::PublishErrorKind::Configuration`]) since its last successful publish.
    ///
    /// For alerting or a readiness probe; not for a liveness probe: most reasons are the
    /// whole table's (a broker outage, an old backlog), and restarting every replica at once
    /// cures none of them. Every figure but the worker's own comes from the database.
    ///
    /// # Errors
    /// As [`crate::ops::health`] (the database could not be read).
    pub async fn health(&self) -> Result<Health, OutboxError> {
        let outbox = Outbox::of_table(self.db.table());
        let table = &self.db.table().label();
        let mut reasons = crate::ops::health(&outbox, &self.db, &HealthThresholds::default())
            .await?
            .reasons;
        if self.listen.is_down() {
            let message = format!(
                "worker {} of {table}: its LISTEN connection (wake-on-commit) is down; it polls \
                 every {} ms, so committed events wait up to that long",
                self.owner,
                self.config.poll_delay.as_millis()
            );
            reasons.push(reason(
                HealthStatus::Degraded,
                HealthCode::ListenDown,
                message,
            ));
        }
        let faults = self.observer.faults_since_success();
        if faults > 0 {
            let message = format!(
                "worker {} of {table}: its publisher refused {faults} send(s) for its own \
                 configuration or credentials since its last successful publish \
                 (outbox_config_faults_total); the events wait until it is fixed",
                self.owner
            );
            let code = HealthCode::PublisherMisconfigured;
            reasons.push(reason(HealthStatus::Failing, code, message));
        }
        Ok(Health::of(reasons))
    }
}
