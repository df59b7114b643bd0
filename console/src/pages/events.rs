//! `/events?q=`: the events of a business key (`biz_no`) or the event of an id, newest first,
//! every column shown.
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use sea_orm_outbox::event_record::Model;
use sea_orm_outbox::{ops, EventStatus};
use serde::Deserialize;

use super::action_buttons;
use crate::layout::{self, long_text, time, Frame, Nav};
use crate::state;
use crate::target::Target;

/// Most events a search shows.
const RESULTS: u64 = 50;
/// Characters of a payload shown.
const PAYLOAD_CHARS: usize = 4000;

/// The search box's field.
#[derive(Debug, Deserialize)]
pub(crate) struct Search {
    #[serde(default)]
    q: String,
}

/// `GET /events?q=`.
pub(crate) async fn events(
    State(state): State<state::State>,
    Query(search): Query<Search>,
) -> Response {
    let writable = state.writable();
    let query = search.q.trim();
    let found = if query.is_empty() {
        None
    } else {
        match ops::find_events(&state.outbox, &state.db, query, RESULTS).await {
            Ok(found) => Some(found),
            Err(e) => return layout::failure(writable, &e),
        }
    };
    let body = html! {
        h1 { "Search events" }
        form method="get" action="events" {
            input type="search" name="q" value=(query) placeholder="biz_no or event id" autofocus;
            " " button type="submit" { "Search" }
        }
        @if let Some(found) = &found {
            @if found.is_empty() {
                p #no-events {
                    "No event has the key or id " code { (query) } ". "
                    span.muted { "Delivered events are deleted unless the relays keep them (completion update)." }
                }
            } @else {
                p.muted #found data-n=(found.len()) {
                    (found.len()) " event(s), newest first"
                    @if found.len() as u64 == RESULTS { " (the newest " (RESULTS) " only)" } "."
                }
                @for event in found { (event_row(event, writable)) }
            }
        }
    };
    layout::page(Frame::new("Search", Nav::Events, writable), body).into_response()
}

/// Every column of `e`, text escaped, the payload cut short.
fn event_row(e: &Model, writable: bool) -> Markup {
    let or_none = |v: Option<&str>| v.map(str::to_owned);
    html! {
        h2 { "Event " (e.id) " · " code { (e.biz_no) } " · " span.status { (e.status.as_str()) } }
        @if writable && e.status == EventStatus::Fail {
            p { (action_buttons(&Target::Event(e.id), "")) }
        }
        table.kv.event data-id=(e.id) {
            tr { th { "id" } td { (e.id) } }
            tr { th { "biz_no" } td { code { (e.biz_no) } } }
            tr { th { "event_type" } td { code { (e.event_type) } } }
            tr { th { "status" } td.status { (e.status.as_str()) } }
            tr { th { "retry_count" } td.retry-count { (e.retry_count) } }
            tr { th { "create_time" } td { (time(&e.create_time)) } }
            tr { th { "update_time" } td { (time(&e.update_time)) } }
            tr { th { "next_retry_time" } td { (time(&e.next_retry_time)) } }
            tr { th { "claim_owner" } td { (optional(or_none(e.claim_owner.as_deref()))) } }
            tr { th { "claimed_at" } td { (optional(e.claimed_at.as_ref().map(time))) } }
            tr { th { "last_error" } td.last-error {
                @match &e.last_error { Some(text) => { (long_text(text, 4000)) } None => { (optional(None)) } }
            } }
            tr { th { "headers" } td {
                @match &e.headers { Some(text) => { (long_text(text, 4000)) } None => { (optional(None)) } }
            } }
            tr { th { "payload" } td.payload { (long_text(&e.payload, PAYLOAD_CHARS)) } }
        }
    }
}

/// A column's value, or a muted `NULL`.
fn optional(value: Option<String>) -> Markup {
    match value {
        Some(v) => html! { code { (v) } },
        None => html! { span.muted { "NULL" } },
    }
}
