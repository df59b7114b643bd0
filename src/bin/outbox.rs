//! `outbox`: the operator's tool for sea-orm-outbox.
//!
//! ```text
//! outbox migrate up|down|status          apply / roll back / list the migrations
//! outbox stats [--lease 10m] [--json]    rows per status, oldest WAIT age, stuck leases
//! outbox dead list [--limit N] [--json]  the dead letters (FAIL rows)
//! outbox dead retry <id> | --all         FAIL -> WAIT, retry_count 0, due now
//! outbox dead discard <id>               delete one dead letter
//! outbox purge --older-than 7d [--batch 1000]   delete delivered (SUCCESS) rows only
//! outbox relay [flags]                   run a relay worker until Ctrl-C / SIGTERM
//! ```
//! The database comes from `--database-url` or `DATABASE_URL`. Its password is never printed:
//! every URL and every error goes through `sea_orm_outbox::redact`.
//!
//! Exit status: 0 success; 1 error (including "not a dead letter"); 2 usage error; 3 the outbox
//! table is missing (run `outbox migrate up`).
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};
use sea_orm_outbox::migration::MigrationStatus;
use sea_orm_outbox::ops::{self, DeadLetterOutcome};
use sea_orm_outbox::redact::{redact_secrets, redact_url};
use sea_orm_outbox::{
    CancellationToken, LoggingPublisher, Migrator, MigratorTrait, OutboxError, OutboxMessage,
    PublishError, Publisher, Worker, WorkerConfig,
};

#[derive(Parser, Debug)]
#[command(
    name = "outbox",
    version,
    about = "Operate a sea-orm-outbox table: migrations, backlog, dead letters, retention, relay"
)]
struct Cli {
    /// Database URL (postgres://, mysql://, sqlite://). Never printed with its password.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Apply, roll back or list the outbox migrations.
    Migrate {
        #[command(subcommand)]
        action: MigrateAction,
    },
    /// Rows per status, age of the oldest waiting event, leases older than the lease.
    Stats {
        /// The workers' lease: SENDING rows claimed longer ago than this are counted as stuck.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        lease: Duration,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters (FAIL rows): list, retry, discard.
    Dead {
        #[command(subcommand)]
        action: DeadAction,
    },
    /// Delete delivered (SUCCESS) events older than a duration, in batches. WAIT, SENDING and
    /// FAIL rows are never touched.
    Purge {
        /// Age of the last update beyond which a delivered event is deleted, e.g. 30s, 15m, 7d.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Rows deleted per transaction.
        #[arg(long, default_value_t = 1000)]
        batch: u64,
    },
    /// Run a relay worker until Ctrl-C or SIGTERM. It publishes to RocketMQ when a name server
    /// is given (`--rocketmq-namesrv` or `ROCKETMQ_NAMESRV_ADDR`), else through the logging
    /// publisher.
    Relay(Box<RelayArgs>),
}

#[derive(Subcommand, Debug)]
enum MigrateAction {
    /// Apply the pending migrations (all, or the first N).
    Up {
        /// Number of pending migrations to apply.
        #[arg(short, long)]
        num: Option<u32>,
    },
    /// Roll back the last N applied migrations (default 1).
    Down {
        /// Number of applied migrations to roll back.
        #[arg(short, long, default_value_t = 1)]
        num: u32,
    },
    /// List the migrations, applied or pending.
    Status,
}

#[derive(Subcommand, Debug)]
enum DeadAction {
    /// List the dead letters, oldest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Send a dead letter again (FAIL -> WAIT, retry_count 0, due now).
    Retry {
        /// The event id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<i64>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Delete a dead letter for good.
    Discard {
        /// The event id.
        id: i64,
    },
}

/// Relay settings; each unset one takes the library's default (`WorkerConfig::default()`).
#[derive(Args, Debug)]
struct RelayArgs {
    /// Wait after each round [default: 5s].
    #[arg(long, env = "OUTBOX_POLL_DELAY", value_parser = humantime::parse_duration)]
    poll_delay: Option<Duration>,
    /// Candidates per round [default: 20].
    #[arg(long, env = "OUTBOX_BATCH")]
    batch: Option<u64>,
    /// Lease of a claimed event [default: 10m].
    #[arg(long, env = "OUTBOX_LEASE", value_parser = humantime::parse_duration)]
    lease: Option<Duration>,
    /// Longest a single send may take [default: 3s]; at most a third of the lease when lease
    /// renewal is off.
    #[arg(long, env = "OUTBOX_SEND_TIMEOUT", value_parser = humantime::parse_duration)]
    send_timeout: Option<Duration>,
    /// Renew leases every lease/3 while sends are in flight [default: true].
    #[arg(long, env = "OUTBOX_LEASE_RENEWAL")]
    lease_renewal: Option<bool>,
    /// How rounds claim: batch (one statement, SKIP LOCKED) or per-row (the seed's)
    /// [default: batch].
    #[arg(long, env = "OUTBOX_CLAIM_STRATEGY", value_enum)]
    claim_strategy: Option<Strategy>,
    /// Sends of one round in flight at once [default: 1].
    #[arg(long, env = "OUTBOX_SEND_CONCURRENCY")]
    send_concurrency: Option<usize>,
    /// Interval between reclaim passes [default: 60s].
    #[arg(long, env = "OUTBOX_RECLAIM_INTERVAL", value_parser = humantime::parse_duration)]
    reclaim_interval: Option<Duration>,
    /// Failed sends retried before an event becomes a dead letter [default: 3].
    #[arg(long, env = "OUTBOX_MAX_RETRIES")]
    max_retries: Option<u32>,
    /// Instance id written into claim_owner [default: <service-name>-<pid>-<random>].
    #[arg(long, env = "OUTBOX_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Service name used in a generated instance id [default: outbox].
    #[arg(long, env = "OUTBOX_SERVICE_NAME")]
    service_name: Option<String>,
    /// Back-off unit: the n-th failed attempt waits n² × this [default: 5s].
    #[arg(long, env = "OUTBOX_RETRY_BACKOFF", value_parser = humantime::parse_duration)]
    retry_backoff: Option<Duration>,
    /// Longest single back-off [default: 1h].
    #[arg(long, env = "OUTBOX_RETRY_MAX_BACKOFF", value_parser = humantime::parse_duration)]
    retry_max_backoff: Option<Duration>,
    /// RocketMQ name server(s), `host:port[;host:port]`: publish to RocketMQ instead of the log.
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR")]
    rocketmq_namesrv: Option<String>,
    /// RocketMQ topic [default: ORDER_EVENT_TOPIC].
    #[arg(long, env = "OUTBOX_TOPIC")]
    topic: Option<String>,
    /// RocketMQ producer group [default: outbox_producer_group].
    #[arg(long, env = "ROCKETMQ_PRODUCER_GROUP")]
    producer_group: Option<String>,
    /// Fault injection for chaos tests, `N:DURATION`: after the broker accepted the FIRST
    /// attempt of an event whose id is a multiple of N, the sending thread stalls (blocks) for
    /// DURATION before the outcome is recorded, as a process frozen mid-send would. With a
    /// DURATION longer than the lease the event is reclaimed and sent again (a duplicate) and
    /// the stalled sender's late acknowledgement is refused. Never use it in production.
    #[arg(long, env = "OUTBOX_CHAOS_SEND_STALL", hide = true, value_parser = parse_stall)]
    chaos_send_stall: Option<(i64, Duration)>,
}

/// `N:DURATION` for `--chaos-send-stall`.
fn parse_stall(s: &str) -> Result<(i64, Duration), String> {
    let (n, d) = s
        .split_once(':')
        .ok_or_else(|| "expected N:DURATION, e.g. 500:6s".to_owned())?;
    let n: i64 = n.trim().parse().map_err(|e| format!("N: {e}"))?;
    if n < 1 {
        return Err("N must be at least 1".into());
    }
    let d = humantime::parse_duration(d.trim()).map_err(|e| format!("DURATION: {e}"))?;
    Ok((n, d))
}

/// `--claim-strategy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Strategy {
    /// One conditional UPDATE per candidate.
    PerRow,
    /// One statement claims the whole batch.
    Batch,
}

impl RelayArgs {
    fn config(&self) -> WorkerConfig {
        let mut c = WorkerConfig::default();
        if let Some(on) = self.lease_renewal {
            c = c.lease_renewal(on);
        }
        if let Some(s) = self.claim_strategy {
            c = c.claim_strategy(match s {
                Strategy::PerRow => sea_orm_outbox::ClaimStrategy::PerRow,
                Strategy::Batch => sea_orm_outbox::ClaimStrategy::Batch,
            });
        }
        if let Some(n) = self.send_concurrency {
            c = c.send_concurrency(n);
        }
        if let Some(d) = self.poll_delay {
            c = c.poll_delay(d);
        }
        if let Some(n) = self.batch {
            c = c.batch_size(n);
        }
        if let Some(d) = self.lease {
            c = c.lease(d);
        }
        if let Some(d) = self.send_timeout {
            c = c.send_timeout(d);
        }
        if let Some(d) = self.reclaim_interval {
            c = c.reclaim_interval(d);
        }
        let mut retry = c.retry;
        if let Some(n) = self.max_retries {
            retry.max_retries = n;
        }
        if let Some(d) = self.retry_backoff {
            retry.backoff_base = d;
        }
        if let Some(d) = self.retry_max_backoff {
            retry.max_backoff = d;
        }
        c = c.retry(retry);
        if let Some(id) = &self.instance_id {
            c = c.instance_id(id.clone());
        }
        if let Some(name) = &self.service_name {
            c = c.service_name(name.clone());
        }
        c
    }
}

/// Why a command failed; printed redacted by `main`.
enum Failure {
    /// No database URL given.
    NoUrl,
    /// The connection could not be opened.
    Connect(sea_orm::DbErr),
    /// An outbox operation failed.
    Outbox(OutboxError),
    /// A migration failed.
    Migration(sea_orm::DbErr),
    /// `dead retry/discard <id>` found no FAIL row with that id.
    NotDeadLetter(i64),
    /// Writing JSON failed.
    Json(serde_json::Error),
}

impl From<OutboxError> for Failure {
    fn from(e: OutboxError) -> Self {
        Failure::Outbox(e)
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Json(e)
    }
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Outbox(OutboxError::TableMissing(_)) => 3,
            _ => 1,
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::NoUrl => "no database URL: pass --database-url or set DATABASE_URL".into(),
            Failure::Connect(e) => format!("cannot connect to the database: {e}"),
            Failure::Outbox(OutboxError::TableMissing(e)) => format!(
                "the outbox table does not exist in this database: the migration must be run \
                 first (`outbox migrate up`). ({e})"
            ),
            Failure::Outbox(e) => e.to_string(),
            Failure::Migration(e) => format!("migration failed: {e}"),
            Failure::NotDeadLetter(id) => {
                format!(
                    "event {id} is not a dead letter (no FAIL row with that id); nothing changed"
                )
            }
            Failure::Json(e) => format!("cannot write JSON: {e}"),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Relay(_)) {
        "info"
    } else {
        "warn"
    };
    let url = cli.database_url.clone().unwrap_or_default();
    let log_url: Arc<str> = Arc::from(url.as_str());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(move || RedactingLine {
            url: log_url.clone(),
            buf: Vec::new(),
        })
        .try_init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", redact_secrets(&failure.message(), &url));
            ExitCode::from(failure.exit_code())
        }
    }
}

/// One log line on its way to stderr, with the database URL's secrets redacted.
///
/// Needed even though this tool never logs the URL itself: SeaORM's `Database::connect` span
/// records the whole `ConnectOptions`, URL and password included, and prints it with any DEBUG
/// event inside (e.g. sqlx's TLS notice on MySQL). The fmt layer writes each event through one
/// writer, which redacts and prints it when dropped.
struct RedactingLine {
    url: Arc<str>,
    buf: Vec<u8>,
}

impl std::io::Write for RedactingLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactingLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buf);
        let _ = std::io::stderr().write_all(redact_secrets(&text, &self.url).as_bytes());
    }
}

async fn connect(url: &str) -> Result<DatabaseConnection, Failure> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(4)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    Database::connect(opt).await.map_err(Failure::Connect)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli.database_url.ok_or(Failure::NoUrl)?;
    let db = connect(&url).await?;
    let result = match cli.command {
        Command::Migrate { action } => migrate(&db, action).await,
        Command::Stats { lease, json } => stats(&db, lease, json).await,
        Command::Dead { action } => dead(&db, action).await,
        Command::Purge { older_than, batch } => {
            let n = ops::purge_delivered(&db, older_than, batch).await?;
            println!(
                "purged {n} delivered events last updated more than {} ago",
                humantime::format_duration(older_than)
            );
            Ok(())
        }
        Command::Relay(args) => relay(db.clone(), &url, &args).await,
    };
    db.close().await.ok();
    result
}

async fn migrate(db: &DatabaseConnection, action: MigrateAction) -> Result<(), Failure> {
    match action {
        MigrateAction::Up { num } => {
            Migrator::up(db, num).await.map_err(Failure::Migration)?;
        }
        MigrateAction::Down { num } => {
            Migrator::down(db, Some(num))
                .await
                .map_err(Failure::Migration)?;
        }
        MigrateAction::Status => {}
    }
    let list = Migrator::get_migration_with_status_read_only(db)
        .await
        .map_err(Failure::Migration)?;
    let pending = list
        .iter()
        .filter(|m| m.status() == MigrationStatus::Pending)
        .count();
    for m in &list {
        println!("{:<8} {}", m.status().to_string(), m.name());
    }
    if pending > 0 {
        println!("{pending} pending: run `outbox migrate up`");
    }
    Ok(())
}

async fn stats(db: &DatabaseConnection, lease: Duration, json: bool) -> Result<(), Failure> {
    let s = ops::stats(db, lease).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    println!("WAIT     {}", s.wait);
    println!("SENDING  {}", s.sending);
    println!("SUCCESS  {}", s.success);
    println!("FAIL     {} (dead letters)", s.fail);
    match s.oldest_wait_age_seconds {
        Some(age) => println!("oldest WAIT age: {age:.3} s"),
        None => println!("oldest WAIT age: - (nothing waiting)"),
    }
    println!(
        "SENDING older than the lease ({}): {}",
        humantime::format_duration(lease),
        s.sending_over_lease
    );
    Ok(())
}

async fn dead(db: &DatabaseConnection, action: DeadAction) -> Result<(), Failure> {
    match action {
        DeadAction::List { limit, json } => {
            let rows = ops::dead_letters(db, limit).await?;
            if json {
                let rows: Vec<serde_json::Value> = rows.iter().map(dead_letter_json).collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!(
                "{:>10}  {:<24} {:<20} {:>7}  {:<27}  last_error",
                "id", "biz_no", "event_type", "retries", "update_time"
            );
            for r in &rows {
                println!(
                    "{:>10}  {:<24} {:<20} {:>7}  {:<27}  {}",
                    r.id,
                    r.biz_no,
                    r.event_type,
                    r.retry_count,
                    r.update_time
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                    r.last_error.as_deref().unwrap_or("").replace('\n', " ")
                );
            }
            println!("{} dead letter(s)", rows.len());
        }
        DeadAction::Retry { id: Some(id), .. } => match ops::retry_dead(db, id).await? {
            DeadLetterOutcome::Applied => println!("event {id} will be sent again"),
            DeadLetterOutcome::NotDeadLetter => return Err(Failure::NotDeadLetter(id)),
        },
        DeadAction::Retry { id: None, .. } => {
            let n = ops::retry_all_dead(db).await?;
            println!("{n} dead letter(s) will be sent again");
        }
        DeadAction::Discard { id } => match ops::discard_dead(db, id).await? {
            DeadLetterOutcome::Applied => println!("event {id} discarded"),
            DeadLetterOutcome::NotDeadLetter => return Err(Failure::NotDeadLetter(id)),
        },
    }
    Ok(())
}

/// A dead letter as JSON, with the status and times as the database holds them.
fn dead_letter_json(r: &sea_orm_outbox::event_record::Model) -> serde_json::Value {
    let time =
        |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    serde_json::json!({
        "id": r.id,
        "biz_no": r.biz_no,
        "event_type": r.event_type,
        "status": r.status.as_str(),
        "retry_count": r.retry_count,
        "last_error": r.last_error,
        "payload": r.payload,
        "next_retry_time": time(&r.next_retry_time),
        "claim_owner": r.claim_owner,
        "claimed_at": r.claimed_at.as_ref().map(time),
        "create_time": time(&r.create_time),
        "update_time": time(&r.update_time),
    })
}

async fn relay(db: DatabaseConnection, url: &str, args: &RelayArgs) -> Result<(), Failure> {
    // Refuse to start without the table, rather than log the error every round.
    ops::check_table(&db).await?;
    let config = args.config();
    config.validate()?;
    let (mut publisher, rocketmq, target): (Arc<dyn Publisher>, _, String) =
        match args.rocketmq_namesrv.as_deref().map(str::trim) {
            Some(addr) if !addr.is_empty() => {
                let (p, handle, target) = rmq::start(addr, args, &config).await?;
                (p, Some(handle), target)
            }
            _ => (Arc::new(LoggingPublisher), None, "log".to_owned()),
        };
    if let Some((every, stall)) = args.chaos_send_stall {
        tracing::warn!(every, stall_ms = stall.as_millis() as u64, "FAULT INJECTION: first sends of every {every}th event stall after the broker accepted them");
        publisher = Arc::new(StallingPublisher {
            inner: publisher,
            every,
            stall,
        });
    }
    let worker = match Worker::new(db, publisher, config) {
        Ok(w) => w,
        Err(e) => {
            if let Some(h) = rocketmq {
                h.shutdown().await;
            }
            return Err(e.into());
        }
    };
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested; finishing the send in flight");
            cancel.cancel();
        }
    });
    tracing::info!(owner = %worker.owner(), database = %redact_url(url), publisher = %target, config = ?worker.config(), "relay started");
    let summary = worker.run(cancel).await;
    // The worker holds the other reference to the publisher: drop it, then stop the producer.
    drop(worker);
    if let Some(h) = rocketmq {
        h.shutdown().await;
    }
    println!("relay stopped: {summary:?}");
    Ok(())
}

/// `outbox relay` publishing to RocketMQ.
#[cfg(feature = "rocketmq")]
mod rmq {
    use std::sync::Arc;

    use sea_orm_outbox::config::MAX_SEND_TIMEOUT_SHARE_OF_LEASE;
    use sea_orm_outbox::{OutboxError, Publisher, RocketMqConfig, RocketMqPublisher, WorkerConfig};

    use super::RelayArgs;

    /// The publisher, kept to stop it at the end.
    pub struct Handle(Arc<RocketMqPublisher>);

    /// Starts the producer: name server `addr`, topic and group when given, send timeout fitted
    /// to the worker (at most its send timeout and a third of its lease).
    pub async fn start(
        addr: &str,
        args: &RelayArgs,
        worker: &WorkerConfig,
    ) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
        let timeout = worker
            .send_timeout
            .min(worker.lease / MAX_SEND_TIMEOUT_SHARE_OF_LEASE);
        let mut config = RocketMqConfig::new(addr).send_timeout(timeout);
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        if let Some(t) = given(&args.topic) {
            config = config.topic(t);
        }
        if let Some(g) = given(&args.producer_group) {
            config = config.producer_group(g);
        }
        config.validate_for(worker)?;
        let target = format!("rocketmq {} topic {}", config.namesrv_addr, config.topic);
        let p = Arc::new(RocketMqPublisher::start(config).await?);
        Ok((p.clone(), Handle(p), target))
    }

    impl Handle {
        /// Stops the producer once the worker has let go of it.
        pub async fn shutdown(self) {
            match Arc::try_unwrap(self.0) {
                Ok(p) => p.shutdown().await,
                Err(_) => tracing::warn!("RocketMQ publisher still shared at exit; not flushed"),
            }
        }
    }
}

/// Built without the `rocketmq` feature: asking for RocketMQ is a configuration error.
#[cfg(not(feature = "rocketmq"))]
mod rmq {
    use std::sync::Arc;

    use sea_orm_outbox::{OutboxError, Publisher, WorkerConfig};

    use super::RelayArgs;

    pub struct Handle;

    pub async fn start(
        _addr: &str,
        _args: &RelayArgs,
        _worker: &WorkerConfig,
    ) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
        Err(OutboxError::InvalidConfig(
            "this outbox binary was built without the `rocketmq` feature".into(),
        ))
    }

    impl Handle {
        pub async fn shutdown(self) {}
    }
}

/// `--chaos-send-stall`: a publisher whose sending thread freezes after some first sends.
struct StallingPublisher {
    inner: Arc<dyn Publisher>,
    every: i64,
    stall: Duration,
}

#[async_trait::async_trait]
impl Publisher for StallingPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        self.inner.publish(m).await?;
        if m.retry_count == 0 && m.event_id % self.every == 0 {
            tracing::warn!(
                event_id = m.event_id,
                "FAULT INJECTION: stalling the sending thread"
            );
            // Blocks the thread on purpose: the whole send path freezes, timers included.
            std::thread::sleep(self.stall);
        }
        Ok(())
    }
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn relay_defaults_are_the_librarys() {
        let cli = Cli::try_parse_from(["outbox", "relay"]).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        let c = args.config();
        let d = WorkerConfig::default();
        assert_eq!(
            (c.poll_delay, c.batch_size, c.lease, c.send_timeout, c.retry),
            (d.poll_delay, d.batch_size, d.lease, d.send_timeout, d.retry)
        );
    }

    #[test]
    fn durations_parse() {
        let cli = Cli::try_parse_from(["outbox", "purge", "--older-than", "7d"]).expect("parse");
        let Command::Purge { older_than, batch } = cli.command else {
            panic!("purge")
        };
        assert_eq!(older_than, Duration::from_secs(7 * 86_400));
        assert_eq!(batch, 1000);
        assert!(Cli::try_parse_from(["outbox", "dead", "retry"]).is_err());
        assert!(Cli::try_parse_from(["outbox", "dead", "retry", "3", "--all"]).is_err());
    }

    #[test]
    fn relay_retry_and_fault_flags() {
        let cli = Cli::try_parse_from([
            "outbox",
            "relay",
            "--retry-backoff",
            "100ms",
            "--retry-max-backoff",
            "2s",
            "--max-retries",
            "40",
            "--chaos-send-stall",
            "500:6s",
        ])
        .expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        let r = args.config().retry;
        assert_eq!(
            (r.max_retries, r.backoff_base, r.max_backoff),
            (40, Duration::from_millis(100), Duration::from_secs(2))
        );
        assert_eq!(args.chaos_send_stall, Some((500, Duration::from_secs(6))));
        for bad in ["0:1s", "x:1s", "5", "5:soon"] {
            assert!(parse_stall(bad).is_err(), "{bad}");
        }
    }
}
