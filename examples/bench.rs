//! Benchmark of the relay against the database's own limit (issue 5).
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
//!   rows in one statement / short transaction, mark them in one `UPDATE`): the ceiling.
//! - `per_row_eps`, `batch_eps`: W workers (own pools), a no-op counting publisher, N events
//!   already `WAIT`; `relay_over_limit`, `batch_over_per_row`; `duplicates_*`,
//!   `claim_lost_per_event_*`; CPU seconds of this process and of the database server per phase.
//! - `idle_latency_p50_ms`, `idle_latency_p99_ms`: commit → publish for events written one at a
//!   time to an idle relay polling every `--idle-poll-ms`.
//! - `with_event_overhead_ms`: median(business insert + `with_event`) − median(business insert).
//! - `idle_poll_rows_examined`: the candidate scan over `--poll-rows` `SUCCESS` rows
//!   (Postgres: `EXPLAIN (ANALYZE, BUFFERS)`, MariaDB/MySQL: `Handler_read%` deltas).
//! - `peak_rss_mib`: this process' VmHWM (workers, publisher and bench bookkeeping together).
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use sea_orm::sea_query::{MysqlQueryBuilder, PostgresQueryBuilder};
use sea_orm::{
    ActiveValue::Set, ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend,
    EntityTrait, NotSet, QueryTrait, Schema, Statement, TransactionTrait, Value,
};
use sea_orm_outbox::{
    store, CancellationToken, ClaimStrategy, Migrator, MigratorTrait, NewEvent, OutboxExt,
    OutboxMessage, PublishError, Publisher, Worker, WorkerConfig, WorkerSummary,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The business table of the `with_event` overhead measurement.
mod order {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "bench_orders")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub order_no: String,
        pub amount_cents: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

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
    /// Concurrent writers of the write-throughput phase.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Events written (one transaction each) in the write-throughput phase.
    #[arg(long, default_value_t = 4_000)]
    write_events: u64,
    /// Skip the write-throughput phase.
    #[arg(long)]
    skip_write: bool,
    /// Samples of each kind for the with_event overhead.
    #[arg(long, default_value_t = 500)]
    overhead_samples: usize,
    /// SUCCESS rows under the idle candidate scan.
    #[arg(long, default_value_t = 1_000_000)]
    poll_rows: u64,
    /// CI mode: 3,000 events, 20 idle events, 50 overhead samples, 20,000 poll rows.
    #[arg(long)]
    small: bool,
    /// Skip the bare-SQL ceiling.
    #[arg(long)]
    skip_db_limit: bool,
    /// Skip the per-row relay phase.
    #[arg(long)]
    skip_per_row: bool,
    /// Skip the batch relay phase.
    #[arg(long)]
    skip_batch: bool,
    /// Skip the idle-latency phase.
    #[arg(long)]
    skip_idle: bool,
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
}

impl Args {
    fn apply_small(&mut self) {
        if self.small {
            self.events = self.events.min(3_000);
            self.idle_events = self.idle_events.min(20);
            self.idle_poll_ms = self.idle_poll_ms.min(20);
            self.overhead_samples = self.overhead_samples.min(50);
            self.write_events = self.write_events.min(400);
            self.poll_rows = self.poll_rows.min(20_000);
            self.timeout_s = self.timeout_s.min(120);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Figures

#[derive(Default)]
struct Figures(Vec<(String, String, String)>);

impl Figures {
    fn add(&mut self, name: &str, value: impl std::fmt::Display, note: impl Into<String>) {
        let value = value.to_string();
        println!("figure: {name} {value}");
        self.0.push((name.to_owned(), value, note.into()));
    }

    fn skip(&mut self, name: &str, why: impl Into<String>) {
        self.add(name, "skipped", why);
    }

    fn table(&self) -> String {
        let w = self.0.iter().map(|f| f.0.len()).max().unwrap_or(4).max(6);
        let v = self.0.iter().map(|f| f.1.len()).max().unwrap_or(5).max(5);
        let mut s = String::new();
        let _ = writeln!(s, "| {:w$} | {:>v$} | notes", "figure", "value");
        let _ = writeln!(
            s,
            "|{:-<w2$}|{:->v2$}|------",
            "",
            "",
            w2 = w + 2,
            v2 = v + 2
        );
        for (n, val, note) in &self.0 {
            let _ = writeln!(s, "| {n:w$} | {val:>v$} | {note}");
        }
        s
    }
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn f3(x: f64) -> String {
    format!("{x:.3}")
}

// ---------------------------------------------------------------------------------------------
// The no-op publisher: counts, remembers the first publish instant of every id.

#[derive(Default)]
struct CountingPublisher {
    total: AtomicU64,
    first: Mutex<HashMap<i64, Instant>>,
}

impl CountingPublisher {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Instant>> {
        self.first.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn distinct(&self) -> u64 {
        self.lock().len() as u64
    }
    fn duplicates(&self) -> u64 {
        self.total.load(Ordering::SeqCst) - self.distinct()
    }
    fn published_at(&self, id: i64) -> Option<Instant> {
        self.lock().get(&id).copied()
    }
}

#[async_trait]
impl Publisher for CountingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        let now = Instant::now();
        self.total.fetch_add(1, Ordering::SeqCst);
        self.lock().entry(m.event_id).or_insert(now);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc: this process, and the database server's processes.

const CLK_TCK: f64 = 100.0;

/// (comm, utime + stime ticks) of /proc/<pid>/stat.
fn proc_ticks(pid: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

fn server_ticks(backend: DbBackend) -> u64 {
    let names: &[&str] = match backend {
        DbBackend::Postgres => &["postgres"],
        DbBackend::MySql => &["mariadbd", "mysqld"],
        _ => return 0,
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|pid| proc_ticks(&pid))
        .filter(|(comm, _)| names.iter().any(|n| comm.starts_with(n)))
        .map(|(_, t)| t)
        .sum()
}

/// Busy and total ticks of all CPUs (/proc/stat), to see how loaded the machine was.
fn machine_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

struct CpuMark {
    at: Instant,
    me: u64,
    server: u64,
    machine: (u64, u64),
}

struct CpuUse {
    /// Cores used by this process (client: sea-orm, sqlx, the relay) on average.
    client_cores: f64,
    /// Cores used by the database server's processes.
    server_cores: f64,
    /// Cores busy machine-wide (includes other users' work).
    machine_cores: f64,
}

impl CpuMark {
    fn now(backend: DbBackend) -> Self {
        CpuMark {
            at: Instant::now(),
            me: proc_ticks("self").map_or(0, |t| t.1),
            server: server_ticks(backend),
            machine: machine_ticks(),
        }
    }
    fn since(&self, backend: DbBackend) -> CpuUse {
        let end = CpuMark::now(backend);
        let wall = end.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let cores = |a: u64, b: u64| b.saturating_sub(a) as f64 / CLK_TCK / wall;
        let (busy, total) = (
            end.machine.0.saturating_sub(self.machine.0) as f64,
            end.machine.1.saturating_sub(self.machine.1) as f64,
        );
        let ncpu = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        CpuUse {
            client_cores: cores(self.me, end.me),
            server_cores: cores(self.server, end.server),
            machine_cores: if total > 0.0 {
                busy / total * ncpu
            } else {
                0.0
            },
        }
    }
}

impl std::fmt::Display for CpuUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cpu cores: bench process {:.2}, db server {:.2}, machine {:.2}",
            self.client_cores, self.server_cores, self.machine_cores
        )
    }
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

// ---------------------------------------------------------------------------------------------
// The run's own database.

struct BenchDb {
    backend: DbBackend,
    url: String,
    admin: Option<String>,
    name: String,
    sqlite_path: Option<std::path::PathBuf>,
}

async fn connect(url: &str, max: u32) -> Result<DatabaseConnection, sea_orm::DbErr> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    Database::connect(opt).await
}

/// `url` with its database (path) replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let cut = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..cut], db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl BenchDb {
    async fn create(admin_url: Option<&str>) -> Result<Self, BoxError> {
        let name = format!(
            "outbox_bench_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        match admin_url.filter(|u| !u.is_empty() && !u.starts_with("sqlite")) {
            None => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                let url = format!("sqlite://{}?mode=rwc", path.display());
                let db = connect(&url, 1).await?;
                db.execute_unprepared("PRAGMA journal_mode=WAL").await?;
                db.close().await?;
                Ok(BenchDb {
                    backend: DbBackend::Sqlite,
                    url,
                    admin: None,
                    name,
                    sqlite_path: Some(path),
                })
            }
            Some(admin) => {
                let conn = connect(admin, 1).await?;
                let backend = conn.get_database_backend();
                let quoted = match backend {
                    DbBackend::MySql => format!("`{name}`"),
                    _ => format!("\"{name}\""),
                };
                conn.execute_unprepared(&format!("CREATE DATABASE {quoted}"))
                    .await?;
                conn.close().await?;
                Ok(BenchDb {
                    backend,
                    url: with_database(admin, &name),
                    admin: Some(admin.to_owned()),
                    name,
                    sqlite_path: None,
                })
            }
        }
    }

    async fn drop_db(&self) -> Result<(), BoxError> {
        if let Some(path) = &self.sqlite_path {
            for ext in ["", "-wal", "-shm"] {
                std::fs::remove_file(format!("{}{ext}", path.display())).ok();
            }
            return Ok(());
        }
        if let Some(admin) = &self.admin {
            let conn = connect(admin, 1).await?;
            let sql = match self.backend {
                DbBackend::MySql => format!("DROP DATABASE IF EXISTS `{}`", self.name),
                _ => format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
            };
            conn.execute_unprepared(&sql).await?;
            conn.close().await?;
        }
        Ok(())
    }
}

/// Empties the outbox table.
async fn reset(db: &DatabaseConnection) -> Result<(), BoxError> {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => "TRUNCATE t_event_record RESTART IDENTITY",
        DbBackend::MySql => "TRUNCATE TABLE t_event_record",
        _ => "DELETE FROM t_event_record",
    };
    db.execute_unprepared(sql).await?;
    Ok(())
}

/// Inserts `n` events with `status` by bulk SQL, due an hour ago (Postgres and MariaDB: one
/// microsecond apart, in id order), then refreshes the planner statistics.
async fn fill(db: &DatabaseConnection, n: u64, status: &str) -> Result<(), BoxError> {
    let backend = db.get_database_backend();
    let cols = "biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time";
    match backend {
        DbBackend::Postgres => {
            db.execute_unprepared(&format!(
                "INSERT INTO t_event_record ({cols}) SELECT 'BENCH-' || g, 'ORDER_CREATED', \
                 '{{\"orderId\":' || g || ',\"amountCents\":1234}}', '{status}', 0, \
                 CURRENT_TIMESTAMP - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', \
                 CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM generate_series(1, {n}) g"
            ))
            .await?;
            db.execute_unprepared("VACUUM ANALYZE t_event_record")
                .await?;
            return Ok(());
        }
        DbBackend::MySql => {
            // MariaDB's sequence engine; MySQL lacks it and takes the generic path below.
            let seq = db
                .execute_unprepared(&format!(
                    "INSERT INTO t_event_record ({cols}) SELECT CONCAT('BENCH-', seq), \
                     'ORDER_CREATED', CONCAT('{{\"orderId\":', seq, ',\"amountCents\":1234}}'), \
                     '{status}', 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL seq MICROSECOND, \
                     UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq_1_to_{n}"
                ))
                .await;
            if seq.is_ok() {
                db.execute_unprepared("ANALYZE TABLE t_event_record")
                    .await?;
                return Ok(());
            }
        }
        _ => {}
    }
    let due = store::dialect::now_sql(backend, Some(('-', Duration::from_secs(3600))));
    let now = store::dialect::now_sql(backend, None);
    let mut i = 1;
    while i <= n {
        let end = (i + 999).min(n);
        let mut sql = format!("INSERT INTO t_event_record ({cols}) VALUES ");
        for g in i..=end {
            if g > i {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('BENCH-{g}', 'ORDER_CREATED', '{{\"orderId\":{g},\"amountCents\":1234}}', \
                 '{status}', 0, {due}, {now}, {now})"
            );
        }
        db.execute_unprepared(&sql).await?;
        i = end + 1;
    }
    db.execute_unprepared(if backend == DbBackend::MySql {
        "ANALYZE TABLE t_event_record"
    } else {
        "ANALYZE"
    })
    .await?;
    Ok(())
}

async fn status_counts(db: &DatabaseConnection) -> Result<HashMap<String, i64>, BoxError> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT status, COUNT(*) FROM t_event_record GROUP BY status",
        ))
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        out.insert(
            r.try_get_by_index::<String>(0)?,
            r.try_get_by_index::<i64>(1)?,
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The ceiling: bare batched SQL on one connection.

fn placeholders(backend: DbBackend, first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| match backend {
            DbBackend::Postgres => format!("${i}"),
            _ => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The claimed rows' publish fields, read as a relay would.
struct Row {
    id: i64,
    _biz_no: String,
    _event_type: String,
    _payload: String,
    _retry_count: i32,
}

fn read_rows(rows: &[sea_orm::QueryResult]) -> Result<Vec<Row>, BoxError> {
    rows.iter()
        .map(|r| {
            Ok(Row {
                id: r.try_get_by_index(0)?,
                _biz_no: r.try_get_by_index(1)?,
                _event_type: r.try_get_by_index(2)?,
                _payload: r.try_get_by_index(3)?,
                _retry_count: r.try_get_by_index(4)?,
            })
        })
        .collect()
}

const FIELDS: &str = "id, biz_no, event_type, payload, retry_count";

/// Claims up to `batch` due events for `owner` with the backend's best single round trip (a
/// short transaction on MySQL), returning their publish fields.
async fn bare_claim(
    db: &DatabaseConnection,
    owner: &str,
    batch: u64,
) -> Result<Vec<Row>, BoxError> {
    let backend = db.get_database_backend();
    let now = store::dialect::now_sql(backend, None);
    match backend {
        DbBackend::Postgres => {
            let sql = format!(
                "UPDATE t_event_record SET status = 'SENDING', claim_owner = $1, claimed_at = {now}, \
                 update_time = {now} WHERE status = 'WAIT' AND id = ANY(ARRAY(SELECT id FROM \
                 t_event_record WHERE status = 'WAIT' AND next_retry_time <= {now} ORDER BY \
                 next_retry_time LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING {FIELDS}"
            );
            let rows = db
                .query_all_raw(Statement::from_sql_and_values(
                    backend,
                    sql,
                    [owner.into(), (batch as i64).into()],
                ))
                .await?;
            read_rows(&rows)
        }
        DbBackend::MySql => {
            let txn = db.begin().await?;
            let sql = format!(
                "SELECT {FIELDS} FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= \
                 {now} ORDER BY next_retry_time LIMIT ? FOR UPDATE SKIP LOCKED"
            );
            let rows = read_rows(
                &txn.query_all_raw(Statement::from_sql_and_values(
                    backend,
                    sql,
                    [(batch as i64).into()],
                ))
                .await?,
            )?;
            if !rows.is_empty() {
                let sql = format!(
                    "UPDATE t_event_record SET status = 'SENDING', claim_owner = ?, claimed_at = {now}, \
                     update_time = {now} WHERE status = 'WAIT' AND id IN ({})",
                    placeholders(backend, 1, rows.len())
                );
                let mut values: Vec<Value> = vec![owner.into()];
                values.extend(rows.iter().map(|r| Value::from(r.id)));
                txn.execute_raw(Statement::from_sql_and_values(backend, sql, values))
                    .await?;
            }
            txn.commit().await?;
            Ok(rows)
        }
        _ => {
            let sql = format!(
                "UPDATE t_event_record SET status = 'SENDING', claim_owner = ?, claimed_at = {now}, \
                 update_time = {now} WHERE status = 'WAIT' AND id IN (SELECT id FROM t_event_record \
                 WHERE status = 'WAIT' AND next_retry_time <= {now} ORDER BY next_retry_time LIMIT ?) \
                 RETURNING {FIELDS}"
            );
            let rows = db
                .query_all_raw(Statement::from_sql_and_values(
                    backend,
                    sql,
                    [owner.into(), (batch as i64).into()],
                ))
                .await?;
            read_rows(&rows)
        }
    }
}

/// Marks `ids` SUCCESS in one owner-guarded UPDATE.
async fn bare_mark(db: &DatabaseConnection, owner: &str, ids: &[i64]) -> Result<u64, BoxError> {
    let backend = db.get_database_backend();
    let now = store::dialect::now_sql(backend, None);
    let sql = format!(
        "UPDATE t_event_record SET status = 'SUCCESS', update_time = {now} WHERE status = 'SENDING' \
         AND claim_owner = {} AND id IN ({})",
        placeholders(backend, 1, 1),
        placeholders(backend, 2, ids.len())
    );
    let mut values: Vec<Value> = vec![owner.into()];
    values.extend(ids.iter().map(|id| Value::from(*id)));
    Ok(db
        .execute_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?
        .rows_affected())
}

struct LimitResult {
    eps: f64,
    secs: f64,
    claim_ms: f64,
    mark_ms: f64,
    cpu: CpuUse,
}

async fn db_limit(
    bench: &BenchDb,
    setup: &DatabaseConnection,
    args: &Args,
) -> Result<LimitResult, BoxError> {
    reset(setup).await?;
    fill(setup, args.events, "WAIT").await?;
    let db = connect(&bench.url, 1).await?;
    let owner = "bench-bare-sql";
    let (mut claim, mut mark, mut done) = (Duration::ZERO, Duration::ZERO, 0u64);
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    loop {
        let t = Instant::now();
        let rows = bare_claim(&db, owner, args.batch).await?;
        claim += t.elapsed();
        if rows.is_empty() {
            break;
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let t = Instant::now();
        done += bare_mark(&db, owner, &ids).await?;
        mark += t.elapsed();
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.since(bench.backend);
    db.close().await?;
    if done != args.events {
        return Err(format!("bare SQL marked {done} of {} events", args.events).into());
    }
    Ok(LimitResult {
        eps: done as f64 / secs,
        secs,
        claim_ms: claim.as_secs_f64() * 1000.0,
        mark_ms: mark.as_secs_f64() * 1000.0,
        cpu,
    })
}

// ---------------------------------------------------------------------------------------------
// The relay.

struct RelayResult {
    eps: f64,
    secs: f64,
    total: WorkerSummary,
    duplicates: u64,
    cpu: CpuUse,
    /// Postgres, batch strategy: the claim statement EXPLAINed over the full backlog.
    claim_plan: Option<ScanResult>,
}

fn worker_config(
    strategy: ClaimStrategy,
    batch: u64,
    concurrency: usize,
    poll: Duration,
    wake: bool,
) -> WorkerConfig {
    WorkerConfig::default()
        .wake_on_commit(wake)
        .claim_strategy(strategy)
        .batch_size(batch)
        .send_concurrency(concurrency)
        .drain(true)
        .poll_delay(poll)
}

async fn start_workers(
    bench: &BenchDb,
    args: &Args,
    config: &WorkerConfig,
    publisher: &Arc<CountingPublisher>,
    cancel: &CancellationToken,
    label: &str,
) -> Result<
    (
        Vec<Arc<Worker>>,
        Vec<tokio::task::JoinHandle<WorkerSummary>>,
    ),
    BoxError,
> {
    let mut workers = Vec::new();
    for w in 0..args.workers {
        // The LISTEN connection of wake-on-commit comes on top of the pool's working ones.
        let extra = u32::from(config.wake_on_commit && bench.backend == DbBackend::Postgres);
        let db = connect(&bench.url, args.pool + extra).await?;
        let worker = Arc::new(Worker::new(
            db,
            publisher.clone() as Arc<dyn Publisher>,
            config.clone().instance_id(format!("bench-{label}-{w}")),
        )?);
        workers.push(worker);
    }
    let handles = workers
        .iter()
        .map(|w| {
            let (w, cancel) = (w.clone(), cancel.clone());
            tokio::spawn(async move { w.run(cancel).await })
        })
        .collect();
    Ok((workers, handles))
}

async fn relay(
    bench: &BenchDb,
    setup: &DatabaseConnection,
    args: &Args,
    config: WorkerConfig,
    label: &str,
) -> Result<RelayResult, BoxError> {
    reset(setup).await?;
    fill(setup, args.events, "WAIT").await?;
    let claim_plan = if bench.backend == DbBackend::Postgres
        && config.claim_strategy == ClaimStrategy::Batch
    {
        let claim = store::claim_batch_statement(bench.backend, "bench-probe", config.batch_size);
        Some(pg_explain(setup, &claim.to_string(PostgresQueryBuilder)).await?)
    } else {
        None
    };
    let publisher = Arc::new(CountingPublisher::default());
    let cancel = CancellationToken::new();
    let cpu = CpuMark::now(bench.backend);
    let start = Instant::now();
    let (workers, handles) =
        start_workers(bench, args, &config, &publisher, &cancel, label).await?;
    let deadline = start + Duration::from_secs(args.timeout_s);
    let published = || workers.iter().map(|w| w.summary().published).sum::<u64>();
    while published() < args.events && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.since(bench.backend);
    cancel.cancel();
    let mut total = WorkerSummary::default();
    for h in handles {
        let s = h.await?;
        total.rounds += s.rounds;
        total.candidates += s.candidates;
        total.claimed += s.claimed;
        total.claim_lost += s.claim_lost;
        total.published += s.published;
        total.late_acks += s.late_acks;
        total.released += s.released;
        total.errors += s.errors;
    }
    for w in workers {
        w.db().clone().close().await.ok();
    }
    let counts = status_counts(setup).await?;
    let success = counts.get("SUCCESS").copied().unwrap_or(0);
    if success != args.events as i64 || total.published != args.events {
        return Err(format!(
            "{label}: {} of {} events SUCCESS after {secs:.1} s (statuses {counts:?}, summary {total:?})",
            success, args.events
        )
        .into());
    }
    Ok(RelayResult {
        eps: args.events as f64 / secs,
        secs,
        total,
        duplicates: publisher.duplicates(),
        cpu,
        claim_plan,
    })
}

// ---------------------------------------------------------------------------------------------
// Idle latency: commit → publish, one event at a time.

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A small deterministic generator for the gaps between writes (so that writes do not fall
/// in step with the poll).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// `<prefix>_p50_ms` and `<prefix>_p99_ms` of [`idle_latency`] with Batch workers polling every
/// `poll` (and waking on commit when `wake`), or both skipped with `skip`'s reason.
#[allow(clippy::too_many_arguments)]
async fn idle_figures(
    figs: &mut Figures,
    bench: &BenchDb,
    setup: &DatabaseConnection,
    args: &Args,
    prefix: &str,
    poll: Duration,
    wake: bool,
    workers: &str,
    skip: Option<&str>,
) -> Result<(), BoxError> {
    let (p50, p99) = (format!("{prefix}_p50_ms"), format!("{prefix}_p99_ms"));
    if let Some(why) = skip {
        figs.skip(&p50, why);
        figs.skip(&p99, why);
        return Ok(());
    }
    let config = worker_config(
        ClaimStrategy::Batch,
        args.batch,
        args.concurrency,
        poll,
        wake,
    );
    let l = idle_latency(bench, setup, args, config).await?;
    let note = format!(
        "{} events one at a time, {workers}; max {:.1} ms",
        l.len(),
        l.last().copied().unwrap_or(f64::NAN)
    );
    figs.add(&p50, f1(percentile(&l, 50.0)), note.clone());
    figs.add(&p99, f1(percentile(&l, 99.0)), note);
    Ok(())
}

async fn idle_latency(
    bench: &BenchDb,
    setup: &DatabaseConnection,
    args: &Args,
    config: WorkerConfig,
) -> Result<Vec<f64>, BoxError> {
    reset(setup).await?;
    let publisher = Arc::new(CountingPublisher::default());
    let cancel = CancellationToken::new();
    let (_workers, handles) =
        start_workers(bench, args, &config, &publisher, &cancel, "idle").await?;
    let writer = connect(&bench.url, 1).await?;
    // Let every worker finish its first (empty) round.
    tokio::time::sleep(config.poll_delay.min(Duration::from_millis(200))).await;
    let mut rng = Lcg(42);
    let mut latencies = Vec::with_capacity(args.idle_events);
    for i in 0..args.idle_events {
        let txn = writer.begin().await?;
        let id = txn
            .with_event(NewEvent::raw(
                format!("IDLE-{i}"),
                "ORDER_CREATED",
                format!("{{\"orderId\":{i}}}"),
            ))
            .await?;
        txn.commit().await?;
        let committed = Instant::now();
        let deadline = committed + Duration::from_secs(args.timeout_s.min(60));
        let published = loop {
            if let Some(at) = publisher.published_at(id) {
                break at;
            }
            if Instant::now() > deadline {
                return Err(format!("idle event {id} not published within the deadline").into());
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        latencies.push(published.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        // Next write after a random gap of up to `--idle-poll-ms`.
        let gap = rng.next() % (args.idle_poll_ms * 1000).max(1);
        tokio::time::sleep(Duration::from_micros(gap)).await;
    }
    cancel.cancel();
    for h in handles {
        h.await?;
    }
    writer.close().await?;
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(latencies)
}

// ---------------------------------------------------------------------------------------------
// with_event overhead.

async fn with_event_overhead(
    bench: &BenchDb,
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
    let db = connect(&bench.url, 1).await?;
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

// ---------------------------------------------------------------------------------------------
// Write throughput: `--writers` concurrent transactions of one event each.

/// Events per second written by `--writers` concurrent one-event transactions: through
/// `with_event` (on Postgres the insert also queues `pg_notify` for wake-on-commit), or with the
/// library's plain insert statement (no notify).
async fn write_eps(
    bench: &BenchDb,
    setup: &DatabaseConnection,
    args: &Args,
    with_event: bool,
) -> Result<f64, BoxError> {
    reset(setup).await?;
    let db = connect(&bench.url, args.writers as u32).await?;
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

// ---------------------------------------------------------------------------------------------
// The idle candidate scan over many SUCCESS rows.

struct ScanResult {
    /// Rows the scan touched (Postgres: rows out of scan nodes plus rows removed by filters;
    /// MySQL: Handler_read% delta).
    rows_examined: i64,
    /// Postgres: shared buffers hit + read.
    buffers: Option<i64>,
    /// Plan summary (Postgres: scan nodes; MySQL: non-zero handler counters).
    plan: String,
    /// Median wall time of the statement, ms.
    median_ms: f64,
}

/// Sums rows examined and lists scan nodes of a Postgres JSON plan node.
fn walk_pg_plan(node: &serde_json::Value, rows: &mut i64, plan: &mut Vec<String>) {
    let get = |k: &str| node.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
    let kind = node
        .get("Node Type")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    if kind.contains("Scan") {
        let out = get("Actual Rows") * get("Actual Loops").max(1.0);
        let removed = get("Rows Removed by Filter") + get("Rows Removed by Index Recheck");
        *rows += (out + removed) as i64;
        let index = node
            .get("Index Name")
            .and_then(|v| v.as_str())
            .unwrap_or("-");
        plan.push(format!("{kind} on {index}: {out} rows, {removed} removed"));
    }
    if let Some(children) = node.get("Plans").and_then(|v| v.as_array()) {
        for c in children {
            walk_pg_plan(c, rows, plan);
        }
    }
}

async fn pg_explain(db: &DatabaseConnection, sql: &str) -> Result<ScanResult, BoxError> {
    let txn = db.begin().await?; // EXPLAIN ANALYZE of an UPDATE runs it: roll back afterwards.
    let row = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
        ))
        .await?
        .ok_or("EXPLAIN returned nothing")?;
    let json: serde_json::Value = row.try_get_by_index(0)?;
    let top = &json[0];
    let (mut rows, mut plan) = (0, Vec::new());
    walk_pg_plan(&top["Plan"], &mut rows, &mut plan);
    let p = &top["Plan"];
    let buffers = p["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + p["Shared Read Blocks"].as_i64().unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        txn.execute_unprepared(sql).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    txn.rollback().await?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(ScanResult {
        rows_examined: rows,
        buffers: Some(buffers),
        plan: plan.join("; "),
        median_ms: percentile(&times, 50.0),
    })
}

async fn mysql_handler_reads(
    txn: &sea_orm::DatabaseTransaction,
) -> Result<HashMap<String, i64>, BoxError> {
    let rows = txn
        .query_all_raw(Statement::from_string(
            DbBackend::MySql,
            "SHOW SESSION STATUS LIKE 'Handler_read%'",
        ))
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        let name: String = r.try_get_by_index(0)?;
        let value: String = r.try_get_by_index(1)?;
        out.insert(name, value.parse().unwrap_or(0));
    }
    Ok(out)
}

fn delta(a: &HashMap<String, i64>, b: &HashMap<String, i64>) -> HashMap<String, i64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0)))
        .collect()
}

async fn mysql_scan(db: &DatabaseConnection, sql: &str) -> Result<ScanResult, BoxError> {
    // One transaction = one connection, so the session counters are this statement's.
    let txn = db.begin().await?;
    let s0 = mysql_handler_reads(&txn).await?;
    let s1 = mysql_handler_reads(&txn).await?; // what SHOW STATUS itself adds
    txn.query_all_raw(Statement::from_string(DbBackend::MySql, sql.to_owned()))
        .await?;
    let s2 = mysql_handler_reads(&txn).await?;
    let (noise, scan) = (delta(&s0, &s1), delta(&s1, &s2));
    let mut parts: Vec<(String, i64)> = scan
        .iter()
        .map(|(k, v)| (k.clone(), v - noise.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v != 0)
        .collect();
    parts.sort();
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        txn.query_all_raw(Statement::from_string(DbBackend::MySql, sql.to_owned()))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    txn.rollback().await?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(ScanResult {
        rows_examined: parts.iter().map(|p| p.1).sum(),
        buffers: None,
        plan: if parts.is_empty() {
            "no handler reads".into()
        } else {
            parts
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        median_ms: percentile(&times, 50.0),
    })
}

// ---------------------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let mut args = Args::parse();
    args.apply_small();

    let bench = BenchDb::create(args.database_url.as_deref()).await?;
    let result = run(&bench, &args).await;
    if args.keep {
        eprintln!("kept database {} ({})", bench.name, bench.url);
    } else if let Err(e) = bench.drop_db().await {
        eprintln!("could not drop {}: {e}", bench.name);
    }
    result
}

async fn run(bench: &BenchDb, args: &Args) -> Result<(), BoxError> {
    let setup = connect(&bench.url, 2).await?;
    Migrator::up(&setup, None).await?;
    let backend = bench.backend;
    let mut figs = Figures::default();
    let poll = Duration::from_millis(args.poll_delay_ms);
    println!(
        "bench: backend={backend:?} database={} events={} workers={} pool={} batch={} \
         concurrency={} per_row_batch={} per_row_concurrency={} poll_delay_ms={} drain=on small={}",
        bench.name,
        args.events,
        args.workers,
        args.pool,
        args.batch,
        args.concurrency,
        args.per_row_batch,
        args.per_row_concurrency,
        args.poll_delay_ms,
        args.small
    );

    // 1. The ceiling.
    let limit = if args.skip_db_limit {
        figs.skip("db_limit_eps", "--skip-db-limit");
        None
    } else {
        let r = db_limit(bench, &setup, args).await?;
        figs.add(
            "db_limit_eps",
            f1(r.eps),
            format!(
                "bare SQL, 1 connection, batch {}: {:.2} s; claim {:.0} ms, mark {:.0} ms; {}",
                args.batch, r.secs, r.claim_ms, r.mark_ms, r.cpu
            ),
        );
        Some(r.eps)
    };

    // 2. Per-row (the seed's claiming) and batch.
    let per_row = if args.skip_per_row {
        figs.skip("per_row_eps", "--skip-per-row");
        None
    } else {
        let config = worker_config(
            ClaimStrategy::PerRow,
            args.per_row_batch,
            args.per_row_concurrency,
            poll,
            false,
        );
        let r = relay(bench, &setup, args, config, "per-row").await?;
        figs.add(
            "per_row_eps",
            f1(r.eps),
            format!(
                "{} workers, PerRow batch {}, concurrency {}, drain, poll {} ms: {:.2} s, {} rounds; {}",
                args.workers, args.per_row_batch, args.per_row_concurrency, args.poll_delay_ms, r.secs, r.total.rounds, r.cpu
            ),
        );
        figs.add(
            "duplicates_per_row",
            r.duplicates,
            "publications beyond the first per event id",
        );
        figs.add(
            "claim_lost_per_event_per_row",
            f3(r.total.claim_lost as f64 / args.events as f64),
            format!(
                "{} claims lost, {} won, {} errors",
                r.total.claim_lost, r.total.claimed, r.total.errors
            ),
        );
        Some(r)
    };
    let batch = if args.skip_batch {
        figs.skip("batch_eps", "--skip-batch");
        None
    } else {
        let config = worker_config(
            ClaimStrategy::Batch,
            args.batch,
            args.concurrency,
            poll,
            false,
        );
        let r = relay(bench, &setup, args, config, "batch").await?;
        figs.add(
            "batch_eps",
            f1(r.eps),
            format!(
                "{} workers, Batch {}, concurrency {}, drain, poll {} ms: {:.2} s, {} rounds; {}",
                args.workers,
                args.batch,
                args.concurrency,
                args.poll_delay_ms,
                r.secs,
                r.total.rounds,
                r.cpu
            ),
        );
        if let Some(p) = &r.claim_plan {
            figs.add(
                "batch_claim_ms",
                f3(p.median_ms),
                format!(
                    "library claim statement over the full backlog (rolled back), median of 20: {}, {} buffers",
                    p.plan,
                    p.buffers.unwrap_or(0)
                ),
            );
        }
        figs.add(
            "duplicates_batch",
            r.duplicates,
            "publications beyond the first per event id",
        );
        figs.add(
            "claim_lost_per_event_batch",
            f3(r.total.claim_lost as f64 / args.events as f64),
            format!(
                "{} claims lost, {} won, {} errors",
                r.total.claim_lost, r.total.claimed, r.total.errors
            ),
        );
        Some(r)
    };
    match (&batch, limit) {
        (Some(b), Some(l)) => figs.add(
            "relay_over_limit",
            f3(b.eps / l),
            "batch_eps / db_limit_eps",
        ),
        _ => figs.skip("relay_over_limit", "needs batch and db_limit"),
    }
    match (&batch, &per_row) {
        (Some(b), Some(p)) => figs.add(
            "batch_over_per_row",
            f1(b.eps / p.eps),
            "batch_eps / per_row_eps",
        ),
        _ => figs.skip("batch_over_per_row", "needs batch and per_row"),
    }
    let dups =
        per_row.as_ref().map_or(0, |r| r.duplicates) + batch.as_ref().map_or(0, |r| r.duplicates);
    figs.add("duplicates", dups, "both strategies");

    // 3. RocketMQ.
    // Not measured yet: `rocketmq_raw_eps` (the client alone sending the same messages with the
    // same concurrency) and `rocketmq_relay_eps` (the batch relay through RocketMqPublisher).
    let why = if std::env::var("ROCKETMQ_NAMESRV_ADDR").is_ok_and(|v| !v.is_empty()) {
        "no RocketMQ phase in the bench yet"
    } else {
        "ROCKETMQ_NAMESRV_ADDR unset"
    };
    figs.skip("rocketmq_raw_eps", why);
    figs.skip("rocketmq_relay_eps", why);

    // 4. Idle latency, polling only.
    let idle_poll = Duration::from_millis(args.idle_poll_ms);
    let polling = format!(
        "{} Batch workers polling every {} ms (no wake-on-commit)",
        args.workers, args.idle_poll_ms
    );
    let skip_idle = args.skip_idle.then_some("--skip-idle");
    idle_figures(
        &mut figs,
        bench,
        &setup,
        args,
        "idle_latency",
        idle_poll,
        false,
        &polling,
        skip_idle,
    )
    .await?;
    // Wake-on-commit (Postgres LISTEN/NOTIFY), with the poll delay at its 5 s default so that
    // only the wake-up can explain a latency below it.
    let waking = format!(
        "{} Batch workers with wake-on-commit, poll delay 5 s",
        args.workers
    );
    let skip_wake =
        skip_idle.or((backend != DbBackend::Postgres).then_some("wake-on-commit is Postgres only"));
    idle_figures(
        &mut figs,
        bench,
        &setup,
        args,
        "idle_latency_wake",
        sea_orm_outbox::config::DEFAULT_POLL_DELAY,
        true,
        &waking,
        skip_wake,
    )
    .await?;

    // Write throughput with and without the notify.
    if args.skip_write {
        figs.skip("write_eps", "--skip-write");
    } else {
        let plain = write_eps(bench, &setup, args, false).await?;
        let with = write_eps(bench, &setup, args, true).await?;
        figs.add(
            "write_eps",
            f1(with),
            format!(
                "{} events, {} concurrent one-event transactions through with_event{}",
                args.write_events,
                args.writers,
                if backend == DbBackend::Postgres {
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
    }

    // 5. with_event overhead.
    if args.skip_overhead {
        figs.skip("with_event_overhead_ms", "--skip-overhead");
    } else {
        let (d, p, w) = with_event_overhead(bench, &setup, args).await?;
        figs.add(
            "with_event_overhead_ms",
            f3(d),
            format!(
                "median of {} txns each: insert+commit {:.3} ms, insert+with_event+commit {:.3} ms",
                args.overhead_samples, p, w
            ),
        );
    }

    // 6. The idle poll over many delivered rows.
    if args.skip_poll_rows {
        figs.skip("idle_poll_rows_examined", "--skip-poll-rows");
    } else {
        reset(&setup).await?;
        let t = Instant::now();
        fill(&setup, args.poll_rows, "SUCCESS").await?;
        let fill_s = t.elapsed().as_secs_f64();
        let candidates = store::candidates_query(backend, args.per_row_batch).into_query();
        let scans = match backend {
            DbBackend::Postgres => {
                let claim = store::claim_batch_statement(backend, "bench-idle", args.batch);
                Some((
                    pg_explain(&setup, &candidates.to_string(PostgresQueryBuilder)).await?,
                    Some(pg_explain(&setup, &claim.to_string(PostgresQueryBuilder)).await?),
                ))
            }
            DbBackend::MySql => {
                let mut locking = store::candidates_query(backend, args.batch).into_query();
                locking.lock_with_behavior(
                    sea_orm::sea_query::LockType::Update,
                    sea_orm::sea_query::LockBehavior::SkipLocked,
                );
                Some((
                    mysql_scan(&setup, &candidates.to_string(MysqlQueryBuilder)).await?,
                    Some(mysql_scan(&setup, &locking.to_string(MysqlQueryBuilder)).await?),
                ))
            }
            _ => None,
        };
        match scans {
            Some((c, b)) => {
                let buf = |s: &ScanResult| {
                    s.buffers
                        .map_or(String::new(), |b| format!(", {b} buffers"))
                };
                figs.add(
                    "idle_poll_rows_examined",
                    c.rows_examined,
                    format!(
                        "per-row candidate SELECT over {} SUCCESS rows (bulk insert {:.1} s): {}{}, median {:.3} ms",
                        args.poll_rows, fill_s, c.plan, buf(&c), c.median_ms
                    ),
                );
                if let Some(b) = b {
                    figs.add(
                        "idle_poll_rows_examined_batch",
                        b.rows_examined,
                        format!(
                            "batch claim's scan: {}{}, median {:.3} ms",
                            b.plan,
                            buf(&b),
                            b.median_ms
                        ),
                    );
                }
            }
            None => figs.skip("idle_poll_rows_examined", "no row counters on SQLite"),
        }
    }

    // 7. Memory.
    match peak_rss_mib() {
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
    Ok(())
}
