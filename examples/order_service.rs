//! The main job: an order service that writes orders and their `ORDER_CREATED` events in one
//! transaction each, while W relay instances (each with its own pool and instance id) publish
//! the events. Ends with one summary line.
//!
//! ```text
//! cargo run --example order_service -- --orders 200 --workers 3
//! cargo run --example order_service -- --table outbox_events
//! DATABASE_URL=postgres://postgres@127.0.0.1/test cargo run --example order_service
//! DATABASE_URL=mysql://root@127.0.0.1/test cargo run --example order_service
//! ```
//! Without `DATABASE_URL` it uses an embedded SQLite file in the temp directory. On a shared
//! database it only creates what is missing and counts only its own run's events. `--table`
//! names the outbox table (default `t_event_record`): another one is created with
//! `create_outbox_table` when missing, and the writes, the relays and the counts all go
//! through one `Outbox` handle naming it.
//!
//! With `OUTBOX_PUBLISHER=rocketmq|kafka|nats|rabbitmq|redis` (or only `ROCKETMQ_NAMESRV_ADDR` set) the events go
//! to that broker instead of an in-memory publisher, configured by its crate's variables
//! (RocketMQ: `ROCKETMQ_NAMESRV_ADDR`, `OUTBOX_TOPIC`, credentials, see docs/ROCKETMQ.md;
//! NATS: `NATS_URL`, `OUTBOX_NATS_SUBJECT_PREFIX`, read from the stream `<prefix>` upper-cased,
//! created when missing; RabbitMQ: `RABBITMQ_URL`, `OUTBOX_RABBITMQ_EXCHANGE`; Redis: `REDIS_URL`, `OUTBOX_REDIS_STREAM_PREFIX`), and a consumer of that broker reads them
//! back: the summary line then ends with `received=N received_duplicates=D` (this run's events
//! only).
#[path = "common/logging.rs"]
mod logging;
/// The demo's own business table, `demo_orders`.
#[path = "common/order.rs"]
mod order;

/// The broker of `OUTBOX_PUBLISHER` and its consumer.
#[path = "common/brokers.rs"]
mod brokers;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use clap::Parser;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, NotSet,
    PaginatorTrait, QueryFilter, Schema,
};
use sea_orm_migration::{MigratorTrait, SchemaManager};
use sea_orm_outbox::{
    migration, ops, CancellationToken, InMemoryPublisher, Migrator, NewEvent, Outbox,
    OutboxMessage, PublishError, Publisher, RetryPolicy, WorkerConfig,
};
use sea_orm_outbox_rocketmq::{ENV_TOPIC, EVENT_LIMITS};

/// The demo's RocketMQ topic when `OUTBOX_TOPIC` names none.
const TOPIC: &str = "ORDER_EVENT_TOPIC";

/// Sends through the broker when one is configured, and records every message it accepted.
struct Recording {
    broker: Option<Arc<dyn Publisher>>,
    log: InMemoryPublisher,
}

#[async_trait]
impl Publisher for Recording {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if let Some(broker) = &self.broker {
            broker.publish(m).await?;
        }
        self.log.publish(m).await
    }

    async fn publish_batch(&self, messages: &[OutboxMessage]) -> Vec<Result<(), PublishError>> {
        let Some(broker) = &self.broker else {
            return self.log.publish_batch(messages).await;
        };
        let results = broker.publish_batch(messages).await;
        for (m, r) in messages.iter().zip(&results) {
            if r.is_ok() {
                let _ = self.log.publish(m).await;
            }
        }
        results
    }

    fn batches(&self) -> bool {
        self.broker.as_ref().is_some_and(|b| b.batches())
    }
}

#[derive(Parser, Debug)]
#[command(about = "Place orders with their outbox events and relay them with several workers")]
struct Args {
    /// Orders to place.
    #[arg(long, default_value_t = 200)]
    orders: usize,
    /// Relay instances, each with its own connection pool and instance id.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Database URL; default: an SQLite file in the temp directory.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Wait after a relay round in milliseconds (the library's default is 5000).
    #[arg(long, default_value_t = 100)]
    poll_delay_ms: u64,
    /// Give up waiting for the outbox to drain after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Serve the outbox metrics for Prometheus on this address, e.g. 127.0.0.1:9000.
    #[arg(long)]
    metrics_addr: Option<std::net::SocketAddr>,
    /// The outbox table; created with `create_outbox_table` when it is not `t_event_record`.
    #[arg(long, default_value = "t_event_record")]
    table: String,
}

/// The lease `ops::stats` judges stuck sends by (the library's default).
const LEASE: Duration = Duration::from_secs(600);

/// Every event the outbox table has held: its rows not yet delivered, and the delivered
/// events the relays counted (their rows deleted, or kept as `SUCCESS`).
fn rows(s: &ops::OutboxStats) -> u64 {
    s.wait + s.sending + s.delivered + s.fail
}

/// A pool of at most `max` connections (waiting up to 30 s for one); on SQLite (the README's
/// connect options) in WAL mode, each connection waiting up to 10 s for the write lock.
async fn connect(url: &str, max: u32) -> Result<DatabaseConnection, sea_orm::DbErr> {
    let mut opt = sea_orm::ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(30))
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10))
        });
    sea_orm::Database::connect(opt).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    logging::init();
    let args = Args::parse();
    if let Some(addr) = args.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()?;
    }
    let url = args
        .database_url
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            let path = std::env::temp_dir().join("sea_orm_outbox_demo.db");
            format!("sqlite://{}?mode=rwc", path.display())
        });

    let db = connect(&url, 4).await?;
    Migrator::up(&db, None).await?;
    // Checked against RocketMQ's rules (message size, reserved property names) at write time,
    // whichever publisher the run uses.
    let outbox = Outbox::new().table(&args.table)?.limits(EVENT_LIMITS);
    let manager = SchemaManager::new(&db);
    if outbox.table_name() != migration::TABLE && !manager.has_table(outbox.table_name()).await? {
        migration::create_outbox_table(&manager, outbox.table_name()).await?;
    }
    let before = ops::stats(&outbox, &db, LEASE).await?;
    let schema = Schema::new(db.get_database_backend());
    db.execute(
        schema
            .create_table_from_entity(order::Entity)
            .if_not_exists(),
    )
    .await?;

    // The broker of OUTBOX_PUBLISHER: one publisher shared by every worker (its start checks
    // the credentials with the broker) and a consumer, both ready before the relays send.
    let mut link = match brokers::Kind::from_env()? {
        Some(kind) => {
            // RocketMQ: the demo's topic, unless OUTBOX_TOPIC names another.
            let topic_unset = std::env::var(ENV_TOPIC).map_or(true, |t| t.trim().is_empty());
            let dest = (kind == brokers::Kind::RocketMq && topic_unset).then_some(TOPIC);
            Some(brokers::Link::start(kind, Duration::from_secs(3), dest, "ORDER_CREATED").await?)
        }
        None => None,
    };
    if let Some(link) = &link {
        eprintln!("publishing to {} (OUTBOX_PUBLISHER)", link.kind.name());
    }

    // The relay instances start first, as they would in a running service.
    let publisher = Arc::new(Recording {
        broker: link.as_ref().map(|l| l.publisher()),
        log: InMemoryPublisher::new(),
    });
    let cancel = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..args.workers {
        let config = WorkerConfig::default()
            .poll_delay(Duration::from_millis(args.poll_delay_ms))
            .retry(RetryPolicy::new(
                RetryPolicy::default().max_retries,
                Duration::from_millis(200),
                RetryPolicy::default().max_backoff,
            ))
            .service_name(format!("order-{}", 8080 + w));
        let worker = outbox.worker(
            connect(&url, 2).await?,
            publisher.clone() as Arc<dyn Publisher>,
            config,
        )?;
        let cancel = cancel.clone();
        workers.push(tokio::spawn(async move { worker.run(cancel).await }));
    }

    // Place the orders: each order row and its event commit together.
    let run = &uuid::Uuid::new_v4().simple().to_string()[..8];
    for i in 0..args.orders {
        let order = order::ActiveModel {
            id: NotSet,
            order_no: Set(format!("ORD-{run}-{i:05}")),
            amount_cents: Set(1000 + i as i64),
        };
        outbox
            .transactional_publish(&db, order, |o: &order::Model| {
                Ok(NewEvent::json(
                    &o.order_no,
                    "ORDER_CREATED",
                    &serde_json::json!({"orderId": o.id, "orderNo": o.order_no, "amountCents": o.amount_cents}),
                )?)
            })
            .await?;
    }

    // The table's counts, read through the handle (runs before this one have drained: the
    // rows added since `before` are this run's).
    let drained = wait_until(
        Duration::from_secs(args.timeout_s),
        Duration::from_millis(50),
        || async {
            ops::stats(&outbox, &db, LEASE)
                .await
                .is_ok_and(|s| s.wait == 0 && s.sending == 0)
        },
    )
    .await;
    cancel.cancel();
    for w in workers {
        w.await?;
    }

    let orders = order::Entity::find()
        .filter(order::Column::OrderNo.starts_with(format!("ORD-{run}-")))
        .count(&db)
        .await?;
    let after = ops::stats(&outbox, &db, LEASE).await?;
    let events = rows(&after) - rows(&before);
    let prefix = format!("ORD-{run}-");
    let sent: Vec<_> = publisher
        .log
        .messages()
        .into_iter()
        .filter(|m| m.biz_no.starts_with(&prefix))
        .collect();
    let distinct: HashSet<i64> = sent.iter().map(|m| m.event_id).collect();
    drop(publisher);

    // Read this run's events back from the broker (keys carry the order number), then a
    // little longer to see duplicates that arrive late.
    let mut received_line = String::new();
    if let Some(mut link) = link.take() {
        let mut times: HashMap<i64, usize> = HashMap::new();
        let end = tokio::time::Instant::now() + Duration::from_secs(args.timeout_s);
        let mut linger: Option<tokio::time::Instant> = None;
        loop {
            let now = tokio::time::Instant::now();
            if linger.is_some_and(|l| now >= l) || now >= end {
                break;
            }
            for m in link.poll(Duration::from_millis(200)).await? {
                if let (Some(id), true) =
                    (m.event_id, m.key.is_some_and(|k| k.starts_with(&prefix)))
                {
                    *times.entry(id).or_default() += 1;
                }
            }
            if linger.is_none() && distinct.iter().all(|id| times.contains_key(id)) {
                linger = Some(tokio::time::Instant::now() + Duration::from_secs(2));
            }
        }
        received_line = format!(
            " received={} received_duplicates={}",
            times.len(),
            times.values().map(|n| n - 1).sum::<usize>()
        );
        link.shutdown().await;
    }
    println!(
        "summary: table={} orders={orders} events={events} published={} duplicates={} fail={} wait={} sending={}{received_line}",
        outbox.table_name(),
        distinct.len(),
        sent.len() - distinct.len(),
        after.fail - before.fail,
        after.wait,
        after.sending,
    );
    if !drained {
        eprintln!("the outbox did not drain within {} s", args.timeout_s);
        std::process::exit(1);
    }
    Ok(())
}

/// Polls `check` every `every` until it returns true or `deadline` passes; returns whether it
/// did.
async fn wait_until<F, Fut>(deadline: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    while !check().await {
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
    true
}
