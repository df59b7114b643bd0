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
//! Every command but `relay` fails at once when the database cannot be reached. `relay` waits
//! for it at start: it retries connection failures with back-off (200 ms doubling to 5 s) until
//! it gets through, `--connect-timeout` has passed, or it is stopped by Ctrl-C / SIGTERM (exit
//! 0). A malformed URL, a refused login or a missing table still fail at once.
//!
//! Exit status: 0 success; 1 error (including "not a dead letter"); 2 usage error; 3 the outbox
//! table is missing (run `outbox migrate up`).
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};
use sea_orm_migration::MigrationStatus;
use sea_orm_outbox::error::is_connection_error;
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
    /// publisher. At start it waits for the database (see `--connect-timeout`).
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
    /// Set but empty is an error (the log delivers nothing).
    #[arg(long, env = "ROCKETMQ_NAMESRV_ADDR")]
    rocketmq_namesrv: Option<String>,
    /// RocketMQ topic [default: ORDER_EVENT_TOPIC].
    #[arg(long, env = "OUTBOX_TOPIC")]
    topic: Option<String>,
    /// RocketMQ producer group [default: outbox_producer_group].
    #[arg(long, env = "ROCKETMQ_PRODUCER_GROUP")]
    producer_group: Option<String>,
    /// How long to keep trying to reach the database at start, e.g. 30s or 5m; `0s` tries once
    /// [default: no limit]. Only connection failures are retried (with back-off from 200 ms to
    /// 5 s); a malformed URL, a refused login or a missing table fail at once.
    #[arg(long, env = "OUTBOX_CONNECT_TIMEOUT", value_parser = humantime::parse_duration)]
    connect_timeout: Option<Duration>,
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
    /// `relay` could not reach the database within `--connect-timeout`.
    ConnectGaveUp {
        /// The database URL, redacted.
        database: String,
        /// The `--connect-timeout`.
        waited: Duration,
        /// Connection attempts made.
        attempts: u32,
        /// The error of the last attempt that finished before the deadline (`None` if none did).
        last: Option<String>,
    },
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
            Failure::ConnectGaveUp {
                database,
                waited,
                attempts,
                last,
            } => format!(
                "cannot connect to the database {database} within {} (--connect-timeout; \
                 {attempts} attempt(s)): {}",
                humantime::format_duration(*waited),
                last.as_deref().unwrap_or("no answer in time")
            ),
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

    /// Whether the database could not be reached (worth trying again), as opposed to a
    /// failure that waiting cannot fix (bad URL, refused login, missing table).
    fn is_connection_failure(&self) -> bool {
        match self {
            Failure::Connect(e) | Failure::Outbox(OutboxError::Db(e)) => is_connection_error(e),
            _ => false,
        }
    }

    /// The underlying error, without this tool's prefix.
    fn cause(&self) -> String {
        match self {
            Failure::Connect(e) => e.to_string(),
            other => other.message(),
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

/// Longest one connection attempt may take (the pool's acquire timeout). Within it the driver
/// itself retries a refused connection, so a server that is starting up is caught quickly.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// `relay`'s first pause after a failed connection attempt at start; it doubles per attempt.
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(200);
/// `relay`'s longest pause between connection attempts at start.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(5);

async fn connect(url: &str) -> Result<DatabaseConnection, Failure> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(4)
        .min_connections(0)
        .connect_timeout(CONNECT_ATTEMPT_TIMEOUT)
        .sqlx_logging(false);
    Database::connect(opt).await.map_err(Failure::Connect)
}

/// The pause after the `attempt`-th failed connection attempt: 200 ms doubling per attempt,
/// spread by ±10% at random (so that relays started together do not retry in lockstep), at
/// most 5 s.
fn connect_retry_delay(attempt: u32) -> Duration {
    let doubling = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    sea_orm_outbox::retry::jitter(
        CONNECT_RETRY_FIRST
            .saturating_mul(doubling)
            .min(CONNECT_RETRY_MAX),
    )
    .min(CONNECT_RETRY_MAX)
}

/// One attempt at `relay` start: open the pool and check that the outbox table is there.
async fn connect_and_check(url: &str) -> Result<DatabaseConnection, Failure> {
    let db = connect(url).await?;
    if let Err(e) = ops::check_table(&db).await {
        db.close().await.ok();
        return Err(e.into());
    }
    Ok(db)
}

/// [`connect_and_check`] until it succeeds, retrying connection failures with back-off and a
/// WARN per failed attempt, for at most `limit` (`None`: no limit; zero: one attempt, its error
/// returned as is). Any other failure returns at once. `Ok(None)` when `cancel` fires first.
async fn wait_for_database(
    url: &str,
    limit: Option<Duration>,
    cancel: &CancellationToken,
) -> Result<Option<DatabaseConnection>, Failure> {
    let once = limit.is_some_and(|d| d.is_zero());
    let deadline = limit
        .filter(|d| !d.is_zero())
        .map(|d| tokio::time::Instant::now() + d);
    let database = redact_url(url);
    let gave_up = |attempts, last| Failure::ConnectGaveUp {
        database: database.clone(),
        waited: limit.unwrap_or_default(),
        attempts,
        last,
    };
    let mut last = None;
    let mut attempts = 0;
    loop {
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Err(gave_up(attempts, last));
        }
        attempts += 1;
        let attempt = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, connect_and_check(url))
                    .await
                    .ok(),
                None => Some(connect_and_check(url).await),
            }
        };
        let failure = tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            outcome = attempt => match outcome {
                Some(Ok(db)) => {
                    if attempts > 1 {
                        tracing::info!(%database, attempts, "the database is reachable");
                    }
                    return Ok(Some(db));
                }
                Some(Err(f)) if once || !f.is_connection_failure() => return Err(f),
                Some(Err(f)) => f,
                None => return Err(gave_up(attempts, last)),
            },
        };
        let cause = redact_secrets(&failure.cause(), url);
        let delay = connect_retry_delay(attempts);
        let resume = tokio::time::Instant::now() + delay;
        let resume = deadline.map_or(resume, |d| resume.min(d));
        tracing::warn!(%database, attempt = attempts, error = %cause,
            retry_in = %humantime::format_duration(Duration::from_millis(delay.as_millis() as u64)),
            "cannot connect to the database yet; retrying");
        last = Some(cause);
        tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep_until(resume) => {}
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli.database_url.ok_or(Failure::NoUrl)?;
    // The relay waits for the database; every other command fails at once without it.
    if let Command::Relay(args) = &cli.command {
        return relay(&url, args).await;
    }
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
        Command::Relay(_) => Ok(()), // handled above
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

async fn relay(url: &str, args: &RelayArgs) -> Result<(), Failure> {
    // Settings that cannot work are refused before waiting for anything.
    let config = args.config();
    config.validate()?;
    // The library lets a custom publisher's send outlast the lease while renewal keeps it; the
    // relay's RocketMQ client gives up at a third of the lease anyway, so a send timeout that
    // reaches the lease is a mistake here, whatever the renewal setting.
    if config.send_timeout >= config.lease {
        return Err(Failure::Outbox(OutboxError::InvalidConfig(format!(
            "--send-timeout ({}) must be shorter than --lease ({}): a send still running when \
             its lease ends is sent again by another instance",
            humantime::format_duration(config.send_timeout),
            humantime::format_duration(config.lease)
        ))));
    }
    let rocketmq = match args.rocketmq_namesrv.as_deref().map(str::trim) {
        None => None,
        // Relaying to the log would mark every event delivered: an address that is set but
        // blank is a mistake (an unset variable in a template, say), not a choice.
        Some("") => {
            return Err(Failure::Outbox(OutboxError::InvalidConfig(
                "--rocketmq-namesrv / ROCKETMQ_NAMESRV_ADDR is set but empty: give the name \
                 server address (host:port), or unset it to relay to the log"
                    .into(),
            )))
        }
        Some(addr) => Some(rmq::config(addr, args, &config)?),
    };
    let cancel = CancellationToken::new();
    let signal = shutdown_signal();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            signal.await;
            tracing::info!("shutdown requested");
            cancel.cancel();
        }
    });
    // Wait for the database, and refuse to start without the table rather than log the error
    // every round.
    let Some(db) = wait_for_database(url, args.connect_timeout, &cancel).await? else {
        println!("relay stopped before the database could be reached");
        return Ok(());
    };
    let result = relay_on(db.clone(), url, args, config, rocketmq, cancel).await;
    db.close().await.ok();
    result
}

/// The relay proper, once the database answers: publisher, worker, run until `cancel`.
async fn relay_on(
    db: DatabaseConnection,
    url: &str,
    args: &RelayArgs,
    config: WorkerConfig,
    rocketmq: Option<rmq::RocketMqConfig>,
    cancel: CancellationToken,
) -> Result<(), Failure> {
    let (mut publisher, rocketmq, target): (Arc<dyn Publisher>, _, String) = match rocketmq {
        Some(c) => {
            let (p, handle, target) = rmq::start(c).await?;
            (p, Some(handle), target)
        }
        None => (Arc::new(LoggingPublisher), None, "log".to_owned()),
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
    pub use sea_orm_outbox::RocketMqConfig;
    use sea_orm_outbox::{OutboxError, Publisher, RocketMqPublisher, WorkerConfig};

    use super::RelayArgs;

    /// The publisher, kept to stop it at the end.
    pub struct Handle(Arc<RocketMqPublisher>);

    /// The producer's configuration, checked: name server `addr`, topic and group when given,
    /// send timeout fitted to the worker (at most its send timeout and a third of its lease).
    pub fn config(
        addr: &str,
        args: &RelayArgs,
        worker: &WorkerConfig,
    ) -> Result<RocketMqConfig, OutboxError> {
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
        Ok(config)
    }

    /// Starts the producer.
    pub async fn start(
        config: RocketMqConfig,
    ) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
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

    /// No configuration can exist without the feature.
    pub enum RocketMqConfig {}

    pub struct Handle;

    pub fn config(
        _addr: &str,
        _args: &RelayArgs,
        _worker: &WorkerConfig,
    ) -> Result<RocketMqConfig, OutboxError> {
        Err(OutboxError::InvalidConfig(
            "this outbox binary was built without the `rocketmq` feature".into(),
        ))
    }

    pub async fn start(
        config: RocketMqConfig,
    ) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
        match config {}
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

/// A future that resolves on Ctrl-C or (on Unix) SIGTERM. The handlers are installed by this
/// call, not on the first poll, so a signal that arrives right after it is not lost.
#[cfg(unix)]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    async move {
        tokio::select! {
            () = next_signal(int.as_mut()) => {}
            () = next_signal(term.as_mut()) => {}
        }
    }
}

/// Resolves when `signal` is next received; never without a handler.
#[cfg(unix)]
async fn next_signal(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// A future that resolves on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
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
    fn connect_retry_delay_doubles_up_to_five_seconds() {
        let within = |attempt: u32, low: u64, high: u64| {
            for _ in 0..50 {
                let ms = connect_retry_delay(attempt).as_millis() as u64;
                assert!((low..=high).contains(&ms), "attempt {attempt}: {ms} ms");
            }
        };
        within(1, 180, 220);
        within(2, 360, 440);
        within(3, 720, 880);
        within(5, 2880, 3520);
        within(6, 4500, 5000);
        within(40, 4500, 5000);
        within(u32::MAX, 4500, 5000);
        let cli = Cli::try_parse_from(["outbox", "relay"]).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        assert_eq!(
            args.connect_timeout, None,
            "waits for the database by default"
        );
        let cli =
            Cli::try_parse_from(["outbox", "relay", "--connect-timeout", "0s"]).expect("parse");
        let Command::Relay(args) = cli.command else {
            panic!("relay")
        };
        assert_eq!(args.connect_timeout, Some(Duration::ZERO));
        assert!(Cli::try_parse_from(["outbox", "relay", "--connect-timeout", "soon"]).is_err());
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
