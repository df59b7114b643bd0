//! Relay instances for the suites: workers running in tasks, each on a pool of its own.
use std::sync::Arc;
use std::time::Duration;

use sea_orm_outbox::{CancellationToken, Publisher, Worker, WorkerConfig, WorkerSummary};
use tokio::task::JoinHandle;

use super::{wait_until, TestContext};

/// Workers running [`Worker::run`] until [`Fleet::stop`].
pub struct Fleet {
    workers: Vec<Arc<Worker>>,
    cancel: CancellationToken,
    handles: Vec<JoinHandle<WorkerSummary>>,
}

impl Fleet {
    /// Starts one worker per config of `configs`, each on a pool of `pool` connections to
    /// `ctx`'s database, all publishing to `publisher`.
    pub async fn start(
        ctx: &TestContext,
        pool: u32,
        publisher: Arc<dyn Publisher>,
        configs: impl IntoIterator<Item = WorkerConfig>,
    ) -> Self {
        let cancel = CancellationToken::new();
        let (mut workers, mut handles) = (Vec::new(), Vec::new());
        for config in configs {
            let worker = Arc::new(
                Worker::new(ctx.pool(pool).await, publisher.clone(), config).expect("worker"),
            );
            let (w, cancel) = (worker.clone(), cancel.clone());
            handles.push(tokio::spawn(async move { w.run(cancel).await }));
            workers.push(worker);
        }
        Fleet {
            workers,
            cancel,
            handles,
        }
    }

    /// The workers, in the order of their configs.
    pub fn workers(&self) -> &[Arc<Worker>] {
        &self.workers
    }

    /// Whether every worker has run a first round within `deadline` (checked every 5 ms).
    pub async fn started(&self, deadline: Duration) -> bool {
        wait_until(deadline, Duration::from_millis(5), || async {
            self.workers.iter().all(|w| w.summary().rounds >= 1)
        })
        .await
    }

    /// Cancels the workers and returns their summaries, in the order of their configs.
    pub async fn stop(self) -> Vec<WorkerSummary> {
        self.cancel.cancel();
        let mut summaries = Vec::new();
        for h in self.handles {
            summaries.push(h.await.expect("worker task"));
        }
        summaries
    }
}
