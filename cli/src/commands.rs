//! The one-shot sub-commands: `migrate`, `stats`, `dead`, `purge`. Each runs on an open
//! connection and prints its outcome to stdout.
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm_migration::MigrationStatus;
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::ops::{self, DeadLetterOutcome};
use sea_orm_outbox::{Migrator, Outbox};

use crate::args::{DeadAction, MigrateAction};
use crate::failure::Failure;

/// `outbox migrate up|down|status`: the standalone `Migrator`, then the list of migrations.
pub(crate) async fn migrate(db: &DatabaseConnection, action: MigrateAction) -> Result<(), Failure> {
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
        // This lists the standalone migrator's history (`seaql_migrations_outbox`): a service
        // that lists the outbox's migrations in its own Migrator sees them all pending here.
        println!(
            "{pending} pending in the standalone migrator's history (seaql_migrations_outbox): \
             run `outbox migrate up`, unless your own Migrator lists the outbox's migrations \
             (then they are in seaql_migrations: `sea-orm-cli migrate status`)"
        );
    }
    Ok(())
}

/// `outbox stats`: rows per status, the oldest WAIT age and the SENDING rows past `lease`.
pub(crate) async fn stats(
    outbox: &Outbox,
    db: &DatabaseConnection,
    lease: Duration,
    json: bool,
) -> Result<(), Failure> {
    let s = ops::stats(outbox, db, lease).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    println!("WAIT     {}", s.wait);
    println!("SENDING  {}", s.sending);
    println!("SUCCESS  {} (rows kept)", s.success);
    println!("FAIL     {} (dead letters)", s.fail);
    println!("delivered: {} (counted by the relays)", s.delivered);
    match s.oldest_wait_age_seconds {
        Some(age) => println!("oldest WAIT age: {age:.3} s"),
        None => println!("oldest WAIT age: - (nothing waiting)"),
    }
    println!(
        "SENDING older than the lease ({}): {}",
        humantime::format_duration(lease),
        s.sending_over_lease
    );
    println!(
        "keys blocked behind a dead letter (ordered, block policy): {}",
        s.blocked_keys
    );
    match s.oldest_blocked_age_seconds {
        Some(age) => println!("oldest blocked age: {age:.3} s"),
        None => println!("oldest blocked age: - (no key blocked)"),
    }
    Ok(())
}

/// `outbox dead list|retry|discard`.
pub(crate) async fn dead(
    outbox: &Outbox,
    db: &DatabaseConnection,
    action: DeadAction,
) -> Result<(), Failure> {
    match action {
        DeadAction::List {
            limit,
            group: true,
            json,
        } => dead_groups(outbox, db, limit, json).await?,
        DeadAction::List { limit, json, .. } => {
            let rows = ops::dead_letters(outbox, db, limit).await?;
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
        DeadAction::Retry { id: Some(id), .. } => match ops::retry_dead(outbox, db, id).await? {
            DeadLetterOutcome::Applied => println!("event {id} will be sent again"),
            DeadLetterOutcome::NotDeadLetter => return Err(Failure::NotDeadLetter(id)),
        },
        DeadAction::Retry { id: None, .. } => {
            let n = ops::retry_all_dead(outbox, db).await?;
            println!("{n} dead letter(s) will be sent again");
        }
        DeadAction::Discard { id } => match ops::discard_dead(outbox, db, id).await? {
            DeadLetterOutcome::Applied => println!("event {id} discarded"),
            DeadLetterOutcome::NotDeadLetter => return Err(Failure::NotDeadLetter(id)),
        },
    }
    Ok(())
}

/// `outbox dead list --group`: one line per error fingerprint, largest group first, at most
/// `limit` groups.
async fn dead_groups(
    outbox: &Outbox,
    db: &DatabaseConnection,
    limit: u64,
    json: bool,
) -> Result<(), Failure> {
    let groups = ops::dead_letter_groups(outbox, db).await?;
    let total: u64 = groups.iter().map(|g| g.count).sum();
    let shown = &groups[..groups
        .len()
        .min(usize::try_from(limit).unwrap_or(usize::MAX))];
    if json {
        println!("{}", serde_json::to_string_pretty(shown)?);
        return Ok(());
    }
    println!(
        "{:>8}  {:>10}  {:<27}  {:>6}  fingerprint",
        "count", "oldest id", "last failure", "errors"
    );
    for g in shown {
        println!(
            "{:>8}  {:>10}  {:<27}  {:>6}  {}",
            g.count,
            g.oldest_id,
            g.last_update
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            g.errors,
            g.fingerprint.as_deref().unwrap_or("(no error recorded)")
        );
    }
    println!(
        "{total} dead letter(s) in {} group(s){}",
        groups.len(),
        if shown.len() < groups.len() {
            format!(", the {} largest shown", shown.len())
        } else {
            String::new()
        }
    );
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

/// `outbox purge`: delete delivered events last updated more than `older_than` ago.
pub(crate) async fn purge(
    outbox: &Outbox,
    db: &DatabaseConnection,
    older_than: Duration,
    batch: u64,
) -> Result<(), Failure> {
    let n = ops::purge_delivered(outbox, db, older_than, batch).await?;
    println!(
        "purged {n} delivered events last updated more than {} ago",
        humantime::format_duration(older_than)
    );
    Ok(())
}
