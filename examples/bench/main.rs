//! Benchmark of the relay against the database's own limit.
//!
//! ```text
//! cargo run --release --example bench -- --events 50000 --workers 3
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --release --example bench
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --release --example bench
//! cargo run --example bench -- --small        # CI: a few thousand events, seconds
//! ```
//! `DATABASE_URL` is an ADMIN connection: every run creates a database of its own
//! (`outbox_bench_<random>`, dropped at the end unless `--keep`), or a fresh SQLite file in the
//! temp directory when the URL is unset or `sqlite:...`. Each phase starts from an empty
//! `t_event_record` filled by bulk SQL.
//!
//! Prints one `figure: NAME VALUE` line per figure as it is measured, then a table:
//! - `db_limit_eps`: WAIT→SENDING→SUCCESS as bare batched SQL on one connection (claim `--batch`
//!   rows in one statement / short transaction, mark them in one `UPDATE`), one client
//!   connection.
//! - `db_limit_inproc_eps_c1` .. `_c4`, `db_limit_best_eps`: the same claim and owner-guarded
//!   mark run inside the database (a stored procedure looping claim/mark with a COMMIT per
//!   batch), `CALL`ed on 1..4 connections at once over the same WAIT rows; the best of them is
//!   the ceiling (Postgres, MariaDB/MySQL; skipped on SQLite).
//! - `per_row_eps`, `batch_eps`: W workers (own pools), a no-op counting publisher, N events
//!   already `WAIT`, completing delivered rows as `--completion` says (update or delete);
//!   `relay_server_us_per_event` (the database server's CPU per event of the batch phase, until
//!   InnoDB's purge caught up on MySQL/MariaDB) and on Postgres `relay_wal_bytes_per_event`; `relay_over_limit`, `relay_over_best_limit` (batch_eps /
//!   db_limit_best_eps), `batch_over_per_row`; `duplicates_*`,
//!   `claim_lost_per_event_*`; CPU seconds of this process and of the database server per phase.
//! - `idle_latency_p50_ms`, `idle_latency_p99_ms`: commit → publish for events written one at a
//!   time to an idle relay polling every `--idle-poll-ms`; `idle_latency_wake_p50_ms`,
//!   `idle_latency_wake_p99_ms`: the same to a relay woken on commit with the default 5 s poll
//!   delay (Postgres `LISTEN`, the process-local wake-up on MariaDB/MySQL and SQLite).
//! - `write_eps`, `write_eps_no_notify`, `write_eps_notify_over_none`: one-event transactions per
//!   second through `with_event` (default settings) and through the plain insert, per writer
//!   count of `--writers` (default 8 and 32) as `_w<N>`, in short blocks interleaved in a
//!   balanced order (a Williams square, each round after an untimed spacer block of the plain
//!   insert) on one table (`--write-repeats` rounds of `--write-events` per kind); on Postgres
//!   also `write_eps_notify_every_w<N>` (every event notifying) and a control, `with_event` with the notify off: `write_eps_off_over_none_w<N>`
//!   (≈ 1 but for noise) and `write_eps_notify_over_off_w<N>` (the notify's own tax); per
//!   writer count (not on SQLite) `write_server_us_per_event_w<N>`, the database server's CPU
//!   per event of each kind (in the detail).
//! - `unordered_keys_eps`, `ordered_eps`, `ordered_over_unordered`: the batch relay over N events
//!   spread over `--ordered-keys` keys (default 1,000), unordered and then in ordered mode
//!   (`Block`, `--ordered-concurrency` keys in flight per worker), one run; `ordered_hot_key_eps`:
//!   ordered, every event on one key (`--hot-key-events`); `ordered_order_violations` (module
//!   `ordered`).
//! - `with_event_overhead_ms`: median(business insert + `with_event`) − median(business insert),
//!   over `--overhead-rows` delivered rows, with every migration (the ordered claim's index
//!   `idx_t_event_record_biz_no_status_id` among them); `with_event_overhead_ms_before_index`:
//!   the same with that index dropped (its migration's `down`, then `up` again), measured
//!   between two halves of the first so that drift falls on both; `biz_no_index_overhead_ms`.
//! - `idle_poll_rows_examined`: the candidate scan over `--poll-rows` `SUCCESS` rows
//!   (Postgres: `EXPLAIN (ANALYZE, BUFFERS)`, MariaDB/MySQL: `Handler_read%` deltas).
//! - `rocketmq_raw_eps`, `rocketmq_raw_batch_eps`, `rocketmq_relay_eps`, `relay_over_raw`,
//!   `relay_over_raw_batch` (and `rocketmq_relay_eps_w<W>` with `--rocketmq-scaling`): through
//!   the real broker when `ROCKETMQ_NAMESRV_ADDR` is set (module `rocketmq`).
//! - `<broker>_raw_eps`, `<broker>_relay_eps`, `<broker>_relay_over_raw` for each broker of
//!   `--brokers kafka,nats,rabbitmq,redis` (module `brokers_phase`).
//! - `peak_rss_mib`: this process' VmHWM (workers, publisher and bench bookkeeping together).
//!
//! Modules: `setup` (the outbox table's bulk fill), one module per group of figures (`limit`,
//! `relay`, `ordered`, `idle`, `writes`, `scan`), `cpu` (accounting from /proc) and `figures` (the report).
mod brokers_phase;
mod cpu;
mod figures;
mod idle;
mod limit;
mod ordered;
mod relay;
mod rocketmq;
mod scan;
mod setup;
mod writes;

// The bench sends through the demo's brokers; it does not read what arrived.
#[allow(dead_code)]
#[path = "../common/brokers.rs"]
mod brokers;
#[path = "../common/logging.rs"]
mod logging;
#[path = "../common/order.rs"]
mod order;
#[path = "../common/pool.rs"]
mod pool;
#[path = "../common/scratch.rs"]
mod scratch;

use std::time::Duration;

use clap::Parser;
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::{ClaimStrategy, Migrator};

use figures::{f1, Figures};
use scratch::{BoxError, ScratchDb};

/// How long the bench waits for a database connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug, Clone)]
#[command(about = "Benchmark the outbox relay against the database's own limit")]
struct Args {
    /// Admin database URL (a database of the run's own is created); default: SQLite temp file.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Events in each throughput phase.
    #[arg(long, default_value_t = 50_000)]
    events: u64,
    /// Relay instances, each with its own pool and instance id.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Batch size of the batch strategy and of the bare-SQL ceiling.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Batch size of the per-row strategy (the seed's 20).
    #[arg(long, default_value_t = 20)]
    per_row_batch: u64,
    /// Sends in flight per round in batch mode (also the largest mark statement).
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Sends in flight per round in per-row mode (the seed sends one after the other).
    #[arg(long, default_value_t = 1)]
    per_row_concurrency: usize,
    /// Poll delay of the throughput phases, ms (drain is on: it applies only when a round
    /// found less than a full batch).
    #[arg(long, default_value_t = 10)]
    poll_delay_ms: u64,
    /// Connections per worker pool.
    #[arg(long, default_value_t = 3)]
    pool: u32,
    /// Events written one at a time for the idle latency.
    #[arg(long, default_value_t = 200)]
    idle_events: usize,
    /// Poll delay of the idle-latency phase (polling only), ms.
    #[arg(long, default_value_t = 100)]
    idle_poll_ms: u64,
    /// Concurrent writers of the write-throughput phase: one or more counts, comma-separated
    /// (`write_eps` and `write_eps_no_notify` are the first count's).
    #[arg(long, value_delimiter = ',', default_values_t = [8, 32])]
    writers: Vec<usize>,
    /// The notify interval of `write_eps`'s events, ms (default: the library's,
    /// `sea_orm_outbox::NewEvent::DEFAULT_NOTIFY_INTERVAL`; for experiments).
    #[arg(long)]
    notify_interval_ms: Option<u64>,
    /// Rounds of the write-throughput phase per writer count, rounded up to a multiple of the
    /// insert kinds (4 on Postgres, 2 elsewhere): each runs one block of every kind, in the
    /// order of one row of a Williams square.
    #[arg(long, default_value_t = 16)]
    write_repeats: usize,
    /// Events (one-event transactions) of each block of the write-throughput phase.
    #[arg(long, default_value_t = 1_000)]
    write_events: u64,
    /// Skip the write-throughput phase.
    #[arg(long)]
    skip_write: bool,
    /// Run the workers on the bench's pools themselves (`RelayPool::Shared`: no check for
    /// leaked transactions) instead of pools of their own (`RelayPool::Own`, the default).
    #[arg(long)]
    shared_pool: bool,
    /// Samples of each kind for the with_event overhead.
    #[arg(long, default_value_t = 500)]
    overhead_samples: usize,
    /// SUCCESS rows under the idle candidate scan.
    #[arg(long, default_value_t = 1_000_000)]
    poll_rows: u64,
    /// CI mode: 3,000 events, 20 idle events, 50 overhead samples, 20,000 poll rows.
    #[arg(long)]
    small: bool,
    /// Skip the bare-SQL ceiling and the in-database drain.
    #[arg(long)]
    skip_db_limit: bool,
    /// Skip the per-row relay phase.
    #[arg(long)]
    skip_per_row: bool,
    /// Skip the batch relay phase.
    #[arg(long)]
    skip_batch: bool,
    /// The no-op publisher of the relay phases takes one event per publish call (one send task
    /// per event) instead of a claim's events per `publish_batch` call (batch sends, the
    /// relay's default path with `RocketMqPublisher`).
    #[arg(long)]
    noop_single: bool,
    /// Skip the ordered-mode phases (`ordered_over_unordered`, `ordered_hot_key_eps`).
    #[arg(long)]
    skip_ordered: bool,
    /// Keys the events of the ordered comparison are spread over (round robin).
    #[arg(long, default_value_t = 1_000)]
    ordered_keys: u64,
    /// Send slots (keys in flight) per worker in the ordered phases.
    #[arg(long, default_value_t = 16)]
    ordered_concurrency: usize,
    /// Events of the hot-key phase (every event on one key).
    #[arg(long, default_value_t = 20_000)]
    hot_key_events: u64,
    /// `SUCCESS` rows in the table while the with_event overhead is measured (the index cost
    /// grows with the table).
    #[arg(long, default_value_t = 200_000)]
    overhead_rows: u64,
    /// Skip the idle-latency phase.
    #[arg(long)]
    skip_idle: bool,
    /// Events of each RocketMQ phase (run when ROCKETMQ_NAMESRV_ADDR is set).
    #[arg(long, default_value_t = 20_000)]
    rocketmq_events: u64,
    /// Other brokers to measure the relay through, comma-separated (`kafka,nats,rabbitmq,redis`),
    /// each configured by its crate's variables; events: `--rocketmq-events`.
    #[arg(long, value_delimiter = ',')]
    brokers: Vec<String>,
    /// Also measure the relay through RocketMQ with 1, 2, 4 and 8 workers.
    #[arg(long)]
    rocketmq_scaling: bool,
    /// Send slots per worker with batch sends in the RocketMQ phase (each carries up to
    /// --batch events; the raw batch figure keeps workers × this many batches in flight).
    #[arg(long, default_value_t = 2)]
    rocketmq_batch_concurrency: usize,
    /// Events written one at a time for the commit → received latency through RocketMQ.
    #[arg(long, default_value_t = 200)]
    rocketmq_latency_events: usize,
    /// Skip the with_event overhead.
    #[arg(long)]
    skip_overhead: bool,
    /// Skip the idle-poll scan over many SUCCESS rows.
    #[arg(long)]
    skip_poll_rows: bool,
    /// Keep the run's database instead of dropping it.
    #[arg(long)]
    keep: bool,
    /// Give up a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// What the relay phases' workers do with a delivered row (`WorkerConfig::completion`).
    #[arg(long, value_enum, default_value = "delete")]
    completion: CompletionArg,
}

/// `--completion` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionArg {
    /// Mark the row SUCCESS.
    Update,
    /// Delete the row.
    Delete,
}

impl CompletionArg {
    fn as_str(self) -> &'static str {
        match self {
            CompletionArg::Update => "update",
            CompletionArg::Delete => "delete",
        }
    }
}

impl From<CompletionArg> for sea_orm_outbox::Completion {
    fn from(c: CompletionArg) -> Self {
        match c {
            CompletionArg::Update => sea_orm_outbox::Completion::Update,
            CompletionArg::Delete => sea_orm_outbox::Completion::Delete,
        }
    }
}

impl Args {
    /// `--small`: caps the sizes for a run of seconds.
    fn apply_small(&mut self) {
        if self.small {
            self.events = self.events.min(3_000);
            self.rocketmq_events = self.rocketmq_events.min(300);
            self.rocketmq_scaling = false;
            self.rocketmq_latency_events = self.rocketmq_latency_events.min(20);
            self.idle_events = self.idle_events.min(20);
            self.idle_poll_ms = self.idle_poll_ms.min(20);
            self.overhead_samples = self.overhead_samples.min(50);
            self.overhead_rows = self.overhead_rows.min(2_000);
            self.hot_key_events = self.hot_key_events.min(1_000);
            self.ordered_keys = self.ordered_keys.min(100);
            self.write_events = self.write_events.min(400);
            self.write_repeats = self.write_repeats.min(1);
            self.poll_rows = self.poll_rows.min(20_000);
            self.timeout_s = self.timeout_s.min(120);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    logging::init();
    let mut args = Args::parse();
    args.apply_small();

    let name = format!(
        "outbox_bench_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let bench = ScratchDb::create(args.database_url.as_deref(), name, CONNECT_TIMEOUT).await?;
    let result = run(&bench, &args).await;
    if args.keep {
        eprintln!("kept database {} ({})", bench.name, bench.url);
    } else if let Err(e) = bench.drop_db().await {
        eprintln!("could not drop {}: {e}", bench.name);
    }
    result
}

/// Every phase in turn on the run's database, then the table; an error when a fault-free run
/// published anything twice.
async fn run(bench: &ScratchDb, args: &Args) -> Result<(), BoxError> {
    let setup = bench.pool(2).await?;
    Migrator::up(&setup, None).await?;
    let mut figs = Figures::default();
    println!(
        "bench: backend={:?} database={} events={} workers={} pool={} batch={} \
         concurrency={} per_row_batch={} per_row_concurrency={} poll_delay_ms={} drain=on small={} \
         writers={:?} write_repeats={} write_events={} completion={}",
        bench.backend,
        bench.name,
        args.events,
        args.workers,
        args.pool,
        args.batch,
        args.concurrency,
        args.per_row_batch,
        args.per_row_concurrency,
        args.poll_delay_ms,
        args.small,
        args.writers,
        args.write_repeats,
        args.write_events,
        args.completion.as_str()
    );

    // 1. The ceiling.
    let limit = limit::figures(&mut figs, bench, &setup, args).await?;
    let best_limit = limit::inproc_figures(&mut figs, bench, &setup, args).await?;
    // 2. Per-row (the seed's claiming) and batch.
    let per_row = relay::figures(&mut figs, bench, &setup, args, ClaimStrategy::PerRow).await?;
    let batch = relay::figures(&mut figs, bench, &setup, args, ClaimStrategy::Batch).await?;
    let dups = relay::comparison_figures(
        &mut figs,
        limit,
        best_limit,
        per_row.as_ref(),
        batch.as_ref(),
    );

    // 2b. Ordered mode: 1,000 keys unordered and ordered, then one hot key.
    let order_violations = ordered::figures(&mut figs, bench, &setup, args).await?;

    // 3. RocketMQ (when ROCKETMQ_NAMESRV_ADDR is set).
    // Its duplicates are reported (`rocketmq_duplicates`), not an error: a send the broker
    // stored but answered too late is sent again (at-least-once); lost events are an error.
    rocketmq::figures(&mut figs, bench, &setup, args).await?;
    // 3b. The other brokers of --brokers.
    brokers_phase::figures(&mut figs, bench, &setup, args).await?;

    // 4. Idle latency, polling only and woken on commit; write throughput with and without
    // the notify.
    idle::figures(&mut figs, bench, &setup, args).await?;
    writes::write_figures(&mut figs, bench, &setup, args).await?;
    // 5. with_event overhead.
    writes::overhead_figures(&mut figs, bench, &setup, args).await?;
    // 6. The idle poll over many delivered rows.
    scan::figures(&mut figs, &setup, args).await?;

    // 7. Memory.
    match cpu::peak_rss_mib() {
        Some(m) => figs.add(
            "peak_rss_mib",
            f1(m),
            "VmHWM of the whole bench process (W workers, publisher, bookkeeping)",
        ),
        None => figs.skip("peak_rss_mib", "no /proc/self/status"),
    }

    println!();
    print!("{}", figs.table());
    setup.close().await?;
    if dups > 0 {
        return Err(format!("{dups} duplicate publications in a fault-free run").into());
    }
    if order_violations > 0 {
        return Err(format!("{order_violations} events of the ordered phases went out before an earlier one of their key").into());
    }

    Ok(())
}
