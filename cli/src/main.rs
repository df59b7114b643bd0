//! `outbox`: the operator's tool for sea-orm-outbox (crate `sea-orm-outbox-cli`; install it
//! with `cargo install --locked sea-orm-outbox-cli`).
//!
//! ```text
//! outbox migrate up|down|status          apply / roll back / list the migrations
//! outbox stats [--lease 10m] [--json]    rows per status, oldest WAIT age, stuck leases
//! outbox dead list [--limit N] [--group] [--json]  the dead letters (FAIL rows), or their groups
//! outbox dead retry <id> | --all         FAIL -> WAIT, retry_count 0, due now
//! outbox dead discard <id>               delete one dead letter
//! outbox purge --older-than 7d [--batch 1000]   delete delivered (SUCCESS) rows only
//! outbox relay [flags]                   run a relay worker until Ctrl-C / SIGTERM
//! outbox console [--addr 127.0.0.1:8080] [--token T]   the web console until Ctrl-C / SIGTERM
//! outbox health [--undelivered-age 60s] [--transaction-age 5m] [--dead-letter-window 5m] [--json]
//! outbox relays [--json]                 the relay instances, from their heartbeats
//! ```
//! The database comes from `--database-url` or `DATABASE_URL`. Its password is never printed:
//! every URL and every error goes through [`redact`]. Every command works on the table
//! `--table` (`OUTBOX_TABLE`, default `t_event_record`) in the schema `--schema`
//! (`OUTBOX_SCHEMA`, default the connection's); `migrate` manages `t_event_record` only.
//!
//! Every command but `relay` fails at once when the database cannot be reached. `relay` waits
//! for it at start: it retries connection failures with back-off (200 ms doubling to 5 s) until
//! it gets through, `--connect-timeout` has passed, or it is stopped by Ctrl-C / SIGTERM (exit
//! 0). A malformed URL, a refused login or a missing table still fail at once.
//!
//! Exit status: 0 success; 1 error (including "not a dead letter"); 2 usage error; 3 the outbox
//! table is missing or lacks a newer migration (run `outbox migrate up`); `outbox health`: 4
//! degraded, 5 failing (0 healthy).
//!
//! Modules: [`args`] the command line, [`connect`] reaching the database, [`commands`] the
//! one-shot sub-commands, [`health`] `health` and `relays`, [`relay`] the relay worker,
//! [`console`] the web console, [`failure`] errors and exit status, [`redact`] keeping
//! passwords out of the output, and `chaos` the fault injection of a `chaos-testing` build.
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use redact::redact_secrets;
use sea_orm_outbox::Outbox;

mod args;
#[cfg(feature = "chaos-testing")]
mod chaos;
mod commands;
mod connect;
mod console;
mod failure;
mod health;
mod publishers;
mod redact;
mod relay;

use args::{Cli, Command};
use connect::RedactingLine;
use failure::Failure;

/// Parses the command line, sets up redacted logging to stderr, runs the command and turns its
/// failure into `error: ...` and the exit status.
#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Relay(_) | Command::Console(_)) {
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
        .with_writer(move || RedactingLine::new(log_url.clone()))
        .try_init();
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("error: {}", redact_secrets(&failure.message(), &url));
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Runs one command and returns its exit status: `relay` waits for the database; every other
/// command connects once and closes the connection when done.
async fn run(cli: Cli) -> Result<u8, Failure> {
    let url = cli.database_url.ok_or(Failure::NoUrl)?;
    let mut outbox = Outbox::new().table(&cli.table)?;
    if let Some(schema) = &cli.schema {
        outbox = outbox.schema(schema)?;
    }
    // The relay waits for the database; every other command fails at once without it.
    if let Command::Relay(args) = &cli.command {
        return relay::relay(&url, args, &outbox).await.map(|()| 0);
    }
    if matches!(cli.command, Command::Migrate { .. }) && outbox != Outbox::new() {
        return Err(Failure::Usage(
            "`outbox migrate` manages the table t_event_record only; create another outbox \
             table from a migration of your own with \
             sea_orm_outbox_migration::create_outbox_table (see docs/migrations.md)"
                .into(),
        ));
    }
    let db = connect::connect(&url).await?;
    let result = match cli.command {
        Command::Health {
            undelivered_age,
            transaction_age,
            dead_letter_window,
            json,
        } => {
            let thresholds = sea_orm_outbox::ops::HealthThresholds::default()
                .undelivered_age(undelivered_age)
                .transaction_age(transaction_age)
                .dead_letter_window(dead_letter_window);
            health::health(&outbox, &db, &thresholds, json).await
        }
        command => match command {
            Command::Migrate { action } => commands::migrate(&db, action).await,
            Command::Stats { lease, json } => commands::stats(&outbox, &db, lease, json).await,
            Command::Dead { action } => commands::dead(&outbox, &db, action).await,
            Command::Purge { older_than, batch } => {
                commands::purge(&outbox, &db, older_than, batch).await
            }
            Command::Relays { json } => health::relays(&outbox, &db, json).await,
            Command::Console(args) => console::console(&outbox, &db, args).await,
            Command::Health { .. } | Command::Relay(_) => Ok(()), // handled above
        }
        .map(|()| 0),
    };
    db.close().await.ok();
    result
}
