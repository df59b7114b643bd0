//! The business writers: `--events` orders, each with its event in one transaction, spread
//! evenly over `--write-over` by `--writers` tasks. With `--events-per-key N` the events are
//! spread over `events / N` business keys, interleaved (event i is of key `i % keys`), and
//! each key is written by one task, its events in order.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, NotSet,
    PaginatorTrait, QueryFilter, TransactionTrait,
};
use sea_orm_outbox::{NewEvent, OutboxExt};

use crate::order;
use crate::scratch::BoxError;
use crate::Run;

/// The business key of event `i` among `keys` keys (`None`: one key per event, its order
/// number).
fn key_of(i: usize, keys: Option<usize>) -> Option<String> {
    keys.map(|k| format!("CHK-{:05}", i % k))
}

/// Writes event `i` (an order and its event in one transaction), of business key `biz_no`
/// (default: the order's number). Retries across database outages; a commit whose answer was
/// lost is detected through the order's unique number.
async fn write_one(db: &DatabaseConnection, i: usize, biz_no: Option<&str>, errors: &AtomicU64) {
    let order_no = format!("CH-{i:07}");
    loop {
        let attempt = async {
            let txn = db.begin().await?;
            let o = order::ActiveModel {
                id: NotSet,
                order_no: Set(order_no.clone()),
                amount_cents: Set(100 + i as i64),
            }
            .insert(&txn)
            .await?;
            txn.with_event(NewEvent::json(
                biz_no.unwrap_or(&o.order_no),
                "ORDER_CREATED",
                &serde_json::json!({"orderId": o.id, "orderNo": o.order_no, "amountCents": o.amount_cents}),
            )?)
            .await?;
            txn.commit().await?;
            Ok::<_, BoxError>(())
        }
        .await;
        if attempt.is_ok() {
            return;
        }
        errors.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let exists = order::Entity::find()
            .filter(order::Column::OrderNo.eq(order_no.as_str()))
            .count(db)
            .await;
        if matches!(exists, Ok(n) if n > 0) {
            return;
        }
    }
}

/// The writer tasks of a run.
pub struct Writers {
    done: tokio::task::JoinHandle<()>,
    errors: Arc<AtomicU64>,
    finished_at: Arc<OnceLock<Instant>>,
}

impl Writers {
    /// Starts the writers on `db`: event `i` is due at `i / events` of `--write-over` after
    /// the run's start.
    pub fn start(run: &Run, db: &DatabaseConnection) -> Self {
        let errors = Arc::new(AtomicU64::new(0));
        let mut writers = Vec::new();
        let writer_count = run.args.writers.max(1);
        let per_key = run.args.events_per_key as usize;
        let keys = (per_key > 1).then(|| run.args.events.div_ceil(per_key).max(1));
        for w in 0..writer_count {
            let db = db.clone();
            let errors = errors.clone();
            let (n, over, started) = (run.args.events, run.args.write_over, run.started);
            writers.push(tokio::spawn(async move {
                // Without keys: every writer_count-th event; with keys: the events of the
                // keys k with k % writer_count == w, so that one task writes a key, in order.
                let mine = (0..n).filter(|i| match keys {
                    None => i % writer_count == w,
                    Some(k) => (i % k) % writer_count == w,
                });
                for i in mine {
                    let due = started + over.mul_f64(i as f64 / n.max(1) as f64);
                    tokio::time::sleep_until(due.into()).await;
                    write_one(&db, i, key_of(i, keys).as_deref(), &errors).await;
                }
            }));
        }
        let finished_at = Arc::new(OnceLock::new());
        let done = tokio::spawn({
            let finished_at = finished_at.clone();
            async move {
                for w in writers {
                    w.await.ok();
                }
                finished_at.set(Instant::now()).ok();
            }
        });
        Writers {
            done,
            errors,
            finished_at,
        }
    }

    /// When the last event was written (`None` while writing).
    pub fn finished_at(&self) -> Option<Instant> {
        self.finished_at.get().copied()
    }

    /// Whether every event has been written.
    pub fn finished(&self) -> bool {
        self.done.is_finished()
    }

    /// Write attempts that failed (and were retried).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Stops writers still running.
    pub fn abort(&self) {
        self.done.abort();
    }
}
