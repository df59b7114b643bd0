//! The writer's side: write throughput with and without the notify (`write_eps`,
//! `write_eps_no_notify`) and the cost of `with_event` in a business transaction
//! (`with_event_overhead_ms`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, NotSet, Schema,
    TransactionTrait,
};
use sea_orm_outbox::{store, NewEvent, OutboxExt};

use crate::figures::{f1, f3, percentile, Figures};
use crate::order;
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::reset;
use crate::Args;

/// Events per second written by `--writers` concurrent one-event transactions: through
/// `with_event` (on Postgres the insert also queues `pg_notify` for wake-on-commit), or with the
/// library's plain insert statement (no notify).
async fn write_eps(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
    with_event: bool,
) -> Result<f64, BoxError> {
    reset(setup).await?;
    let db = bench.pool(args.writers as u32).await?;
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.writers {
        let (db, next, total) = (db.clone(), next.clone(), args.write_events);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    return Ok::<(), BoxError>(());
                }
                let event = NewEvent::raw(
                    format!("W-{i}"),
                    "ORDER_CREATED",
                    format!("{{\"orderId\":{i}}}"),
                );
                let txn = db.begin().await?;
                if with_event {
                    txn.with_event(event).await?;
                } else {
                    let backend = txn.get_database_backend();
                    txn.execute(&store::insert_statement(backend, &event))
                        .await?;
                }
                txn.commit().await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let eps = args.write_events as f64 / start.elapsed().as_secs_f64();
    db.close().await?;
    Ok(eps)
}

/// `write_eps` and `write_eps_no_notify`, or skipped with `--skip-write`.
pub async fn write_figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    if args.skip_write {
        figs.skip("write_eps", "--skip-write");
        return Ok(());
    }
    let plain = write_eps(bench, setup, args, false).await?;
    let with = write_eps(bench, setup, args, true).await?;
    figs.add(
        "write_eps",
        f1(with),
        format!(
            "{} events, {} concurrent one-event transactions through with_event{}",
            args.write_events,
            args.writers,
            if bench.backend == DbBackend::Postgres {
                " (insert + pg_notify)"
            } else {
                ""
            }
        ),
    );
    figs.add(
        "write_eps_no_notify",
        f1(plain),
        "the same with the library's plain insert statement (no pg_notify)",
    );
    Ok(())
}

/// Median commit times (ms) of `--overhead-samples` order inserts with and without
/// `with_event`, taken in ABBA order: (difference, plain, with).
async fn with_event_overhead(
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(f64, f64, f64), BoxError> {
    reset(setup).await?;
    let schema = Schema::new(bench.backend);
    setup
        .execute(
            schema
                .create_table_from_entity(order::Entity)
                .if_not_exists(),
        )
        .await?;
    let db = bench.pool(1).await?;
    let (mut plain, mut with) = (Vec::new(), Vec::new());
    for i in 0..args.overhead_samples * 2 {
        let outbox = (i % 4 == 1) || (i % 4 == 2); // ABBA order against drift
        let order = order::ActiveModel {
            id: NotSet,
            order_no: Set(format!("ORD-{i:07}")),
            amount_cents: Set(1000 + i as i64),
        };
        let t = Instant::now();
        let txn = db.begin().await?;
        order::Entity::insert(order).exec(&txn).await?;
        if outbox {
            txn.with_event(NewEvent::raw(
                format!("ORD-{i:07}"),
                "ORDER_CREATED",
                format!(
                    "{{\"orderNo\":\"ORD-{i:07}\",\"amountCents\":{}}}",
                    1000 + i
                ),
            ))
            .await?;
        }
        txn.commit().await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if outbox {
            with.push(ms)
        } else {
            plain.push(ms)
        }
    }
    db.close().await?;
    plain.sort_by(|a, b| a.total_cmp(b));
    with.sort_by(|a, b| a.total_cmp(b));
    let (p, w) = (percentile(&plain, 50.0), percentile(&with, 50.0));
    Ok((w - p, p, w))
}

/// `with_event_overhead_ms`, or skipped with `--skip-overhead`.
pub async fn overhead_figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    if args.skip_overhead {
        figs.skip("with_event_overhead_ms", "--skip-overhead");
        return Ok(());
    }
    let (d, p, w) = with_event_overhead(bench, setup, args).await?;
    figs.add(
        "with_event_overhead_ms",
        f3(d),
        format!(
            "median of {} txns each: insert+commit {:.3} ms, insert+with_event+commit {:.3} ms",
            args.overhead_samples, p, w
        ),
    );
    Ok(())
}
