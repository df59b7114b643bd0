//! An existing SeaORM service that adopts the outbox.
//!
//! The layout is the one `sea-orm-cli` gives a project:
//!
//! ```text
//! examples/existing_app/
//!   Cargo.toml          package `existing-app` (this binary)
//!   src/main.rs         the service: writes orders, runs the relay
//!   entity/             package `existing-app-entity`, lib `entity`: `sea-orm-cli generate entity --lib`
//!   migration/          package `existing-app-migration`, lib `migration`: `sea-orm-cli migrate init`
//! ```
//!
//! The app keeps its crate names `entity` and `migration`; the outbox's own crates are
//! `sea-orm-outbox-entity` and `sea-orm-outbox-migration`, so nothing clashes. Adopting the
//! outbox took three changes: the outbox's migrations appended to the app's `Migrator`, one
//! `txn.with_event(..)` next to the order insert, and a `Worker` started beside the service.
//!
//! Configuration (environment):
//! - `DATABASE_URL`: the database; unset or empty: a fresh SQLite file in the temp directory,
//!   removed at the end.
//! - `EXISTING_APP_SKIP_MIGRATE=1` or the flag `--no-migrate`: the migrations were applied
//!   beforehand (`sea-orm-cli migrate up -d examples/existing_app/migration -u URL`); otherwise
//!   the app runs `migration::Migrator::up` itself.
//! - `ORDERS`: orders to write, default 100.
//!
//! It ends with one line `summary: orders=N published=P duplicates=D`, where `published`
//! counts the distinct events of this run the relay delivered and `duplicates` the deliveries
//! beyond the first of an event, and exits non-zero unless `P == N` and `D == 0`.
use std::collections::HashSet;
use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use entity::t_order;
use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectOptions, Database, DatabaseConnection,
    TransactionTrait,
};
use sea_orm_outbox::{
    CancellationToken, InMemoryPublisher, NewEvent, OutboxExt, Worker, WorkerConfig,
};

/// How long to wait for the relay to deliver every event of the run.
const DEADLINE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    let mut skip_migrate = std::env::var("EXISTING_APP_SKIP_MIGRATE").is_ok_and(|v| v == "1");
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-migrate" => skip_migrate = true,
            other => return Err(format!("unknown argument {other:?} (only --no-migrate)").into()),
        }
    }
    let orders: usize = match std::env::var("ORDERS") {
        Ok(n) => n.parse().map_err(|e| format!("ORDERS={n:?}: {e}"))?,
        Err(_) => 100,
    };
    let mut temp_db = None;
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            let path = std::env::temp_dir().join(format!("existing_app-{}.db", std::process::id()));
            let url = format!("sqlite://{}?mode=rwc", path.display());
            temp_db = Some(TempDb(path));
            url
        }
    };

    let mut opt = ConnectOptions::new(url);
    // SeaORM gives SQLite a single connection unless told otherwise; the relay and the writer
    // work at the same time, and a worker wants a few connections of its own.
    opt.max_connections(8).sqlx_logging(false);
    let db = Database::connect(opt).await?;

    if !skip_migrate {
        Migrator::up(&db, None).await?;
    }

    let (delivered, duplicates) = run(&db, orders).await?;
    db.close().await?;
    drop(temp_db);

    println!("summary: orders={orders} published={delivered} duplicates={duplicates}");
    Ok(if delivered == orders && duplicates == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The default database: an SQLite file in the temp directory, removed when dropped (also
/// when the run fails).
struct TempDb(PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Starts the relay, writes `orders` orders with their events, waits for the relay to deliver
/// them and stops it. Returns (distinct events of this run delivered, duplicate deliveries).
async fn run(db: &DatabaseConnection, orders: usize) -> Result<(usize, usize), Box<dyn Error>> {
    // The relay: in a real service one per instance, publishing to RocketMQ
    // (`RocketMqPublisher` of the crate `sea-orm-outbox-rocketmq`); here in memory, polling fast.
    let publisher = Arc::new(InMemoryPublisher::new());
    let worker = Worker::new(
        db.clone(),
        publisher.clone(),
        WorkerConfig::default()
            .service_name("existing-app")
            .poll_delay(Duration::from_millis(50)),
    )?;
    let cancel = CancellationToken::new();
    let relay = tokio::spawn({
        let cancel = cancel.clone();
        async move { worker.run(cancel).await }
    });

    // The business code: each order and its event in ONE transaction. Order numbers are
    // unique per run so that the app can run again on the same database.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let mut event_ids = HashSet::with_capacity(orders);
    for i in 0..orders {
        let txn = db.begin().await?;
        let order = t_order::ActiveModel {
            order_no: Set(format!("ORD-{run_id}-{i:06}")),
            amount: Set(100 + i as i64),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
        let payload = serde_json::json!({
            "orderId": order.id,
            "orderNo": order.order_no,
            "amount": order.amount,
            "createdAt": order.created_at.to_rfc3339(),
        });
        let event_id = txn
            .with_event(NewEvent::json(&order.order_no, "ORDER_CREATED", &payload)?)
            .await?;
        txn.commit().await?;
        event_ids.insert(event_id);
    }

    // Wait (bounded) until the relay has delivered every event of this run.
    let delivered = || publisher.distinct_ids().intersection(&event_ids).count();
    let start = Instant::now();
    while delivered() < orders && start.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Shutdown: no new claims, the send in flight finishes, then `run` returns its totals.
    cancel.cancel();
    relay.await?;
    Ok((delivered(), publisher.duplicates()))
}
