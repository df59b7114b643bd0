//! The writer's side: write throughput with and without the notify (`write_eps`,
//! `write_eps_no_notify`, `write_eps_notify_over_none`, per writer count `_w<N>`; on Postgres
//! also every event notifying and a notify-off control, `write_eps_off_over_none_w<N>` and
//! `write_eps_notify_over_off_w<N>`), the database server's CPU per event of each kind
//! (`write_server_us_per_event_w<N>`), and the cost of `with_event` in a business transaction
//! (`with_event_overhead_ms`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::sea_query::{Expr, InsertStatement, Query};
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, NotSet, Schema,
    TransactionTrait,
};
use sea_orm_outbox::event_record::{Column, Entity};
use sea_orm_outbox::{EventStatus, NewEvent, OutboxExt};

use crate::cpu::CpuMark;
use crate::figures::{f1, f3, percentile, Figures};
use crate::order;
use crate::scratch::{BoxError, ScratchDb};
use crate::setup::{now_sql, reset};
use crate::Args;

/// How the writers of one `write_eps` run insert their events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Insert {
    /// The outbox's insert as the bench writes it ([`plain_insert`]): no `pg_notify`
    /// (`write_eps_no_notify`).
    Plain = 0,
    /// `with_event` with the default settings (on Postgres the notify shared by the slot,
    /// `NewEvent::notify_interval` 10 ms): `write_eps`.
    Default = 1,
    /// `with_event` with `notify_interval(Duration::ZERO)`: every event queues its own
    /// `pg_notify`, as every event does with `notify_interval(ZERO)` (`write_eps_notify_every`).
    Every = 2,
    /// `with_event` with `notify_relays(false)`: the library's write path without the notify
    /// (`write_eps_off_over_none_w<N>` against the plain insert, the noise floor), which splits
    /// the notify's tax (`write_eps_notify_over_off_w<N>`) from the rest of `with_event`.
    Off = 3,
}

/// Row `round` of a Williams square over `n` kinds (a balanced Latin square; `n` even, as the
/// write phase's 2 and 4 kinds are): the kinds' indices `0..n` in the order that round runs
/// them.
/// Over `n` consecutive rounds every kind runs once in every position AND, within the rounds,
/// directly after every other kind once, so neither a position in the round nor a neighbour
/// favours one kind (the write phase runs an untimed spacer block before each round, so that
/// the first block of a round does not follow the last of the one before)
/// (Williams, "Experimental designs balanced for the estimation of residual effects of
/// treatments", Australian Journal of Scientific Research, 1949). Row 0 is `0, n-1, 1, n-2,
/// 2, ...`; row `r` adds `r` (mod `n`). For 4: `0312`, `1023`, `2130`, `3201`.
fn williams_row(n: usize, round: usize) -> Vec<usize> {
    debug_assert!(
        n.is_multiple_of(2),
        "a Williams square of one row per kind needs an even count"
    );
    let mut first = Vec::with_capacity(n);
    let (mut lo, mut hi) = (0, n);
    for i in 0..n {
        if i % 2 == 0 {
            first.push(lo);
            lo += 1;
        } else {
            hi -= 1;
            first.push(hi);
        }
    }
    first.into_iter().map(|k| (k + round) % n).collect()
}

/// One block of the write phase: `writers` tasks on `db` (a pool of `writers` connections)
/// write `events` one-event transactions, inserting as `insert` says. Returns the block's
/// wall time in seconds and the database server's CPU microseconds per event during the block
/// (all its processes, from /proc, read outside the timed part; see `crate::cpu`). The events
/// of every block go into the same table (the table grows by `events` rows a block;
/// neighbouring blocks see about the same table).
async fn write_block(
    db: &DatabaseConnection,
    args: &Args,
    writers: usize,
    insert: Insert,
    events: u64,
) -> Result<(f64, f64), BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let interval = args.notify_interval_ms;
    let backend = db.get_database_backend();
    let cpu = CpuMark::now(backend);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (db, next) = (db.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= events {
                    return Ok::<(), BoxError>(());
                }
                let event = NewEvent::raw(
                    format!("W-{i}"),
                    "ORDER_CREATED",
                    format!("{{\"orderId\":{i}}}"),
                );
                let txn = db.begin().await?;
                match insert {
                    Insert::Default => {
                        let event = match interval {
                            Some(ms) => event.notify_interval(Duration::from_millis(ms)),
                            None => event,
                        };
                        txn.with_event(event).await?;
                    }
                    Insert::Every => {
                        txn.with_event(event.notify_interval(Duration::ZERO))
                            .await?;
                    }
                    Insert::Off => {
                        txn.with_event(event.notify_relays(false)).await?;
                    }
                    Insert::Plain => {
                        let backend = txn.get_database_backend();
                        txn.execute(&plain_insert(backend, &event)).await?;
                    }
                }
                txn.commit().await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let server_us = cpu.since(backend).server_us_per_event(events);
    Ok((secs, server_us))
}

/// The median of `v` (NaN when empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 50.0)
}

/// The lowest and the highest of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// What one writer count's blocks gave, per insert kind (indexed by `Insert as usize`).
#[derive(Default)]
struct Blocks {
    /// Events written and seconds taken over all measured blocks.
    events: [u64; 4],
    secs: [f64; 4],
    /// Events/s of each measured block, in round order.
    eps: [Vec<f64>; 4],
    /// The database server's CPU microseconds (all its processes) over all measured blocks.
    server_us: [f64; 4],
}

impl Blocks {
    /// Events/s of `kind` over all its measured blocks (their events over their time).
    fn eps(&self, kind: Insert) -> f64 {
        self.events[kind as usize] as f64 / self.secs[kind as usize]
    }

    /// The database server's CPU microseconds per event of `kind` over its measured blocks:
    /// much less moved than the commit rate by the virtual disk's `fdatasync` times (though
    /// the kernel's flush work, the size of commit groups and background processes still
    /// count, and /proc's 10 ms ticks limit the resolution).
    fn server_us(&self, kind: Insert) -> f64 {
        self.server_us[kind as usize] / self.events[kind as usize].max(1) as f64
    }

    /// `a`'s pooled events/s over `b`'s: the figure.
    fn ratio(&self, a: Insert, b: Insert) -> f64 {
        self.eps(a) / self.eps(b)
    }

    /// The per-round ratios of `a`'s block to `b`'s, for the detail: their median, range, and
    /// mean with twice its standard error (rounds taken as independent, which neighbouring
    /// rounds are not quite; two runs' means differ by up to about √2 times that).
    fn per_round(&self, a: Insert, b: Insert) -> String {
        let r: Vec<f64> = self.eps[a as usize]
            .iter()
            .zip(&self.eps[b as usize])
            .map(|(x, y)| x / y)
            .collect();
        let (lo, hi) = range(&r);
        let n = r.len() as f64;
        let mean = r.iter().sum::<f64>() / n;
        let var = r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        format!(
            "per-round ratios: median {:.3}, {:.3}-{:.3}, mean {:.3} +- {:.3} (2 s.e.)",
            median(r),
            lo,
            hi,
            mean,
            2.0 * (var / n).sqrt()
        )
    }
}

/// Per writer count of `--writers` (default 8 and 32), on one table and one pool of that many
/// connections: a warm-up block of every insert kind (not counted), then `--write-repeats`
/// rounds (rounded up to a multiple of the kinds: 4 on Postgres, 2 elsewhere) of one block
/// (`--write-events` one-event transactions) per kind, each round's order a row of a Williams
/// square ([`williams_row`]: every kind as often in every position and directly after every
/// other kind), each round after an untimed spacer block of the plain insert. Short blocks in a balanced order put every kind next to the others many
/// times, so slow drift of the machine (this VM's commit rate wanders by about ±10 % over
/// seconds) falls on all kinds alike.
///
/// Figures, each kind's events over its blocks' total time: `write_eps_w<N>` (default
/// settings), `write_eps_no_notify_w<N>` (plain insert), on Postgres
/// `write_eps_notify_every_w<N>` (every event notifies: `notify_interval(ZERO)`); the
/// ratios of those, `write_eps_notify_over_none_w<N>` and `write_eps_every_over_none_w<N>`; on
/// Postgres also `with_event` with `notify_relays(false)` as a fourth kind, for
/// `write_eps_off_over_none_w<N>` (the library's path without the notify against the plain
/// insert: the noise floor, ≈ 1 by construction) and `write_eps_notify_over_off_w<N>` (the
/// notify's own tax). Each ratio's detail gives the median, range, and mean with twice its
/// standard error of its per-round ratios. `write_server_us_per_event_w<N>`: the database
/// server's CPU microseconds per event of the default kind, the other kinds' in its detail
/// (the statements' server-side cost, much less moved by the commits' disk waits than the
/// commit rate; not on SQLite, which runs in this process).
/// `write_eps`, `write_eps_no_notify` are the first count's; `write_eps_notify_over_none` (and
/// `write_eps_every_over_none`) the lowest over the counts. Skipped with `--skip-write`.
pub async fn write_figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    if args.skip_write {
        for f in [
            "write_eps",
            "write_eps_no_notify",
            "write_eps_notify_over_none",
        ] {
            figs.skip(f, "--skip-write");
        }
        return Ok(());
    }
    let postgres = bench.backend == DbBackend::Postgres;
    let kinds: &[Insert] = if postgres {
        &[Insert::Plain, Insert::Default, Insert::Every, Insert::Off]
    } else {
        &[Insert::Plain, Insert::Default]
    };
    // Whole Williams squares only: a partial square favours some kinds' positions.
    let repeats = args.write_repeats.max(1).div_ceil(kinds.len()) * kinds.len();
    let events = args.write_events.max(1);
    let mut lowest: Option<(f64, f64)> = None;
    let mut first: Option<(f64, f64)> = None;
    for &writers in &args.writers {
        reset(setup).await?;
        let db = bench.pool(writers as u32).await?;
        // Warm-up: connections opened, caches and plans filled; not counted.
        for &kind in kinds {
            write_block(&db, args, writers, kind, events).await?;
        }
        let mut blocks = Blocks::default();
        for round in 0..repeats {
            // The spacer: a quarter block of the plain insert, not counted, so that every
            // round's first block follows the same kind (see `williams_row`).
            write_block(&db, args, writers, Insert::Plain, (events / 4).max(1)).await?;
            for kind in williams_row(kinds.len(), round)
                .into_iter()
                .map(|k| kinds[k])
            {
                let (secs, server_us) = write_block(&db, args, writers, kind, events).await?;
                blocks.server_us[kind as usize] += server_us * events as f64;
                blocks.events[kind as usize] += events;
                blocks.secs[kind as usize] += secs;
                blocks.eps[kind as usize].push(events as f64 / secs);
            }
        }
        db.close().await?;
        let how = format!(
            "{writers} concurrent one-event transactions, {repeats} blocks of {events} events \
             interleaved in balanced order (Williams square, an untimed spacer block before each round) \
             on one table; events over the blocks' total time"
        );
        let (d, p) = (blocks.eps(Insert::Default), blocks.eps(Insert::Plain));
        let ratio = blocks.ratio(Insert::Default, Insert::Plain);
        figs.add(
            &format!("write_eps_w{writers}"),
            f1(d),
            format!(
                "{how}, through with_event with the default settings{}",
                if postgres {
                    " (insert + pg_notify shared by the 10 ms slot's advisory lock)"
                } else {
                    ""
                }
            ),
        );
        figs.add(
            &format!("write_eps_no_notify_w{writers}"),
            f1(p),
            format!("{how}, the library's plain insert statement (no pg_notify)"),
        );
        figs.add(
            &format!("write_eps_notify_over_none_w{writers}"),
            f3(ratio),
            format!(
                "write_eps / write_eps_no_notify; {}",
                blocks.per_round(Insert::Default, Insert::Plain)
            ),
        );
        let mut every_ratio = f64::NAN;
        if postgres {
            every_ratio = blocks.ratio(Insert::Every, Insert::Plain);
            figs.add(
                &format!("write_eps_notify_every_w{writers}"),
                f1(blocks.eps(Insert::Every)),
                format!("{how}, with_event notify_interval(0): every event notifies"),
            );
            figs.add(
                &format!("write_eps_every_over_none_w{writers}"),
                f3(every_ratio),
                format!(
                    "write_eps_notify_every / write_eps_no_notify; {}",
                    blocks.per_round(Insert::Every, Insert::Plain)
                ),
            );
            figs.add(
                &format!("write_eps_off_over_none_w{writers}"),
                f3(blocks.ratio(Insert::Off, Insert::Plain)),
                format!(
                    "with_event with notify_relays(false) / the plain insert (the library's \
                     cost without the notify; the noise floor); {}",
                    blocks.per_round(Insert::Off, Insert::Plain)
                ),
            );
            figs.add(
                &format!("write_eps_notify_over_off_w{writers}"),
                f3(blocks.ratio(Insert::Default, Insert::Off)),
                format!(
                    "with_event default / with notify_relays(false) (the notify's own tax); {}",
                    blocks.per_round(Insert::Default, Insert::Off)
                ),
            );
        }
        let us = |k| f1(blocks.server_us(k));
        if bench.backend != DbBackend::Sqlite {
            let others = if postgres {
                format!(
                    ", every event notifying {}, notify off {}",
                    us(Insert::Every),
                    us(Insert::Off)
                )
            } else {
                String::new()
            };
            figs.add(
                &format!("write_server_us_per_event_w{writers}"),
                us(Insert::Default),
                format!(
                    "the database server's CPU microseconds per event (all its processes, \
                     /proc) of with_event default; plain insert {}{others}",
                    us(Insert::Plain)
                ),
            );
        }
        first.get_or_insert((d, p));
        lowest = Some(match lowest {
            None => (ratio, every_ratio),
            Some((r, e)) => (r.min(ratio), e.min(every_ratio)),
        });
    }
    let Some(((d, p), (ratio, every_ratio))) = first.zip(lowest) else {
        return Err("--writers names no writer count".into());
    };
    let first_count = args.writers[0];
    figs.add(
        "write_eps",
        f1(d),
        format!("write_eps_w{first_count}: with_event, default settings"),
    );
    figs.add(
        "write_eps_no_notify",
        f1(p),
        format!("write_eps_no_notify_w{first_count}: the plain insert"),
    );
    figs.add(
        "write_eps_notify_over_none",
        f3(ratio),
        format!(
            "the lowest write_eps_notify_over_none_w<N> over --writers {:?}",
            args.writers
        ),
    );
    if postgres {
        figs.add(
            "write_eps_every_over_none",
            f3(every_ratio),
            "the lowest write_eps_every_over_none_w<N>: every event notifying",
        );
    }
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
    // A table of some history: an index costs more the larger it is.
    crate::setup::fill(setup, args.overhead_rows, "SUCCESS").await?;
    let schema = Schema::new(bench.backend);
    setup
        .execute(
            schema
                .create_table_from_entity(order::Entity)
                .if_not_exists(),
        )
        .await?;
    // Order numbers are unique: a second measurement starts from no orders.
    order::Entity::delete_many().exec(setup).await?;
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

/// `with_event_overhead_ms` (every migration applied), `with_event_overhead_ms_before_index`
/// (the ordered claim's index dropped by its migration's `down`, measured between the two
/// halves of the first) and `biz_no_index_overhead_ms`, over `--overhead-rows` delivered rows;
/// or skipped with `--skip-overhead`.
pub async fn overhead_figures(
    figs: &mut Figures,
    bench: &ScratchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<(), BoxError> {
    use sea_orm_migration::{MigrationTrait, SchemaManager};
    use sea_orm_outbox::migration::AddBizNoStatusIndex;
    if args.skip_overhead {
        figs.skip("with_event_overhead_ms", "--skip-overhead");
        return Ok(());
    }
    let half = Args {
        overhead_samples: args.overhead_samples.div_ceil(2),
        ..args.clone()
    };
    let (d1, p1, w1) = with_event_overhead(bench, setup, &half).await?;
    let manager = SchemaManager::new(setup);
    AddBizNoStatusIndex.down(&manager).await?;
    let before = with_event_overhead(bench, setup, args).await;
    // Back up before anything else, whatever the measurement did.
    AddBizNoStatusIndex.up(&manager).await?;
    let (db, pb, wb) = before?;
    let (d2, p2, w2) = with_event_overhead(bench, setup, &half).await?;
    let (d, p, w) = ((d1 + d2) / 2.0, (p1 + p2) / 2.0, (w1 + w2) / 2.0);
    figs.add(
        "with_event_overhead_ms",
        f3(d),
        format!(
            "every migration; {} rows; median of {} txns each (two halves, mean): insert+commit {:.3} ms, insert+with_event+commit {:.3} ms",
            args.overhead_rows, args.overhead_samples, p, w
        ),
    );
    figs.add(
        "with_event_overhead_ms_before_index",
        f3(db),
        format!(
            "without idx_t_event_record_biz_no_status_id (AddBizNoStatusIndex down); median of {} txns each: insert+commit {:.3} ms, insert+with_event+commit {:.3} ms",
            args.overhead_samples, pb, wb
        ),
    );
    figs.add(
        "biz_no_index_overhead_ms",
        f3(d - db),
        "with_event_overhead_ms - with_event_overhead_ms_before_index",
    );
    Ok(())
}

/// `event` (without headers) inserted as the outbox's insert writes it, without its wake-up:
/// the row as `with_event` leaves it, `WAIT` and due now by the database clock, its id
/// returned where the backend has `RETURNING`.
fn plain_insert(backend: DbBackend, event: &NewEvent) -> InsertStatement {
    let now = Expr::cust(now_sql(backend, None));
    let mut insert = Query::insert();
    insert
        .into_table(Entity)
        .columns([
            Column::BizNo,
            Column::EventType,
            Column::Payload,
            Column::Status,
            Column::RetryCount,
            Column::NextRetryTime,
            Column::CreateTime,
            Column::UpdateTime,
        ])
        .values_panic([
            Expr::val(event.biz_no()),
            Expr::val(event.event_type()),
            Expr::val(event.payload()),
            Expr::val(EventStatus::Wait.as_str()),
            Expr::val(0),
            now.clone(),
            now.clone(),
            now,
        ]);
    if backend != DbBackend::MySql {
        insert.returning_col(Column::Id);
    }
    insert
}
