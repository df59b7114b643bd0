//! The actions: a confirmation page for each (`GET /confirm`), whose form posts the action with
//! the token (`POST /retry`, `POST /discard`). Without a configured token, or with a wrong
//! one, an action is refused with 403 and changes nothing. The token typed into the form is
//! also what defends against cross-site requests: another site's page cannot know it.
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Form;
use maud::{html, Markup};
use sea_orm_outbox::ops::{self, DeadLetterOutcome};
use sea_orm_outbox::{EventStatus, OutboxError};

use crate::layout::{self, clip, count, Frame, Nav};
use crate::state::{self, Shared};
use crate::target::{group_key, Action, Fields, Target};

/// Characters of an error quoted in a heading.
const HEADING_ERROR_CHARS: usize = 120;

/// `GET /confirm?action=..&scope=..`: what the action would change now, and its form.
pub(crate) async fn confirm(
    State(state): State<state::State>,
    Query(fields): Query<Fields>,
) -> Response {
    if !state.writable() {
        return refused(&state, Refusal::ReadOnly);
    }
    let (action, target) = match parse(&fields) {
        Ok(parsed) => parsed,
        Err(why) => return bad_request(&state, &why),
    };
    let n = match dead_letters_in(&state, &target).await {
        Ok(n) => n,
        Err(e) => return layout::failure(true, &e),
    };
    let heading = format!("{} {}?", action.verb(), describe(&target, n));
    let body = html! {
        h1 #confirm-heading { (heading) }
        div.box {
            @if let Target::Group(Some(fingerprint)) = &target {
                p { "The errors of this fingerprint:" }
                (layout::long_text(fingerprint, 4000))
            }
            p { (effect(action)) }
            @if n == 0 {
                p #nothing { "Nothing to do: no dead letter matches now (retried or discarded meanwhile?)." }
                p { a href="dead" { "Back to the dead letters" } }
            } @else {
                form method="post" action=(action.name()) {
                    input type="hidden" name="scope" value=(scope(&target));
                    @match &target {
                        Target::Group(error) => { input type="hidden" name="group" value=(group_key(error.as_deref())); }
                        Target::Event(id) => { input type="hidden" name="id" value=(id); }
                        Target::All => {}
                    }
                    p {
                        label { "Console token " input type="password" name="token" autocomplete="off"; }
                    }
                    p.actions {
                        button type="submit" class=(if action == Action::Retry { "primary" } else { "danger" }) {
                            (action.verb()) " " (count(n))
                        }
                        a.button href="dead" { "Cancel" }
                    }
                }
            }
        }
    };
    layout::page(Frame::new(&heading, Nav::None, true), body).into_response()
}

/// `POST /retry`.
pub(crate) async fn retry(
    State(state): State<state::State>,
    Form(fields): Form<Fields>,
) -> Response {
    act(&state, Action::Retry, &fields).await
}

/// `POST /discard`.
pub(crate) async fn discard(
    State(state): State<state::State>,
    Form(fields): Form<Fields>,
) -> Response {
    act(&state, Action::Discard, &fields).await
}

/// Checks the token, runs `action` on the form's target, logs it and shows how many changed.
async fn act(state: &Shared, action: Action, fields: &Fields) -> Response {
    let Some(token) = &state.token else {
        tracing::warn!(
            action = action.name(),
            "console: action refused: the console is read-only"
        );
        return refused(state, Refusal::ReadOnly);
    };
    if !token.matches(fields.token.as_deref().unwrap_or_default()) {
        tracing::warn!(
            action = action.name(),
            "console: action refused: wrong token"
        );
        return refused(state, Refusal::WrongToken);
    }
    let target = match fields.target() {
        Ok(Some(target)) => target,
        Ok(None) => return bad_request(state, "the form names no dead letters"),
        Err(why) => return bad_request(state, &why),
    };
    let n = match run(state, action, &target).await {
        Ok(n) => n,
        Err(e) => return layout::failure(true, &e),
    };
    let (scope, fingerprint, id) = match &target {
        Target::All => ("all", None, None),
        Target::Group(fingerprint) => (
            "group",
            Some(fingerprint.as_deref().map_or("(none)", |e| clip(e, 200).0)),
            None,
        ),
        Target::Event(id) => ("event", None, Some(*id)),
    };
    tracing::info!(
        action = action.name(),
        scope,
        fingerprint,
        id,
        count = n,
        "console: dead letters {}",
        past(action)
    );
    let title = format!("{} {}", capitalized(past(action)), describe(&target, n));
    let body = html! {
        p #outcome data-n=(n) { (title) "." }
        @if action == Action::Retry && n > 0 {
            p.muted { "They are WAIT again, due now, with a fresh retry budget; a relay sends them at its next round." }
        }
        p { a href="dead" { "Back to the dead letters" } " · " a href="./" { "Overview" } }
    };
    layout::message(StatusCode::OK, &title, true, body)
}

/// Runs `action` on `target`: how many dead letters it retried or deleted.
async fn run(state: &Shared, action: Action, target: &Target) -> Result<u64, OutboxError> {
    let (outbox, db) = (&state.outbox, &state.db);
    let one = |outcome: DeadLetterOutcome| u64::from(outcome == DeadLetterOutcome::Applied);
    match (action, target) {
        (Action::Retry, Target::All) => ops::retry_all_dead(outbox, db).await,
        (Action::Discard, Target::All) => ops::discard_all_dead(outbox, db).await,
        (Action::Retry, Target::Group(e)) => ops::retry_dead_group(outbox, db, e.as_deref()).await,
        (Action::Discard, Target::Group(e)) => {
            ops::discard_dead_group(outbox, db, e.as_deref()).await
        }
        (Action::Retry, Target::Event(id)) => ops::retry_dead(outbox, db, *id).await.map(one),
        (Action::Discard, Target::Event(id)) => ops::discard_dead(outbox, db, *id).await.map(one),
    }
}

/// How many dead letters `target` names now.
async fn dead_letters_in(state: &Shared, target: &Target) -> Result<u64, OutboxError> {
    let (outbox, db) = (&state.outbox, &state.db);
    match target {
        Target::Event(id) => {
            let found = ops::find_events(outbox, db, &id.to_string(), 100).await?;
            Ok(u64::from(
                found
                    .iter()
                    .any(|e| e.id == *id && e.status == EventStatus::Fail),
            ))
        }
        Target::All | Target::Group(_) => {
            let groups = ops::dead_letter_groups(outbox, db).await?;
            Ok(groups
                .iter()
                .filter(|g| match target {
                    Target::Group(fingerprint) => &g.fingerprint == fingerprint,
                    _ => true,
                })
                .map(|g| g.count)
                .sum())
        }
    }
}

/// `120 dead letters with error “…”`, `the dead letter 42`, `all 3 dead letters`.
fn describe(target: &Target, n: u64) -> String {
    let letters = if n == 1 {
        "dead letter"
    } else {
        "dead letters"
    };
    match target {
        Target::All => format!("all {} {letters}", count(n)),
        Target::Group(None) => format!("{} {letters} without an error", count(n)),
        Target::Group(Some(fingerprint)) => {
            let (shown, cut) = clip(fingerprint, HEADING_ERROR_CHARS);
            let more = if cut { "…" } else { "" };
            format!("{} {letters} with error “{shown}{more}”", count(n))
        }
        Target::Event(id) => format!("{} {letters} of id {id}", count(n)),
    }
}

/// What `action` does to a dead letter.
fn effect(action: Action) -> Markup {
    match action {
        Action::Retry => html! {
            "Each goes back to WAIT, due now, with retry_count 0 and its lease cleared: the next relay round sends it again with the full retry budget."
        },
        Action::Discard => html! {
            strong { "Each is deleted for good." } " Its message is never sent."
        },
    }
}

fn scope(target: &Target) -> &'static str {
    match target {
        Target::All => "all",
        Target::Group(_) => "group",
        Target::Event(_) => "event",
    }
}

fn past(action: Action) -> &'static str {
    match action {
        Action::Retry => "retried",
        Action::Discard => "discarded",
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The action and the target of a confirmation link.
fn parse(fields: &Fields) -> Result<(Action, Target), String> {
    let action = fields.action()?;
    let target = fields.target()?.ok_or("the link names no dead letters")?;
    Ok((action, target))
}

/// Why an action was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    ReadOnly,
    WrongToken,
}

/// The 403 page of `why`.
fn refused(state: &Shared, why: Refusal) -> Response {
    let body = match why {
        Refusal::ReadOnly => html! {
            p { "This console is read-only: it was started without a token, so it retries and discards nothing." }
            p.muted { "Start it with a token (" code { "outbox console --token" } ", " code { "OUTBOX_CONSOLE_TOKEN" } ", or " code { "Console::token" } ") to allow actions." }
        },
        Refusal::WrongToken => html! {
            p { "The token is wrong. Nothing was changed." }
            p { a href="dead" { "Back to the dead letters" } }
        },
    };
    layout::message(StatusCode::FORBIDDEN, "Refused", state.writable(), body)
}

/// The 400 page of a malformed link or form.
fn bad_request(state: &Shared, why: &str) -> Response {
    let body = html! { p { (why) } p { a href="dead" { "Back to the dead letters" } } };
    layout::message(
        StatusCode::BAD_REQUEST,
        "Not understood",
        state.writable(),
        body,
    )
}
