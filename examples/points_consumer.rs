//! An idempotent consumer: reads the outbox topic from RocketMQ and adds loyalty points once per
//! order, however often the relay delivered the event (delivery is at-least-once).
//!
//! ```text
//! scripts/rocketmq.sh start
//! ROCKETMQ_NAMESRV_ADDR=127.0.0.1:9876 DATABASE_URL=postgres://postgres@127.0.0.1/test \
//!     cargo run --example points_consumer -- --seconds 30
//! ```
//! Each message is handled by [`consume_once`] in ONE transaction with the points update: the
//! outbox event id (`eventId` property) is recorded in `t_consumed_message` first, so a second
//! delivery of the same event is acknowledged without adding points again.
#[path = "common/logging.rs"]
mod logging;

use std::time::Duration;

use clap::Parser;
use sea_orm::{ConnectionTrait, Database, DatabaseTransaction, Statement};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::consumer::consume_once;
use sea_orm_outbox::consumer::Consumed;
use sea_orm_outbox::{Migrator, OutboxError};
use sea_orm_outbox_rocketmq::RocketMqConsumer;

#[derive(Parser, Debug)]
#[command(about = "Add points once per ORDER_CREATED event, whatever the redeliveries")]
struct Args {
    /// Database URL (the consumer service's own database).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://points_consumer.db?mode=rwc"
    )]
    database_url: String,
    /// RocketMQ name server address.
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR", default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Topic the relay publishes to.
    #[arg(long, env = "OUTBOX_TOPIC", default_value = "ORDER_EVENT_TOPIC")]
    topic: String,
    /// Consumer group, also the deduplication scope in t_consumed_message.
    #[arg(long, default_value = "points_service")]
    group: String,
    /// Points per order.
    #[arg(long, default_value_t = 10)]
    points: i64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

/// Adds `points` to the account named by the order's business key, in the consumer's
/// transaction (portable SQL: read, then insert or update).
async fn add_points(
    txn: &DatabaseTransaction,
    account: &str,
    points: i64,
) -> Result<(), OutboxError> {
    let backend = txn.get_database_backend();
    let ph = |n: usize| {
        if backend == sea_orm::DbBackend::Postgres {
            format!("${n}")
        } else {
            "?".into()
        }
    };
    let updated = txn
        .execute_raw(Statement::from_sql_and_values(
            backend,
            format!(
                "UPDATE points_account SET points = points + {} WHERE account = {}",
                ph(1),
                ph(2)
            ),
            [points.into(), account.into()],
        ))
        .await?;
    if updated.rows_affected() == 0 {
        txn.execute_raw(Statement::from_sql_and_values(
            backend,
            format!(
                "INSERT INTO points_account (account, points) VALUES ({}, {})",
                ph(1),
                ph(2)
            ),
            [account.into(), points.into()],
        ))
        .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    logging::init();
    let args = Args::parse();
    let db = Database::connect(&args.database_url).await?;
    // t_consumed_message comes with the outbox migrations.
    Migrator::up(&db, None).await?;
    db.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS points_account (account VARCHAR(64) PRIMARY KEY, points BIGINT NOT NULL)",
    )
    .await?;
    let consumer = RocketMqConsumer::start(&args.namesrv, &args.group, &args.topic).await?;
    let (mut processed, mut duplicates, mut failed) = (0u64, 0u64, 0u64);
    let end = tokio::time::Instant::now() + Duration::from_secs(args.seconds);
    while tokio::time::Instant::now() < end {
        for m in consumer.poll(Duration::from_millis(500)).await {
            let (Some(event_id), Some(account)) = (m.property("eventId"), m.keys.as_deref()) else {
                eprintln!("skipping message {} without eventId/keys", m.msg_id);
                continue;
            };
            let points = args.points;
            match consume_once(&db, &args.group, event_id, async |txn| {
                add_points(txn, account, points).await
            })
            .await
            {
                Ok(Consumed::Processed(())) => processed += 1,
                Ok(Consumed::Duplicate) => duplicates += 1,
                // A real service would not acknowledge it, so the broker redelivers it.
                Err(e) => {
                    failed += 1;
                    eprintln!("event {event_id}: {e}");
                }
            }
        }
    }
    consumer.shutdown().await;
    println!("summary: processed={processed} duplicates={duplicates} failed={failed}");
    Ok(())
}
