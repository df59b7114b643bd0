//! The login of the publisher: [`Credentials`] (a user name and a [`Secret`] that never
//! prints) and [`redact_url`], which hides the password of an AMQP URL.
use std::fmt;

use sea_orm_outbox::OutboxError;

/// What a redacted secret prints as.
const REDACTED: &str = "<redacted>";

/// The environment variable with the user name; it replaces the URL's user name.
pub const ENV_USERNAME: &str = "RABBITMQ_USERNAME";
/// The environment variable with the password; it replaces the URL's password.
pub const ENV_PASSWORD: &str = "RABBITMQ_PASSWORD";

pub use sea_orm_outbox::Secret;

/// A user name and password that replace those of the URL (SASL `PLAIN`). `Debug` shows the
/// user name and `<redacted>` for the password.
///
/// ```
/// use sea_orm_outbox_rabbitmq::Credentials;
/// let c = Credentials::new("orders", "s3cret");
/// assert_eq!(c.username(), "orders");
/// assert!(!format!("{c:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    username: String,
    password: Secret,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

impl Credentials {
    /// Credentials of `username` with `password`.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }

    /// Credentials from a user name and a password that may each be missing, as read from
    /// `RABBITMQ_USERNAME` and `RABBITMQ_PASSWORD`: both give credentials, neither gives `None`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when only one of the two is given (the message names the
    /// missing variable and never shows the password).
    pub fn from_parts(
        username: Option<String>,
        password: Option<Secret>,
    ) -> Result<Option<Self>, OutboxError> {
        match (username, password) {
            (None, None) => Ok(None),
            (Some(user), Some(password)) => Ok(Some(Credentials::new(user, password))),
            (Some(user), None) => Err(OutboxError::InvalidConfig(format!(
                "RabbitMQ user `{user}` is set ({ENV_USERNAME}) but the password is not: set \
                 {ENV_PASSWORD} too, or neither (the URL's login is used then)"
            ))),
            (None, Some(_)) => Err(OutboxError::InvalidConfig(format!(
                "RabbitMQ password is set ({ENV_PASSWORD}) but the user is not: set \
                 {ENV_USERNAME} too, or neither (the URL's login is used then)"
            ))),
        }
    }

    /// The user name; it may be shown.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password, redacted in `Debug` and `Display`.
    pub fn password(&self) -> &Secret {
        &self.password
    }
}

/// `url` with the password of its user info (`scheme://user:password@host`) replaced by
/// `<redacted>`; a URL without one is returned as it is. Used wherever a URL is shown.
///
/// ```
/// use sea_orm_outbox_rabbitmq::redact_url;
/// assert_eq!(
///     redact_url("amqps://orders:s3cret@mq.example:5671/prod"),
///     "amqps://orders:<redacted>@mq.example:5671/prod"
/// );
/// assert_eq!(redact_url("amqp://127.0.0.1:5672"), "amqp://127.0.0.1:5672");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        // Not a URL: it may be anything, a password among it.
        return REDACTED.to_owned();
    };
    let rest = &url[scheme_end..];
    // The last `@` of the whole URL, not of the authority the parser would see: a password
    // written without percent-encoding may hold `/`, `?` or `#`, which would end the authority
    // early and leave the password in the text. Redacting too much is the safe side.
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    if user.len() == userinfo.len() {
        return url.to_owned();
    }
    format!(
        "{}{user}:{REDACTED}{}",
        &url[..scheme_end],
        &url[scheme_end + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let c = Credentials::new("orders", "very-secret-value");
        for text in [
            format!("{c:?}"),
            format!("{:?}", c.password()),
            c.password().to_string(),
        ] {
            assert!(!text.contains("very-secret-value"), "{text}");
        }
        assert!(format!("{c:?}").contains("orders"));
        assert_eq!(c.password().expose(), "very-secret-value");
    }

    #[test]
    fn both_or_neither() {
        assert_eq!(Credentials::from_parts(None, None).expect("none"), None);
        let both = Credentials::from_parts(Some("u".into()), Some("pw-123".into()))
            .expect("both")
            .expect("some");
        assert_eq!(both.username(), "u");
        let err = Credentials::from_parts(Some("u".into()), None).expect_err("no password");
        assert!(err.to_string().contains(ENV_PASSWORD), "{err}");
        let err = Credentials::from_parts(None, Some("pw-123".into())).expect_err("no user");
        assert!(
            err.to_string().contains(ENV_USERNAME) && !err.to_string().contains("pw-123"),
            "{err}"
        );
    }

    #[test]
    fn urls_lose_their_password() {
        for (url, shown) in [
            (
                "amqp://guest:guest@127.0.0.1:5672/%2f",
                "amqp://guest:<redacted>@127.0.0.1:5672/%2f",
            ),
            (
                "amqps://u:p%40ss@h?heartbeat=10",
                "amqps://u:<redacted>@h?heartbeat=10",
            ),
            ("amqp://u:a@b:c@h/v", "amqp://u:<redacted>@h/v"),
            ("amqp://user@h/v", "amqp://user@h/v"),
            ("amqp://h:5672/v", "amqp://h:5672/v"),
            ("guest:guest@h", "<redacted>"),
            // A password not percent-encoded may hold what would end the authority.
            (
                "amqp://u:pw/secret@h:5672/%2f",
                "amqp://u:<redacted>@h:5672/%2f",
            ),
            ("amqp://u:pw#secret@h", "amqp://u:<redacted>@h"),
            ("amqp://u:pw?secret@h/v", "amqp://u:<redacted>@h/v"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
