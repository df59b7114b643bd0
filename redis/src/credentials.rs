//! The password ([`Secret`], never printed), the credential variables, and URLs shown
//! without their password ([`redact_url`]).

/// The environment variable with the ACL user name (optional; Redis's `default` user when
/// unset).
pub const ENV_USERNAME: &str = "REDIS_USERNAME";
/// The environment variable with the password (of the ACL user, or of `requirepass`).
pub const ENV_PASSWORD: &str = "REDIS_PASSWORD";

/// What a redacted secret prints.
pub(crate) const REDACTED: &str = "<redacted>";

pub use sea_orm_outbox::Secret;

/// `url` as it may be shown: the password of its user part and the `pass` / `password` query
/// parameters (of `redis+unix://` URLs) replaced by `redacted`. A text that does not parse as a
/// URL is not shown at all (it may hold a password in a form the parser did not recognise).
///
/// ```
/// use sea_orm_outbox_redis::redact_url;
/// assert_eq!(redact_url("redis://app:s3cret@cache:6379/0"), "redis://app:redacted@cache:6379/0");
/// assert_eq!(redact_url("redis://cache:6379"), "redis://cache:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<a URL that does not parse; not shown>".to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some("redacted")).is_err() {
        return "<a URL that holds a password; not shown>".to_owned();
    }
    let secret_query = parsed
        .query_pairs()
        .any(|(k, _)| k == "pass" || k == "password");
    if secret_query {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "pass" || k == "password" {
                    "redacted".to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// `text` with every occurrence of `secret` replaced by `<redacted>` (nothing replaced for an
/// empty secret): a last guard on error texts that came from the client.
pub(crate) fn scrub(text: &str, secret: Option<&Secret>) -> String {
    match secret {
        Some(p) if !p.is_empty() => text.replace(p.expose(), REDACTED),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let p = Secret::from("very-secret-value");
        for text in [format!("{p:?}"), p.to_string()] {
            assert!(!text.contains("very-secret-value"), "{text}");
        }
        assert_eq!(p.expose(), "very-secret-value");
    }

    #[test]
    fn urls_lose_their_password() {
        for (url, shown) in [
            ("redis://u:pw-123@h:6379", "redis://u:redacted@h:6379"),
            ("redis://:pw-123@h", "redis://:redacted@h"),
            ("rediss://h:6380/2", "rediss://h:6380/2"),
            (
                "redis+unix:///run/redis.sock?db=1&pass=pw-123",
                "redis+unix:///run/redis.sock?db=1&pass=redacted",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        assert!(!redact_url("not a url pw-123").contains("pw-123"));
        assert_eq!(
            scrub("auth pw-123 failed", Some(&"pw-123".into())),
            "auth <redacted> failed"
        );
        assert_eq!(scrub("x", Some(&"".into())), "x");
    }
}
