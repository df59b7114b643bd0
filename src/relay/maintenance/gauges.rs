//! The gauge refresher: the backlog gauges, read from the table.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::ops::Backlog;
use crate::outbox::Outbox;
use crate::relay::{Observer, Op, WorkerSummary};

/// Refreshes `outbox_backlog{status}` and `outbox_oldest_wait_age_seconds` from
/// [`crate::ops::backlog`] (counts over the status index; one index probe for the age), and
/// with [`GaugeRefresher::blocked_keys`] `outbox_blocked_keys` and
/// `outbox_oldest_blocked_age_seconds` from [`crate::ops::blocked_keys`].
#[derive(Debug, Clone)]
pub(crate) struct GaugeRefresher {
    db: RelayDb,
    interval: Duration,
    blocked: bool,
}

impl GaugeRefresher {
    /// A refresher over the relay's connection `db`, every `interval`.
    pub(crate) fn on(db: RelayDb, interval: Duration) -> Self {
        GaugeRefresher {
            db,
            interval,
            blocked: false,
        }
    }

    /// Also refresh the blocked-key gauges from [`crate::ops::blocked_keys`]: on for a worker
    /// in ordered mode with [`crate::OrderedPolicy::Block`].
    pub(crate) fn blocked_keys(mut self, on: bool) -> Self {
        self.blocked = on;
        self
    }

    /// Reads the backlog (and the blocked keys, when asked for) and sets the gauges; returns
    /// the backlog.
    ///
    /// # Errors
    /// A database error (the gauges keep their last values).
    pub(crate) async fn run_once(&self) -> Result<Backlog, OutboxError> {
        use crate::metrics::{BACKLOG, BLOCKED_KEYS, OLDEST_BLOCKED_AGE, OLDEST_WAIT_AGE};
        let outbox = Outbox::of_table(self.db.table());
        // Two outboxes in one process keep gauges of their own: labelled by table.
        let table = match outbox.schema_name() {
            Some(schema) => format!("{schema}.{}", outbox.table_name()),
            None => outbox.table_name().to_owned(),
        };
        let b = crate::ops::backlog(&outbox, &self.db).await?;
        for (status, rows) in [("WAIT", b.wait), ("SENDING", b.sending), ("FAIL", b.fail)] {
            metrics::gauge!(BACKLOG, "status" => status, "table" => table.clone()).set(rows as f64);
        }
        metrics::gauge!(OLDEST_WAIT_AGE, "table" => table.clone()).set(b.oldest_wait_age_seconds);
        if self.blocked {
            let k = crate::ops::blocked_keys(&outbox, &self.db).await?;
            metrics::gauge!(BLOCKED_KEYS, "table" => table.clone()).set(k.keys as f64);
            metrics::gauge!(OLDEST_BLOCKED_AGE, "table" => table)
                .set(k.oldest_age_seconds.unwrap_or(0.0));
        }
        Ok(b)
    }

    /// Refreshes every `interval` until `cancel` fires; errors are logged and counted.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        let mut s = WorkerSummary::default();
        while !cancel.is_cancelled() {
            if let Err(e) = self.run_once().await {
                observer.error(&mut s, Op::Gauges, &e, "backlog gauges not refreshed");
                observer.commit(&mut s);
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}
