//! `outbox health` and `outbox relays`: the outbox's health verdict, and its relay instances
//! from their heartbeats.
use sea_orm::DatabaseConnection;
use sea_orm_outbox::ops::{self, HealthStatus, HealthThresholds};
use sea_orm_outbox::Outbox;

use crate::failure::Failure;

/// Exit status of `outbox health` for a degraded outbox.
pub(crate) const EXIT_DEGRADED: u8 = 4;
/// Exit status of `outbox health` for a failing outbox.
pub(crate) const EXIT_FAILING: u8 = 5;

/// `outbox health`: prints the status and each reason; returns the exit status (0 healthy,
/// [`EXIT_DEGRADED`], [`EXIT_FAILING`]).
pub(crate) async fn health(
    outbox: &Outbox,
    db: &DatabaseConnection,
    thresholds: &HealthThresholds,
    json: bool,
) -> Result<u8, Failure> {
    let h = ops::health(outbox, db, thresholds).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&h)?);
    } else {
        println!("{}", h.status.as_str());
        for r in &h.reasons {
            println!(
                "{:<9} {:<24} {}",
                r.status.as_str(),
                r.code.as_str(),
                r.message
            );
        }
    }
    Ok(match h.status {
        HealthStatus::Healthy => 0,
        HealthStatus::Degraded => EXIT_DEGRADED,
        HealthStatus::Failing => EXIT_FAILING,
    })
}

/// `outbox relays`: one line per relay instance, newest heartbeat first.
pub(crate) async fn relays(
    outbox: &Outbox,
    db: &DatabaseConnection,
    json: bool,
) -> Result<(), Failure> {
    let relays = ops::relays(outbox, db).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&relays)?);
        return Ok(());
    }
    let time =
        |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let or_dash = |t: &Option<chrono::DateTime<chrono::Utc>>| t.as_ref().map_or("-".into(), time);
    println!(
        "{:<32} {:<7} {:>14}  {:<24}  {:<24}  {:<24}  version",
        "instance", "state", "heartbeat age", "started", "last round", "last success"
    );
    for r in &relays {
        println!(
            "{:<32} {:<7} {:>12.1} s  {:<24}  {:<24}  {:<24}  {}",
            r.instance_id,
            if r.alive { "alive" } else { "stopped" },
            r.heartbeat_age_seconds,
            time(&r.started_at),
            or_dash(&r.last_round_at),
            or_dash(&r.last_success_at),
            r.version
        );
    }
    let alive = relays.iter().filter(|r| r.alive).count();
    println!("{alive} alive, {} stopped", relays.len() - alive);
    Ok(())
}
