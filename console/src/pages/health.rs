//! `/health`: the outbox's health as JSON, for a load balancer or a probe, and the overview's
//! panels of the health and the relays.
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use maud::{html, Markup};
use sea_orm_outbox::ops::{self, Health, HealthStatus, HealthThresholds, RelayInstance};
use sea_orm_outbox::OutboxError;
use serde::Serialize;

use crate::layout::{age, time};
use crate::state;

/// The answer of `/health` when the database cannot be read.
#[derive(Serialize)]
struct Unreadable {
    status: HealthStatus,
    error: String,
}

/// `GET /health`: [`ops::health`] with the default thresholds as JSON (`{"status": "healthy" |
/// "degraded" | "failing", "reasons": [{"status", "code", "message"}]}`); 200 unless failing,
/// 503 when failing or when the database cannot be read (`{"status": "failing", "error"}`).
pub(crate) async fn health(State(state): State<state::State>) -> Response {
    match ops::health(&state.outbox, &state.db, &HealthThresholds::default()).await {
        Ok(health) => {
            let code = match health.status {
                HealthStatus::Failing => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::OK,
            };
            (code, Json(health)).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "console: the health could not be read");
            let body = Unreadable {
                status: HealthStatus::Failing,
                error: e.to_string(),
            };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// The overview's health panel: the verdict and each reason, or the error that kept it from
/// being read.
pub(crate) fn health_panel(health: &Result<Health, OutboxError>) -> Markup {
    html! {
        h2 { "Health " span.muted { "(as " a href="health" { "/health" } " answers it)" } }
        @match health {
            Ok(h) => {
                table.kv #health data-status=(h.status.as_str()) {
                    tr {
                        th { "Verdict" }
                        td { span class={ "badge " (h.status.as_str()) } { (h.status.as_str()) } }
                    }
                    @for r in &h.reasons {
                        tr.reason data-code=(r.code.as_str()) {
                            th { (r.code.as_str()) }
                            td { span class={ "badge " (r.status.as_str()) } { (r.status.as_str()) } " " (r.message) }
                        }
                    }
                }
            }
            Err(e) => { p.muted #health { "Not read: " code { (e) } } }
        }
    }
}

/// The overview's relays panel: every relay instance of the table from its heartbeat, alive or
/// stopped, newest heartbeat first.
pub(crate) fn relays_panel(relays: &Result<Vec<RelayInstance>, OutboxError>) -> Markup {
    html! {
        h2 { "Relays" }
        @match relays {
            Ok(relays) if relays.is_empty() => {
                p.muted #relays data-alive="0" { "No relay has written a heartbeat for this table." }
            }
            Ok(relays) => {
                table #relays data-alive=(relays.iter().filter(|r| r.alive).count()) {
                    tr {
                        th { "Instance" } th { "State" } th { "Last heartbeat" }
                        th { "Last round" } th { "Last success" } th { "Started" } th { "Version" }
                    }
                    @for r in relays {
                        tr.relay data-alive=(r.alive) {
                            td { code { (r.instance_id) } }
                            td {
                                @if r.alive { span.badge.healthy { "alive" } }
                                @else { span.badge.failing { "stopped" } }
                            }
                            td.time { (age(r.heartbeat_age_seconds)) " ago" }
                            td.time { (optional_time(r.last_round_at.as_ref())) }
                            td.time { (optional_time(r.last_success_at.as_ref())) }
                            td.time { (time(&r.started_at)) }
                            td { (r.version) }
                        }
                    }
                }
            }
            Err(e) => { p.muted #relays { "Not read: " code { (e) } } }
        }
    }
}

/// A time, or "never".
fn optional_time(t: Option<&chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(|| "never".to_owned(), time)
}
