//! The gauge refresher: the backlog gauges, read from the table.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::ops::Backlog;
use crate::outbox::Outbox;
use crate::relay::{Observer, Op, WorkerSummary};

/// Between refreshes of the gauges.
const INTERVAL: Duration = Duration::from_secs(15);

/// Refreshes `outbox_backlog{status}` and `outbox_oldest_wait_age_seconds` from
/// [`crate::ops::backlog`] (counts over the status index; one index probe for the age), and
/// for a worker in ordered mode with [`crate::OrderedPolicy::Block`] `outbox_blocked_keys` and
/// `outbox_oldest_blocked_age_seconds` from [`crate::ops::blocked_keys`].
#[derive(Debug, Clone)]
pub(crate) struct GaugeRefresher {
    db: RelayDb,
    /// Whether the blocked-key gauges are refreshed too.
    blocked: bool,
}

impl GaugeRefresher {
    /// A refresher over the relay's connection `db`, for a worker configured with `c`.
    pub(crate) fn new(db: RelayDb, c: &WorkerConfig) -> Self {
        let blocked = c.ordered == Some(crate::OrderedPolicy::Block);
        GaugeRefresher { db, blocked }
    }

    /// Reads the backlog (and the blocked keys) and sets the gauges; returns the backlog. On a
    /// database error the gauges keep their last values.
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

    /// Refreshes every 15 s until `cancel` fires.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        super::every(INTERVAL, cancel, observer, move || async move {
            let mut s = WorkerSummary::default();
            if let Err(e) = self.run_once().await {
                observer.error(&mut s, Op::Gauges, &e, "backlog gauges not refreshed");
            }
            s
        })
        .await
    }
}
