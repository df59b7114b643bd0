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
    CancellationToken, LoggingPublisher, Migrator, MigratorTrait, OutboxError, RetryPolicy, Worker,
    WorkerConfig,
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
    /// Run a relay worker (publishing through the logging publisher) until Ctrl-C or SIGTERM.
    Relay(RelayArgs),
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
        if let Some(n) = self.max_retries {
            let retry = RetryPolicy {
                max_retries: n,
                ..c.retry
            };
            c = c.retry(retry);
        }
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
    let worker = Worker::new(db, Arc::new(LoggingPublisher), args.config())?;
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested; finishing the send in flight");
            cancel.cancel();
        }
    });
    tracing::info!(owner = %worker.owner(), database = %redact_url(url), config = ?worker.config(), "relay started");
    let summary = worker.run(cancel).await;
    println!("relay stopped: {summary:?}");
    Ok(())
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
}
