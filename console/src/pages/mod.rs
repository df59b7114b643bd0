//! The pages that only read: the overview, the dead letters by error, the search, the health.
mod dead;
mod events;
mod health;
mod overview;

pub(crate) use dead::dead;
pub(crate) use events::events;
pub(crate) use health::health;
pub(crate) use overview::overview;

use maud::{html, Markup};

use crate::target::{Action, Fields, Target};

/// The retry and discard buttons of `target`: links to their confirmation pages (the action
/// itself is the confirmation form's POST).
fn action_buttons(target: &Target, label: &str) -> Markup {
    let link = |action: Action| format!("confirm?{}", Fields::of(target, Some(action)).query());
    html! {
        span.actions {
            a.button href=(link(Action::Retry)) { "Retry" (label) }
            a.button.danger href=(link(Action::Discard)) { "Discard" (label) }
        }
    }
}
