//! Retention: deletes the delivered events older than the worker's retention period, so that
//! no outbox table grows without a person.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::outbox::Outbox;
use crate::relay::{Observer, Op, WorkerSummary};

/// Between two retention passes of one worker.
pub(crate) const RETENTION_EVERY: Duration = Duration::from_secs(10 * 60);

/// Rows per delete statement of a retention pass.
pub(crate) const RETENTION_BATCH: u64 = 1_000;

/// Deletes `SUCCESS` rows last updated longer than `keep` ago (database clock), in batches of
/// [`RETENTION_BATCH`] rows ([`crate::ops::purge_delivered`] over the relay's connection, so
/// with its statement protocol: with `StatementProtocol::Simple` no statement is prepared); a
/// pass that finds none writes nothing.
#[derive(Debug, Clone)]
pub(crate) struct Retention {
    db: RelayDb,
    keep: Duration,
}

impl Retention {
    /// Retention of `keep` over the relay's connection `db`.
    pub(crate) fn new(db: RelayDb, keep: Duration) -> Self {
        Retention { db, keep }
    }

    /// One pass: batches until one comes back short; returns the rows deleted. The batches
    /// done before a database error stay done.
    pub(crate) async fn run_once(&self) -> Result<u64, OutboxError> {
        let outbox = Outbox::of_table(self.db.table());
        crate::ops::purge_delivered(&outbox, &self.db, self.keep, RETENTION_BATCH).await
    }

    /// A pass at once and then every [`RETENTION_EVERY`] until `cancel` fires; logs each pass
    /// that deleted rows at INFO and counts them in `outbox_retention_deleted_total`.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        let table = self.db.table().label();
        super::every(RETENTION_EVERY, cancel, observer, || async {
            let mut s = WorkerSummary::default();
            match self.run_once().await {
                Ok(0) => {}
                Ok(deleted) => {
                    tracing::info!(
                        deleted,
                        retention_s = self.keep.as_secs(),
                        "deleted delivered events past the retention period"
                    );
                    metrics::counter!(crate::metrics::RETENTION_DELETED, "table" => table.clone())
                        .increment(deleted);
                }
                Err(e) => {
                    let what = "retention pass failed; retrying after the interval";
                    observer.error(&mut s, Op::Retention, &e, what);
                }
            }
            s
        })
        .await
    }
}
