//! `/dead`: the dead letters grouped by the fingerprint of their error, with retry and discard
//! for a group and for all; `/dead?scope=group&group=<key>` adds the events of one group, each
//! with its own buttons and its own error.
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use sea_orm_outbox::event_record::Model;
use sea_orm_outbox::ops::{self, DeadLetterGroup};

use super::action_buttons;
use crate::layout::{self, clip, count, time, Frame, Nav};
use crate::state;
use crate::target::{Fields, Target};

/// Most groups listed.
const GROUPS_SHOWN: usize = 200;
/// Most events of a group listed.
const EVENTS_SHOWN: u64 = 100;
/// Characters of an error shown in the groups' table (the whole text is in its tooltip and
/// on the group's own list).
const ERROR_CHARS: usize = 160;

/// `GET /dead`.
pub(crate) async fn dead(
    State(state): State<state::State>,
    Query(fields): Query<Fields>,
) -> Response {
    let writable = state.writable();
    let selected = match fields.target() {
        Ok(Some(Target::Group(fingerprint))) => Some(fingerprint),
        Ok(_) => None,
        Err(why) => {
            let body = html! { p { (why) } };
            return layout::message(
                StatusCode::BAD_REQUEST,
                "Not a dead-letter group",
                writable,
                body,
            );
        }
    };
    let groups = match ops::dead_letter_groups(&state.outbox, &state.db).await {
        Ok(groups) => groups,
        Err(e) => return layout::failure(writable, &e),
    };
    let events = match &selected {
        Some(fingerprint) => {
            let read = ops::dead_letters_in_group(
                &state.outbox,
                &state.db,
                fingerprint.as_deref(),
                EVENTS_SHOWN,
            );
            match read.await {
                Ok(events) => Some(events),
                Err(e) => return layout::failure(writable, &e),
            }
        }
        None => None,
    };
    let body = html! {
        (group_table(&groups, writable))
        @if let (Some(fingerprint), Some(events)) = (&selected, &events) {
            @let total = groups.iter().find(|g| &g.fingerprint == fingerprint).map_or(0, |g| g.count);
            (group_events(fingerprint.as_deref(), events, total, writable))
        }
    };
    layout::page(Frame::new("Dead letters", Nav::Dead, writable), body).into_response()
}

/// The groups, largest first, with their buttons and the buttons for all.
fn group_table(groups: &[DeadLetterGroup], writable: bool) -> Markup {
    let total: u64 = groups.iter().map(|g| g.count).sum();
    html! {
        h1 { "Dead letters " span.muted { "by error fingerprint" } }
        @if groups.is_empty() {
            p #no-dead-letters { "No dead letters: every event was delivered or is still being tried." }
        } @else {
            p {
                strong #dead-total data-n=(total) { (count(total)) } " dead letters in "
                (count(groups.len() as u64)) @if groups.len() == 1 { " group. " } @else { " groups. " }
                span.muted { "Errors that differ only in ids, numbers or quoted values form one group. Retrying sends an event again with a fresh retry budget; discarding deletes it." }
            }
            @if writable {
                p { (action_buttons(&Target::All, " all")) }
            }
            table #groups {
                tr {
                    th { "Error fingerprint" } th { "Kind" } th { "Dead letters" } th { "Oldest event" }
                    th { "Last failure" } th {}
                }
                @for group in groups.iter().take(GROUPS_SHOWN) {
                    @let target = Target::Group(group.fingerprint.clone());
                    tr.group data-count=(group.count) data-errors=(group.errors) {
                        td { (error_cell(group)) }
                        td { (group.kind.map_or("–", |k| k.as_str())) }
                        td.num { (count(group.count)) }
                        td.num { a href={ "events?q=" (group.oldest_id) } { (group.oldest_id) } }
                        td.time { (time(&group.last_update)) }
                        td {
                            span.actions {
                                a.button href={ "dead?" (Fields::of(&target, None).query()) } { "Events" }
                                @if writable { (action_buttons(&target, "")) }
                            }
                        }
                    }
                }
            }
            @if groups.len() > GROUPS_SHOWN {
                p.muted { (count((groups.len() - GROUPS_SHOWN) as u64)) " smaller groups are not shown." }
            }
        }
    }
}

/// A group's fingerprint in the groups' table, cut short; its most common error in full (and
/// how many distinct errors it folds) in the tooltip.
fn error_cell(group: &DeadLetterGroup) -> Markup {
    let (Some(fingerprint), Some(error)) = (&group.fingerprint, &group.error) else {
        return html! { em.muted { "no error recorded" } };
    };
    let (shown, cut) = clip(fingerprint, ERROR_CHARS);
    let (tooltip, _) = clip(error, 2000);
    html! {
        code title=(tooltip) { (shown) @if cut { "…" } }
        @if group.errors > 1 {
            " " span.muted { "(" (count(group.errors)) " distinct errors)" }
        }
    }
}

/// The events of the group of `fingerprint` (at most [`EVENTS_SHOWN`] of `total`), oldest
/// first, each with its own error.
fn group_events(fingerprint: Option<&str>, events: &[Model], total: u64, writable: bool) -> Markup {
    html! {
        h2 #group-events { "Dead letters of this fingerprint" }
        @match fingerprint {
            Some(text) => { (layout::long_text(text, 4000)) }
            None => { p { em.muted { "no error recorded" } } }
        }
        @if events.is_empty() {
            p { "None left: they were retried or discarded." }
        } @else {
            p.muted { "The oldest " (count(events.len() as u64)) " of " (count(total)) "." }
            table #events {
                tr {
                    th { "Id" } th { "biz_no" } th { "Type" } th { "Retries" } th { "Created" }
                    th { "Last failure" } th { "Error" } th {}
                }
                @for e in events {
                    tr.event data-id=(e.id) {
                        td.num { a href={ "events?q=" (e.id) } { (e.id) } }
                        td { a href={ "events?" (search_query(&e.biz_no)) } { code { (e.biz_no) } } }
                        td { code { (e.event_type) } }
                        td.num { (e.retry_count) }
                        td.time { (time(&e.create_time)) }
                        td.time { (time(&e.update_time)) }
                        td { @if let Some(error) = &e.last_error {
                            @let (shown, cut) = clip(error, ERROR_CHARS);
                            code.error title=(clip(error, 2000).0) { (shown) @if cut { "…" } }
                        } }
                        td { @if writable { (action_buttons(&Target::Event(e.id), "")) } }
                    }
                }
            }
        }
    }
}

/// `q=<text>` for a link to the search.
fn search_query(text: &str) -> String {
    serde_urlencoded::to_string([("q", text)]).unwrap_or_default()
}
