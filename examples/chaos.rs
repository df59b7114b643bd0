//! Chaos harness: real `outbox relay` worker PROCESSES relay events to a real RocketMQ broker
//! while faults are injected under them; a real consumer counts what arrived.
//!
//! ```text
//! cargo build --release --bin outbox --example chaos
//! cargo run --release --example chaos -- --backend postgres --kill-every 2s
//! cargo run --release --example chaos -- --backend mysql --events 5000 --db-restart-at 10s
//! cargo run --release --example chaos -- --broker-down 10s..25s --slow-send
//! ```
//! Each run gets a fresh database (`outbox_chaos_<random>`, dropped at the end unless
//! something was lost or `--keep-db`) and a fresh topic. N events (default 20,000) are written
//! through `with_event`, one business transaction per order (an order row and its event),
//! spread evenly over `--write-over`. W worker processes (default 3) run
//! `outbox relay` with short leases and time-outs and a retry policy whose budget outlasts the
//! broker outage plus the client's 30 s circuit breaker. A lite-pull consumer records every
//! `eventId` received.
//!
//! Faults (combinable):
//! - `--kill-every 2s`: SIGKILL a random worker, start a new one in its place.
//! - `--db-restart-at 10s [--db-down-for 2s]`: stop the database server, start it again
//!   (Postgres: `pg_ctlcluster`, MariaDB: `mysqladmin shutdown` + `start-stop-daemon`). This
//!   restarts the machine's SHARED server: do not run it next to other tests.
//! - `--broker-down 10s..25s`: stop the broker (`scripts/rocketmq.sh stop-broker`) and start it
//!   again. Uses a private name server and broker (ports 29876/30911) so that other suites
//!   sharing the default broker are not disturbed.
//! - `--slow-send`: the first send of every `--slow-send-every`-th event stalls its worker for
//!   twice the lease after the broker accepted it (`OUTBOX_CHAOS_SEND_STALL`): the lease expires,
//!   another worker sends it again, the stalled worker's late acknowledgement is refused.
//!
//! The last line is the summary:
//! `summary: events=20000 success=20000 fail=0 lost=0 duplicates=37 kills=9 reclaimed=41 elapsed_s=58`
//! - lost: written but never received by the consumer and not `FAIL`;
//! - duplicates: receptions beyond the first per `eventId`;
//! - reclaimed: expired leases taken back by the workers' reclaim passes (from their logs);
//! - with `--dead-retry`, ` dead_retried=K` is appended: K dead letters were sent again by
//!   `outbox dead retry --all` once the faults were over.
//!
//! Exits 1 when lost > 0 (the database is then kept for inspection), 2 on a harness error.
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectOptions, ConnectionTrait, Database,
    DatabaseConnection, EntityTrait, NotSet, PaginatorTrait, QueryFilter, QuerySelect, Schema,
    TransactionTrait,
};
use sea_orm_outbox::event_record::{Column, Entity as Events};
use sea_orm_outbox::publisher::RocketMqConsumer;
use sea_orm_outbox::{Migrator, MigratorTrait, NewEvent, OutboxExt, RetryPolicy};

/// The harness's business table: one order per transaction, written with its event.
mod order {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "chaos_orders")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        #[sea_orm(unique)]
        pub order_no: String,
        pub amount_cents: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BackendArg {
    Postgres,
    #[value(alias = "mariadb")]
    Mysql,
}

#[derive(Parser, Debug)]
#[command(about = "Relay events with worker processes under injected faults and count them")]
struct Args {
    /// Events to write (one business transaction each).
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Worker processes (`outbox relay`).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Database server.
    #[arg(long, value_enum, default_value = "postgres")]
    backend: BackendArg,
    /// Admin URL of the server (a fresh database is created next to it) [default:
    /// OUTBOX_TEST_POSTGRES_URL / OUTBOX_TEST_MYSQL_URL or the local servers].
    #[arg(long)]
    admin_url: Option<String>,
    /// Spread the writes over this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    write_over: Duration,
    /// Concurrent writer tasks.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// SIGKILL a random worker this often and start a new one.
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_every: Option<Duration>,
    /// Restart the database server this long after the start.
    #[arg(long, value_parser = humantime::parse_duration)]
    db_restart_at: Option<Duration>,
    /// How long the database server stays down in a restart.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    db_down_for: Duration,
    /// Broker outage window `FROM..TO` after the start, e.g. `10s..25s` (private broker).
    #[arg(long, value_parser = parse_window)]
    broker_down: Option<(Duration, Duration)>,
    /// Some first sends stall their worker for twice the lease (see the module docs).
    #[arg(long)]
    slow_send: bool,
    /// With `--slow-send`: every N-th event id stalls.
    #[arg(long, default_value_t = 500)]
    slow_send_every: i64,
    /// The `outbox` binary [default: next to this example's executable].
    #[arg(long)]
    relay_bin: Option<PathBuf>,
    /// Use a private name server and broker even without `--broker-down`.
    #[arg(long)]
    private_broker: bool,
    /// Name server of the shared broker (without a private one).
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR", default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Workers' lease.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    lease: Duration,
    /// Workers' send timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    send_timeout: Duration,
    /// Workers' reclaim interval.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    reclaim_interval: Duration,
    /// Workers' poll delay.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    poll_delay: Duration,
    /// Workers' batch size.
    #[arg(long, default_value_t = 20)]
    batch: u64,
    /// Workers' back-off unit (n-th failure waits n² × this, at most --retry-max-backoff).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    retry_backoff: Duration,
    /// Workers' longest back-off.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    retry_max_backoff: Duration,
    /// Workers' retry limit [default: scaled so that the retry budget outlasts the broker
    /// outage + 30 s circuit breaker + 30 s margin, and at least 10].
    #[arg(long)]
    max_retries: Option<u32>,
    /// Once the faults are over and the outbox is drained, send the dead letters again with
    /// `outbox dead retry --all` and wait until they are delivered.
    #[arg(long)]
    dead_retry: bool,
    /// Give up waiting for the outbox to drain this long after the writes and faults ended.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "180s")]
    drain_timeout: Duration,
    /// Keep the database at the end.
    #[arg(long)]
    keep_db: bool,
}

fn parse_window(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| "expected FROM..TO, e.g. 10s..25s".to_owned())?;
    let a = humantime::parse_duration(a.trim()).map_err(|e| e.to_string())?;
    let b = humantime::parse_duration(b.trim()).map_err(|e| e.to_string())?;
    if b <= a {
        return Err("TO must be after FROM".into());
    }
    Ok((a, b))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn log(msg: impl AsRef<str>) {
    eprintln!("chaos: {}", msg.as_ref());
}

/// Private RocketMQ ports (the outage test uses 19876/20911; the shared one 9876/10911).
const PRIVATE_NAMESRV_PORT: u16 = 29876;
const PRIVATE_BROKER_PORT: u16 = 30911;
const PRIVATE_HEALTH_PORT: u16 = 30990;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/rocketmq.sh")
}

/// A name server + broker owned by this run, stopped and removed on drop.
struct PrivateBroker {
    state_dir: PathBuf,
}

impl PrivateBroker {
    fn script(state_dir: &Path, cmd: &str) -> bool {
        Command::new("bash")
            .arg(script())
            .arg(cmd)
            .env("ROCKETMQ_STATE_DIR", state_dir)
            .env("ROCKETMQ_NAMESRV_PORT", PRIVATE_NAMESRV_PORT.to_string())
            .env("ROCKETMQ_BROKER_PORT", PRIVATE_BROKER_PORT.to_string())
            .env("ROCKETMQ_HEALTH_PORT", PRIVATE_HEALTH_PORT.to_string())
            .env("ROCKETMQ_BROKER_NAME", "outbox-chaos-broker")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn start(state_dir: PathBuf) -> Result<Self, BoxError> {
        // Never adopt a leftover instance (its state directory is not ours to stop).
        for port in [PRIVATE_NAMESRV_PORT, PRIVATE_BROKER_PORT] {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Err(format!(
                    "port {port} is in use: a leftover private RocketMQ from an earlier chaos run? \
                     (stop it: ss -ltnp | grep {port})"
                )
                .into());
            }
        }
        if !Self::script(&state_dir, "start") {
            return Err(format!(
                "private RocketMQ did not start (logs in {})",
                state_dir.display()
            )
            .into());
        }
        Ok(PrivateBroker { state_dir })
    }

    fn addr() -> String {
        format!("127.0.0.1:{PRIVATE_NAMESRV_PORT}")
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        Self::script(&self.state_dir, "stop");
    }
}

/// `url` with its database (path) replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let cut = base.rfind('/').map_or(base.len(), |i| i);
    let mut out = format!("{}/{}", &base[..cut], db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

async fn connect(url: &str, max: u32) -> Result<DatabaseConnection, sea_orm::DbErr> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    Database::connect(opt).await
}

/// The smallest retry limit whose total back-off reaches `budget`.
fn retries_for(policy: &RetryPolicy, budget: Duration) -> u32 {
    let mut sum = Duration::ZERO;
    let mut n = 0;
    while sum < budget {
        n += 1;
        sum += policy.backoff(n);
    }
    n
}

/// Start/stop of the database server.
#[derive(Clone, Copy)]
enum Server {
    Postgres,
    MariaDb,
}

impl Server {
    fn run(cmd: &mut Command) -> bool {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn up(self) -> bool {
        match self {
            Server::Postgres => Self::run(Command::new("pg_isready").args(["-h", "127.0.0.1"])),
            Server::MariaDb => {
                Self::run(Command::new("mysqladmin").args(["-h127.0.0.1", "-uroot", "ping"]))
            }
        }
    }

    fn pg_version() -> String {
        std::fs::read_dir("/etc/postgresql")
            .ok()
            .and_then(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .max()
            })
            .unwrap_or_else(|| "15".to_owned())
    }

    fn stop(self) -> bool {
        match self {
            Server::Postgres => Self::run(Command::new("pg_ctlcluster").args([
                "--skip-systemctl-redirect",
                &Self::pg_version(),
                "main",
                "stop",
                "-m",
                "fast",
            ])),
            Server::MariaDb => {
                Self::run(Command::new("mysqladmin").args(["-h127.0.0.1", "-uroot", "shutdown"]))
            }
        }
    }

    fn start(self) -> bool {
        match self {
            Server::Postgres => Self::run(Command::new("pg_ctlcluster").args([
                "--skip-systemctl-redirect",
                &Self::pg_version(),
                "main",
                "start",
            ])),
            Server::MariaDb => Self::run(Command::new("start-stop-daemon").args([
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ])),
        }
    }

    /// Stops the server, waits `down_for`, starts it and waits until it answers (60 s).
    fn restart(self, down_for: Duration) -> bool {
        let stopped = self.stop();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.up() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        log(format!("database server stopped (ok={stopped})"));
        std::thread::sleep(down_for);
        self.ensure_up()
    }

    fn ensure_up(self) -> bool {
        if self.up() {
            return true;
        }
        self.start();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.up() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}

/// One worker process.
struct Proc {
    child: Child,
    id: String,
}

/// Starts, kills and replaces the worker processes.
struct Fleet {
    bin: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log_dir: PathBuf,
    procs: Vec<Option<Proc>>,
    spawned: u64,
    kills: u64,
    unexpected_exits: u64,
}

impl Fleet {
    fn spawn(&mut self, slot: usize) -> Result<(), BoxError> {
        self.spawned += 1;
        let id = format!("chaos-w{slot}-g{}", self.spawned);
        let log = std::fs::File::create(self.log_dir.join(format!("{id}.log")))?;
        let child = Command::new(&self.bin)
            .arg("relay")
            .args(&self.args)
            .args(["--instance-id", &id])
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.procs[slot] = Some(Proc { child, id });
        Ok(())
    }

    /// Restarts workers that exited by themselves (they should not).
    fn reap(&mut self) -> Result<(), BoxError> {
        for slot in 0..self.procs.len() {
            let exited = match self.procs[slot].as_mut() {
                Some(p) => p.child.try_wait()?.map(|s| (p.id.clone(), s)),
                None => None,
            };
            if let Some((id, status)) = exited {
                self.unexpected_exits += 1;
                let last = std::fs::read_to_string(self.log_dir.join(format!("{id}.log")))
                    .ok()
                    .and_then(|t| t.lines().last().map(str::to_owned))
                    .unwrap_or_default();
                log(format!(
                    "worker {id} exited by itself ({status}): {last}; starting another"
                ));
                self.spawn(slot)?;
            }
        }
        Ok(())
    }

    fn kill_one(&mut self, slot: usize) -> Result<(), BoxError> {
        if let Some(mut p) = self.procs[slot].take() {
            p.child.kill().ok(); // SIGKILL
            p.child.wait().ok();
            self.kills += 1;
        }
        self.spawn(slot)
    }

    /// SIGTERM to every worker (graceful: leases handed back, producer shut down), SIGKILL after
    /// 20 s.
    fn stop_all(&mut self) {
        for p in self.procs.iter().flatten() {
            Command::new("kill")
                .args(["-TERM", &p.child.id().to_string()])
                .status()
                .ok();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for slot in 0..self.procs.len() {
            if let Some(mut p) = self.procs[slot].take() {
                loop {
                    match p.child.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if Instant::now() > deadline => {
                            log(format!("worker {} ignored SIGTERM; SIGKILL", p.id));
                            p.child.kill().ok();
                            p.child.wait().ok();
                            break;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            p.child.kill().ok();
            p.child.wait().ok();
        }
    }
}

/// Sums `key=N` over the log lines containing `marker` in every worker log.
fn sum_from_logs(dir: &Path, marker: &str, key: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let prefix = format!("{key}=");
    let mut total = 0;
    for e in entries.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains(marker)) {
            if let Some(n) = line
                .split_whitespace()
                .find_map(|t| t.strip_prefix(&prefix))
                .and_then(|v| v.trim_end_matches(',').parse::<u64>().ok())
            {
                total += n;
            }
        }
    }
    total
}

/// The worker-log lines that contain `needle`, each prefixed with its file name.
fn grep_logs(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        out.extend(
            text.lines()
                .filter(|l| l.contains(needle))
                .map(|l| format!("{name}: {l}")),
        );
    }
    out
}

fn count_in_logs(dir: &Path, marker: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|t| t.lines().filter(|l| l.contains(marker)).count() as u64)
        .sum()
}

/// Small xorshift for picking the worker to kill.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Writes event `i` (an order and its event in one transaction). Retries across database
/// outages; a commit whose answer was lost is detected through the order's unique number.
async fn write_one(db: &DatabaseConnection, i: usize, errors: &AtomicU64) {
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
                &o.order_no,
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

/// `(id, status)` of every event row.
async fn rows(db: &DatabaseConnection) -> Result<Vec<(i64, String)>, sea_orm::DbErr> {
    Events::find()
        .select_only()
        .column(Column::Id)
        .column(Column::Status)
        .into_tuple()
        .all(db)
        .await
}

#[derive(Default)]
struct Received {
    per_event: HashMap<i64, u32>,
    /// Where each reception came from: (queue id, queue offset, commit-log offset).
    places: HashMap<i64, Vec<(i32, i64, i64)>>,
    total: u64,
    without_id: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(e) => {
            log(format!("error: {e}"));
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<u64, BoxError> {
    let started = Instant::now();
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let work_dir = std::env::temp_dir().join(format!("outbox-chaos-{run_id}"));
    let log_dir = work_dir.join("workers");
    std::fs::create_dir_all(&log_dir)?;

    let relay_bin = match &args.relay_bin {
        Some(p) => p.clone(),
        None => {
            // target/<profile>/examples/chaos -> target/<profile>/outbox
            let exe = std::env::current_exe()?;
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("outbox"))
                .ok_or("cannot locate the outbox binary; pass --relay-bin")?
        }
    };
    if !relay_bin.is_file() {
        return Err(format!(
            "{} not found: build it first (`cargo build --release --bin outbox`) or pass --relay-bin",
            relay_bin.display()
        )
        .into());
    }

    // Broker: private when it is going to be stopped.
    let private = if args.broker_down.is_some() || args.private_broker {
        log("starting a private RocketMQ name server and broker");
        Some(PrivateBroker::start(work_dir.join("rocketmq"))?)
    } else {
        None
    };
    let namesrv = match &private {
        Some(_) => PrivateBroker::addr(),
        None => args.namesrv.clone(),
    };

    // A fresh database.
    let (server, admin) = match args.backend {
        BackendArg::Postgres => (
            Server::Postgres,
            args.admin_url.clone().unwrap_or_else(|| {
                std::env::var("OUTBOX_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
            }),
        ),
        BackendArg::Mysql => (
            Server::MariaDb,
            args.admin_url.clone().unwrap_or_else(|| {
                std::env::var("OUTBOX_TEST_MYSQL_URL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
            }),
        ),
    };
    let db_name = format!("outbox_chaos_{run_id}");
    {
        let conn = connect(&admin, 1).await?;
        conn.execute_unprepared(&format!("CREATE DATABASE {db_name}"))
            .await?;
        conn.close().await.ok();
    }
    let url = with_database(&admin, &db_name);
    let db = connect(&url, (args.writers + 4) as u32).await?;
    Migrator::up(&db, None).await?;
    let schema = Schema::new(db.get_database_backend());
    db.execute(&schema.create_table_from_entity(order::Entity))
        .await?;
    let backend = db.get_database_backend();

    // Retry policy scaled to the run.
    let mut policy = RetryPolicy::new(3, args.retry_backoff, args.retry_max_backoff);
    policy.max_retries = args.max_retries.unwrap_or_else(|| {
        let outage = args.broker_down.map_or(Duration::ZERO, |(a, b)| b - a);
        retries_for(&policy, outage + Duration::from_secs(60)).max(10)
    });
    let budget: Duration = (1..=policy.max_retries).map(|n| policy.backoff(n)).sum();

    // The consumer first, so the topic exists before the workers send.
    let topic = format!("CHAOS_{run_id}");
    let consumer = RocketMqConsumer::start(&namesrv, &format!("chaos_cg_{run_id}"), &topic).await?;
    let received = Arc::new(Mutex::new(Received::default()));
    let stop_consumer = Arc::new(AtomicBool::new(false));
    let consumer_task = tokio::spawn({
        let received = received.clone();
        let stop = stop_consumer.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                let batch = consumer.poll(Duration::from_millis(500)).await;
                let mut r = received.lock().unwrap_or_else(|p| p.into_inner());
                for m in batch {
                    r.total += 1;
                    match m.event_id {
                        Some(id) => {
                            *r.per_event.entry(id).or_default() += 1;
                            r.places.entry(id).or_default().push((
                                m.queue_id,
                                m.queue_offset,
                                m.commit_log_offset,
                            ));
                        }
                        None => r.without_id += 1,
                    }
                }
            }
            consumer.shutdown().await;
        }
    });

    // The workers.
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let mut worker_args = vec![
        "--poll-delay".to_owned(),
        ms(args.poll_delay),
        "--batch".to_owned(),
        args.batch.to_string(),
        "--lease".to_owned(),
        ms(args.lease),
        "--send-timeout".to_owned(),
        ms(args.send_timeout),
        "--reclaim-interval".to_owned(),
        ms(args.reclaim_interval),
        "--max-retries".to_owned(),
        policy.max_retries.to_string(),
        "--retry-backoff".to_owned(),
        ms(policy.backoff_base),
        "--retry-max-backoff".to_owned(),
        ms(policy.max_backoff),
    ];
    if args.slow_send {
        worker_args.push("--chaos-send-stall".to_owned());
        worker_args.push(format!("{}:{}", args.slow_send_every, ms(args.lease * 2)));
    }
    let mut fleet = Fleet {
        bin: relay_bin.clone(),
        args: worker_args,
        envs: vec![
            ("DATABASE_URL".into(), url.clone()),
            ("ROCKETMQ_NAMESRV_ADDR".into(), namesrv.clone()),
            ("OUTBOX_TOPIC".into(), topic.clone()),
            (
                "ROCKETMQ_PRODUCER_GROUP".into(),
                format!("chaos_pg_{run_id}"),
            ),
            (
                "RUST_LOG".into(),
                "warn,outbox=info,sea_orm_outbox::publisher::rocketmq=debug".into(),
            ),
        ],
        log_dir: log_dir.clone(),
        procs: (0..args.workers).map(|_| None).collect(),
        spawned: 0,
        kills: 0,
        unexpected_exits: 0,
    };
    for slot in 0..args.workers {
        fleet.spawn(slot)?;
    }
    log(format!(
        "run {run_id}: {:?} database {db_name}, topic {topic} on {namesrv}, {} events over {:?}, \
         {} workers (lease {:?}, send timeout {:?}, batch {}, max_retries {} = {:.0} s of back-off), \
         logs in {}",
        backend,
        args.events,
        args.write_over,
        args.workers,
        args.lease,
        args.send_timeout,
        args.batch,
        policy.max_retries,
        budget.as_secs_f64(),
        work_dir.display()
    ));

    // The writers.
    let write_errors = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    let writer_count = args.writers.max(1);
    for w in 0..writer_count {
        let db = db.clone();
        let errors = write_errors.clone();
        let (n, over) = (args.events, args.write_over);
        writers.push(tokio::spawn(async move {
            for i in (w..n).step_by(writer_count) {
                let due = started + over.mul_f64(i as f64 / n.max(1) as f64);
                tokio::time::sleep_until(due.into()).await;
                write_one(&db, i, &errors).await;
            }
        }));
    }
    let writes_done = {
        let writers = std::mem::take(&mut writers);
        tokio::spawn(async move {
            for w in writers {
                w.await.ok();
            }
        })
    };

    // Faults.
    let mut faults = Vec::new();
    if let Some(at) = args.db_restart_at {
        let down_for = args.db_down_for;
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until((started + at).into()).await;
            log(format!("restarting the database server at {at:?}"));
            let ok = tokio::task::spawn_blocking(move || server.restart(down_for))
                .await
                .unwrap_or(false);
            log(format!(
                "database server back (ok={ok}) at {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }));
    }
    if let (Some((from, to)), Some(p)) = (args.broker_down, &private) {
        let dir = p.state_dir.clone();
        faults.push(tokio::spawn(async move {
            tokio::time::sleep_until((started + from).into()).await;
            log(format!("stopping the broker at {from:?}"));
            let d = dir.clone();
            tokio::task::spawn_blocking(move || PrivateBroker::script(&d, "stop-broker"))
                .await
                .ok();
            tokio::time::sleep_until((started + to).into()).await;
            log(format!("starting the broker at {to:?}"));
            let ok = tokio::task::spawn_blocking(move || PrivateBroker::script(&dir, "start"))
                .await
                .unwrap_or(false);
            log(format!(
                "broker back (ok={ok}) at {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }));
    }
    let faults_done = tokio::spawn(async move {
        for f in faults {
            f.await.ok();
        }
    });

    // Supervise until everything written is settled and received (or the drain deadline).
    let mut rng = Rng(u64::from(std::process::id())
        ^ started.elapsed().as_nanos() as u64
        ^ 0x9E37_79B9_7F4A_7C15);
    let mut next_kill = args.kill_every.map(|d| started + d);
    let mut quiet_since: Option<Instant> = None;
    let mut next_check = Instant::now();
    let mut dead_retried: Option<u64> = None;
    let mut dead_retry_runs = 0;
    let mut drained = false;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fleet.reap()?;
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_kill, args.kill_every) {
            if now >= at {
                let slot = rng.next(args.workers);
                fleet.kill_one(slot)?;
                next_kill = Some(at + every);
            }
        }
        if !(writes_done.is_finished() && faults_done.is_finished()) {
            continue;
        }
        let quiet = *quiet_since.get_or_insert(now);
        if now.duration_since(quiet) > args.drain_timeout {
            log("the outbox did not drain in time");
            break;
        }
        if now < next_check {
            continue;
        }
        next_check = now + Duration::from_millis(500);
        let Ok(all) = rows(&db).await else { continue };
        let unsettled = all
            .iter()
            .filter(|(_, s)| s != "SUCCESS" && s != "FAIL")
            .count();
        if all.len() < args.events || unsettled > 0 {
            continue;
        }
        let fails = all.iter().filter(|(_, s)| s == "FAIL").count() as u64;
        // The dead letters go back once the client's 30 s circuit breaker has surely closed
        // again (a producer that saw the broker die refuses it for up to 30 s after its return).
        if args.dead_retry && fails > 0 && dead_retry_runs < 3 {
            if now.duration_since(quiet) < Duration::from_secs(35) {
                continue;
            }
            dead_retry_runs += 1;
            log(format!(
                "{fails} dead letters after the faults: `outbox dead retry --all`"
            ));
            let out = Command::new(&relay_bin)
                .args(["dead", "retry", "--all"])
                .env("DATABASE_URL", &url)
                .output()?;
            log(format!(
                "outbox dead retry --all: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            dead_retried = Some(dead_retried.unwrap_or(0) + fails);
            continue;
        }
        let r = received.lock().unwrap_or_else(|p| p.into_inner());
        let missing = all
            .iter()
            .filter(|(id, s)| s == "SUCCESS" && !r.per_event.contains_key(id))
            .count();
        if missing == 0 {
            drained = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    // Late duplicates, then a graceful stop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.stop_all();
    stop_consumer.store(true, Ordering::Relaxed);
    consumer_task.await.ok();
    writes_done.abort();
    faults_done.abort();
    // Whatever happened, leave the database server running.
    if args.db_restart_at.is_some()
        && !tokio::task::spawn_blocking(move || server.ensure_up()).await?
    {
        log("WARNING: the database server is not answering; start it by hand");
    }

    let all = rows(&db).await?;
    let r = std::mem::take(&mut *received.lock().unwrap_or_else(|p| p.into_inner()));
    let success = all.iter().filter(|(_, s)| s == "SUCCESS").count();
    let fail = all.iter().filter(|(_, s)| s == "FAIL").count();
    let other = all.len() - success - fail;
    let lost_ids: Vec<i64> = all
        .iter()
        .filter(|(id, s)| s != "FAIL" && !r.per_event.contains_key(id))
        .map(|(id, _)| *id)
        .collect();
    let distinct = r.per_event.len() as u64;
    let duplicates = r.per_event.values().map(|n| u64::from(n - 1)).sum::<u64>();
    let written: std::collections::HashSet<i64> = all.iter().map(|(id, _)| *id).collect();
    let foreign = r
        .per_event
        .keys()
        .filter(|id| !written.contains(id))
        .count();
    let reclaimed = sum_from_logs(&log_dir, "reclaimed events whose sender", "reclaimed");
    let late_acks = count_in_logs(&log_dir, "late ack");
    let retried = count_in_logs(&log_dir, "send failed; will retry");
    let db_errors = count_in_logs(&log_dir, "outbox round failed")
        + count_in_logs(&log_dir, "outbox reclaim failed");
    let max_retry: Option<i32> = Events::find()
        .select_only()
        .column_as(Column::RetryCount.max(), "m")
        .into_tuple()
        .one(&db)
        .await
        .ok()
        .flatten()
        .flatten();
    log(format!(
        "drained={drained} rows={} other_status={other} received={} distinct={distinct} \
         without_event_id={} foreign={foreign} write_retries={} workers_started={} \
         unexpected_exits={} late_acks={late_acks} send_retries={retried} db_errors_logged={db_errors} \
         max_retry_count={}",
        all.len(),
        r.total,
        r.without_id,
        write_errors.load(Ordering::Relaxed),
        fleet.spawned,
        fleet.unexpected_exits,
        max_retry.unwrap_or(0),
    ));
    println!(
        "workers: started={} killed={} unexpected_exits={} duplicate_bound={} (kills x batch)",
        fleet.spawned,
        fleet.kills,
        fleet.unexpected_exits,
        fleet.kills * args.batch
    );
    if !lost_ids.is_empty() {
        log(format!(
            "LOST {} events, e.g. {:?}; database {db_name} kept, worker logs in {}",
            lost_ids.len(),
            &lost_ids[..lost_ids.len().min(10)],
            log_dir.display()
        ));
    }
    if !lost_ids.is_empty() {
        // Where did the broker say it stored the lost events, and where did the duplicates
        // come from? (The relays log every SEND_OK with its queue and offset at DEBUG.)
        for id in lost_ids.iter().take(10) {
            for line in grep_logs(&log_dir, &format!("RocketMQ send ok event_id={id} ")) {
                log(format!("lost event {id}: {line}"));
            }
        }
        for (id, places) in r.places.iter().filter(|(_, p)| p.len() > 1).take(10) {
            log(format!(
                "event {id} received {} times at (queue, queue offset, commit-log offset) {places:?}",
                places.len()
            ));
            for line in grep_logs(&log_dir, &format!("RocketMQ send ok event_id={id} ")) {
                log(format!("duplicated event {id}: {line}"));
            }
        }
    }
    if !lost_ids.is_empty() {
        // Lost by the broker, or missed by the consumer? Read the whole topic again from its
        // first offset in a fresh consumer group.
        match RocketMqConsumer::start(&namesrv, &format!("chaos_reread_{run_id}"), &topic).await {
            Ok(again) => {
                let wanted: std::collections::HashSet<i64> = lost_ids.iter().copied().collect();
                let got = again
                    .collect_until(Duration::from_secs(60), |got| {
                        let ids: std::collections::HashSet<i64> =
                            got.iter().filter_map(|m| m.event_id).collect();
                        wanted.is_subset(&ids)
                    })
                    .await;
                let ids: std::collections::HashSet<i64> =
                    got.iter().filter_map(|m| m.event_id).collect();
                let in_broker = lost_ids.iter().filter(|id| ids.contains(id)).count();
                log(format!(
                    "re-read of the topic by a fresh consumer group: {} messages; {in_broker} of the {} lost events ARE in the broker (missed by the first consumer), {} are not",
                    got.len(),
                    lost_ids.len(),
                    lost_ids.len() - in_broker
                ));
                again.shutdown().await;
            }
            Err(e) => log(format!("re-read consumer did not start: {e}")),
        }
    }
    let lost = lost_ids.len() as u64;
    let keep = args.keep_db || lost > 0 || !drained;
    db.close().await.ok();
    // Stop the private broker while its state (pid files) is still there.
    drop(private);
    if !keep {
        if let Ok(conn) = connect(&admin, 1).await {
            conn.execute_unprepared(&format!("DROP DATABASE {db_name}"))
                .await
                .ok();
            conn.close().await.ok();
        }
        std::fs::remove_dir_all(&work_dir).ok();
    }
    let mut line = format!(
        "summary: events={} success={success} fail={fail} lost={lost} duplicates={duplicates} kills={} reclaimed={reclaimed} elapsed_s={}",
        all.len(),
        fleet.kills,
        elapsed.as_secs()
    );
    if args.dead_retry {
        line.push_str(&format!(" dead_retried={}", dead_retried.unwrap_or(0)));
    }
    println!("{line}");
    std::io::stdout().flush().ok();
    Ok(lost)
}
