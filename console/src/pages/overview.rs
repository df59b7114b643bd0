//! `/`: the rows per status, the backlog's ages, the health, the relays, and the trend of the
//! last hour.
use std::time::Instant;

use axum::extract::{OriginalUri, State};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use sea_orm_outbox::ops::{self, Health, HealthThresholds, OutboxStats, RelayInstance};
use sea_orm_outbox::OutboxError;

use super::health::{health_panel, relays_panel};
use crate::layout::{self, age, count, Frame, Nav};
use crate::state::{self, Shared};
use crate::trend::{self, Sample, Series};

/// Seconds between the overview's reloads.
const REFRESH_SECONDS: u64 = 15;

/// `GET /`: reads `ops::stats` (with the console's lease), `ops::health` (default thresholds)
/// and `ops::relays`, and renders them with the trend. The health and the relays show their
/// error in their panel when they cannot be read; the page fails only without the stats.
pub(crate) async fn overview(
    State(state): State<state::State>,
    OriginalUri(uri): OriginalUri,
) -> Response {
    let thresholds = HealthThresholds::default();
    let (stats, health, relays) = tokio::join!(
        ops::stats(&state.outbox, &state.db, state.lease),
        ops::health(&state.outbox, &state.db, &thresholds),
        ops::relays(&state.outbox, &state.db),
    );
    let stats = match stats {
        Ok(stats) => stats,
        Err(e) => return layout::failure(state.writable(), &e),
    };
    let base = layout::base(uri.path());
    let frame = Frame {
        base: &base,
        refresh: Some(REFRESH_SECONDS),
        health: health.as_ref().ok().map(|h| h.status),
        ..Frame::new("Overview", Nav::Overview, state.writable())
    };
    let read = Read {
        stats: &stats,
        health: &health,
        relays: &relays,
    };
    let body = render(&state, &read, &state.samples(), &base, Instant::now());
    layout::page(frame, body).into_response()
}

/// What the overview read from the database.
struct Read<'a> {
    stats: &'a OutboxStats,
    health: &'a Result<Health, OutboxError>,
    relays: &'a Result<Vec<RelayInstance>, OutboxError>,
}

/// The overview's sections, top to bottom.
fn render(state: &Shared, read: &Read<'_>, samples: &[Sample], base: &str, now: Instant) -> Markup {
    html! {
        h1 {
            "Outbox " span.muted { "table " code { (table_name(state)) } }
        }
        (cards(read.stats, base))
        (backlog(read.stats, base))
        (health_panel(read.health))
        (relays_panel(read.relays))
        (trend_charts(state, samples, now))
    }
}

/// The table's name as the statements write it, `schema.table` when it has a schema.
fn table_name(state: &Shared) -> String {
    match state.outbox.schema_name() {
        Some(schema) => format!("{schema}.{}", state.outbox.table_name()),
        None => state.outbox.table_name().to_owned(),
    }
}

/// A card per status with its row count (`data-n` holds the plain number).
fn cards(stats: &OutboxStats, base: &str) -> Markup {
    let cards: [(&Series, u64, &str); 4] = [
        (&trend::WAIT, stats.wait, "waiting to be sent"),
        (&trend::SENDING, stats.sending, "leased by a relay"),
        (
            &trend::SUCCESS,
            stats.success,
            &format!("kept after delivery; {} delivered in all", stats.delivered),
        ),
        (&trend::FAIL, stats.fail, "dead letters"),
    ];
    html! {
        div.cards {
            @for (series, n, hint) in cards {
                div.card id={ "count-" (series.name) } style={ "--c:" (series.color) } {
                    div.label { (series.name) }
                    div.n data-n=(n) { (count(n)) }
                    @if series.name == trend::FAIL.name {
                        div { a href={ (base) "dead" } { (hint) " by error →" } }
                    } @else {
                        div.muted { (hint) }
                    }
                }
            }
        }
    }
}

/// The ages and counts that say whether the relays keep up.
fn backlog(stats: &OutboxStats, base: &str) -> Markup {
    let lease = age(stats.lease_seconds);
    html! {
        h2 { "Backlog" }
        table.kv {
            tr {
                th { "Oldest undelivered event" }
                td #oldest-wait {
                    @match stats.oldest_wait_age_seconds {
                        Some(seconds) => { (age(seconds)) span.muted { " since it was written (WAIT)" } }
                        None => { span.muted { "nothing waits" } }
                    }
                }
            }
            tr {
                th { "SENDING past the lease" }
                td #over-lease data-n=(stats.sending_over_lease) {
                    (count(stats.sending_over_lease))
                    span.muted { " claimed more than " (lease) " ago (the lease the console is given); the next reclaim returns them to WAIT" }
                }
            }
            tr {
                th { "Keys blocked behind a dead letter" }
                td #blocked-keys data-n=(stats.blocked_keys) {
                    (count(stats.blocked_keys))
                    @if let Some(seconds) = stats.oldest_blocked_age_seconds {
                        span.muted { ", the oldest waiting " (age(seconds)) }
                    }
                    span.muted { " (ordered relays with the block policy)" }
                }
            }
            tr {
                th { "Dead letters" }
                td {
                    (count(stats.dead_letters)) " "
                    a href={ (base) "dead" } { "grouped by error" }
                }
            }
        }
    }
}

/// The charts of the last hour: the backlog (WAIT, SENDING, FAIL) and the rows kept after
/// delivery (SUCCESS; none while the relays delete delivered rows, `Completion::Delete`).
fn trend_charts(state: &Shared, samples: &[Sample], now: Instant) -> Markup {
    let backlog = [&trend::WAIT, &trend::SENDING, &trend::FAIL];
    let delivered = [&trend::SUCCESS];
    html! {
        h2 {
            "Last hour "
            span.muted { "(sampled every " (age(state.every.as_secs_f64())) "; this page reloads every " (REFRESH_SECONDS) " s)" }
        }
        @if samples.is_empty() {
            p.muted #trend-empty { "No sample yet: the console's sampler reads the table every " (age(state.every.as_secs_f64())) "." }
        } @else {
            div.charts #trend data-samples=(samples.len()) {
                div {
                    (legend(&backlog))
                    (trend::chart("Rows waiting, sending and failed over the last hour", samples, &backlog, state.every, now))
                }
                div {
                    (legend(&delivered))
                    (trend::chart("Rows kept as SUCCESS after delivery over the last hour", samples, &delivered, state.every, now))
                }
            }
        }
    }
}

/// The names and colours of `series`.
fn legend(series: &[&Series]) -> Markup {
    html! {
        div.legend {
            @for s in series {
                span style={ "--c:" (s.color) } { i {} (s.name) }
            }
        }
    }
}
