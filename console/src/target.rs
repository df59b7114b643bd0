//! What an action works on ([`Target`]) and how it travels in links and forms ([`Fields`]).
//!
//! A dead-letter group is named by the fingerprint of its errors
//! ([`sea_orm_outbox::ops::fingerprint`]). The text goes into links and forms as base64url of
//! its bytes ([`group_key`]), so that no browser changes it on the way.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The dead letters an action retries or discards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Every dead letter.
    All,
    /// The dead letters whose error has this fingerprint (`None`: those without an error).
    Group(Option<String>),
    /// The dead letter of this id.
    Event(i64),
}

/// Retry or discard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Retry,
    Discard,
}

impl Action {
    /// `retry` or `discard`: the path the form posts to and the log's name of the action.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Discard => "discard",
        }
    }

    /// `Retry` or `Discard`, for buttons and headings.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Action::Retry => "Retry",
            Action::Discard => "Discard",
        }
    }
}

/// The fields of a confirmation link and of an action's form, all text as they arrive.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct Fields {
    /// `retry` or `discard` (links to the confirmation page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<String>,
    /// `all`, `group` or `event`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<String>,
    /// A group's key ([`group_key`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    /// An event's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    /// The token typed into an action's form; never serialized.
    #[serde(skip_serializing)]
    pub(crate) token: Option<String>,
}

impl Fields {
    /// The fields naming `target` (and `action`, for a link to its confirmation).
    pub(crate) fn of(target: &Target, action: Option<Action>) -> Fields {
        let (scope, group, id) = match target {
            Target::All => ("all", None, None),
            Target::Group(error) => ("group", Some(group_key(error.as_deref())), None),
            Target::Event(id) => ("event", None, Some(id.to_string())),
        };
        Fields {
            action: action.map(|a| a.name().to_owned()),
            scope: Some(scope.to_owned()),
            group,
            id,
            token: None,
        }
    }

    /// The fields as a query string (`scope=group&group=e...`).
    pub(crate) fn query(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// The target the fields name; `Ok(None)` when they name none (no `scope`).
    ///
    /// # Errors
    /// What is wrong with the fields, for a 400 page.
    pub(crate) fn target(&self) -> Result<Option<Target>, String> {
        match self.scope.as_deref() {
            None | Some("") => Ok(None),
            Some("all") => Ok(Some(Target::All)),
            Some("group") => {
                let key = self.group.as_deref().ok_or("a group needs its key")?;
                Ok(Some(Target::Group(group_error(key)?)))
            }
            Some("event") => {
                let id = self.id.as_deref().ok_or("an event needs its id")?;
                let id = id
                    .trim()
                    .parse()
                    .map_err(|_| format!("not an event id: {id:?}"))?;
                Ok(Some(Target::Event(id)))
            }
            Some(other) => Err(format!("unknown scope {other:?}")),
        }
    }

    /// The action the fields name.
    ///
    /// # Errors
    /// What is wrong, for a 400 page.
    pub(crate) fn action(&self) -> Result<Action, String> {
        match self.action.as_deref() {
            Some("retry") => Ok(Action::Retry),
            Some("discard") => Ok(Action::Discard),
            other => Err(format!("unknown action {other:?}")),
        }
    }
}

/// The key of the group of fingerprint `error` in links and forms: `n` for no error, else `e`
/// and the fingerprint's bytes in base64url.
pub(crate) fn group_key(error: Option<&str>) -> String {
    match error {
        None => "n".to_owned(),
        Some(error) => format!("e{}", URL_SAFE_NO_PAD.encode(error)),
    }
}

/// The error of a [`group_key`].
fn group_error(key: &str) -> Result<Option<String>, String> {
    let bad = || "not a group key".to_owned();
    match key.split_at_checked(1) {
        Some(("n", "")) => Ok(None),
        Some(("e", encoded)) => {
            let bytes = URL_SAFE_NO_PAD.decode(encoded).map_err(|_| bad())?;
            String::from_utf8(bytes).map(Some).map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_survive_a_round_trip() {
        for target in [
            Target::All,
            Target::Group(None),
            Target::Group(Some(String::new())),
            Target::Group(Some(
                "broker down:\r\n  caused by: <timeout> & \"more\" ✓".into(),
            )),
            Target::Event(-3),
        ] {
            let query = Fields::of(&target, Some(Action::Discard)).query();
            let back: Fields = serde_urlencoded::from_str(&query).expect("parse");
            assert_eq!(back.target(), Ok(Some(target.clone())), "{query}");
            assert_eq!(back.action(), Ok(Action::Discard));
        }
    }

    #[test]
    fn bad_fields_are_refused() {
        let fields = |q: &str| serde_urlencoded::from_str::<Fields>(q).expect("parse");
        assert_eq!(fields("").target(), Ok(None));
        for q in [
            "scope=group",
            "scope=group&group=x",
            "scope=group&group=e%21",
            "scope=event",
            "scope=event&id=a",
            "scope=x",
        ] {
            assert!(fields(q).target().is_err(), "{q}");
        }
        assert!(fields("action=drop").action().is_err());
        let with_token = Fields {
            token: Some("s3cret".into()),
            ..Fields::of(&Target::All, None)
        };
        assert!(
            !with_token.query().contains("s3cret"),
            "the token never goes into a link"
        );
    }
}
