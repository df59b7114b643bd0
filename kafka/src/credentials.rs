//! [`Credentials`]: how the publisher logs in to a Kafka cluster (SASL PLAIN, SCRAM-SHA-256 or
//! SCRAM-SHA-512 with a user name and password); the password is a [`Secret`], which never
//! shows.
use std::fmt;
use std::str::FromStr;

use sea_orm_outbox::OutboxError;

/// The environment variable with the SASL user name.
pub const ENV_USERNAME: &str = "KAFKA_USERNAME";
/// The environment variable with the SASL password.
pub const ENV_PASSWORD: &str = "KAFKA_PASSWORD";
/// The environment variable with the SASL mechanism: `PLAIN`, `SCRAM-SHA-256` or
/// `SCRAM-SHA-512` (default [`SaslMechanism::ScramSha512`]).
pub const ENV_SASL_MECHANISM: &str = "KAFKA_SASL_MECHANISM";

pub use sea_orm_outbox::Secret;

/// The SASL mechanism of a user/password login.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: the password travels as it is; use it over TLS only.
    Plain,
    /// `SCRAM-SHA-256`: a challenge-response login; the password never travels.
    ScramSha256,
    /// `SCRAM-SHA-512` (the default): as SCRAM-SHA-256, with SHA-512.
    #[default]
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name as Kafka spells it (`sasl.mechanism`).
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SaslMechanism {
    type Err = OutboxError;

    /// Parses `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (any case).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming `KAFKA_SASL_MECHANISM` for any other name.
    fn from_str(s: &str) -> Result<Self, OutboxError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(OutboxError::InvalidConfig(format!(
                "{ENV_SASL_MECHANISM} must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got `{s}` \
                 (GSSAPI and OAUTHBEARER are not supported)"
            ))),
        }
    }
}

/// A SASL login (`KAFKA_USERNAME` + `KAFKA_PASSWORD`, `KAFKA_SASL_MECHANISM`). `Debug` shows
/// the user name and the mechanism, never the password.
///
/// ```
/// use sea_orm_outbox_kafka::{Credentials, SaslMechanism};
/// let c = Credentials::new("outbox", "s3cret").mechanism(SaslMechanism::ScramSha256);
/// assert!(!format!("{c:?}").contains("s3cret"));
/// assert_eq!(c.describe(), "user `outbox` (SCRAM-SHA-256)");
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Credentials {
    /// The user name; it may be shown.
    pub username: String,
    /// The password.
    pub password: Secret,
    /// The SASL mechanism (default [`SaslMechanism::ScramSha512`]).
    pub mechanism: SaslMechanism,
}

impl Credentials {
    /// A login of `username` with `password` over SCRAM-SHA-512.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Credentials {
            username: username.into(),
            password: password.into(),
            mechanism: SaslMechanism::default(),
        }
    }

    /// The login with mechanism `mechanism`.
    #[must_use]
    pub fn mechanism(mut self, mechanism: SaslMechanism) -> Self {
        self.mechanism = mechanism;
        self
    }

    /// The login the environment gives, from the user name and password variables (each
    /// `None` when unset or empty) and the mechanism (`None`: the default).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when only one of user name and password is set, or the
    /// mechanism is set without them or is not one of [`SaslMechanism`]'s (the message names
    /// the variables, never a value of the password).
    pub fn from_parts(
        username: Option<String>,
        password: Option<Secret>,
        mechanism: Option<&str>,
    ) -> Result<Option<Self>, OutboxError> {
        let mechanism = mechanism.map(SaslMechanism::from_str).transpose()?;
        match (username, password) {
            (Some(user), Some(password)) => Ok(Some(Credentials {
                username: user,
                password,
                mechanism: mechanism.unwrap_or_default(),
            })),
            (None, None) if mechanism.is_some() => Err(OutboxError::InvalidConfig(format!(
                "{ENV_SASL_MECHANISM} is set without {ENV_USERNAME} and {ENV_PASSWORD}"
            ))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(OutboxError::InvalidConfig(format!(
                "{ENV_USERNAME} is set without {ENV_PASSWORD}: set both or neither"
            ))),
            (None, Some(_)) => Err(OutboxError::InvalidConfig(format!(
                "{ENV_PASSWORD} is set without {ENV_USERNAME}: set both or neither"
            ))),
        }
    }

    /// Checks the login.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming `KAFKA_USERNAME` or `KAFKA_PASSWORD` when one is
    /// empty.
    pub fn validate(&self) -> Result<(), OutboxError> {
        if self.username.trim().is_empty() {
            return Err(OutboxError::InvalidConfig(format!(
                "the Kafka user name ({ENV_USERNAME}) is empty"
            )));
        }
        if self.password.expose().is_empty() {
            return Err(OutboxError::InvalidConfig(format!(
                "the Kafka password ({ENV_PASSWORD}) is empty"
            )));
        }
        Ok(())
    }

    /// The login as messages show it: the user name and the mechanism.
    pub fn describe(&self) -> String {
        format!("user `{}` ({})", self.username, self.mechanism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_make_one_login_or_none() {
        assert_eq!(
            Credentials::from_parts(None, None, None).expect("none"),
            None
        );
        let c = Credentials::from_parts(Some("u".into()), Some("p".into()), Some("scram-sha-256"))
            .expect("login")
            .expect("some");
        assert_eq!(c.mechanism, SaslMechanism::ScramSha256);
        assert_eq!(c.username, "u");
        for (user, password, mechanism, name) in [
            (Some("u"), None, None, ENV_PASSWORD),
            (None, Some("p-secret"), None, ENV_USERNAME),
            (None, None, Some("PLAIN"), ENV_SASL_MECHANISM),
            (
                Some("u"),
                Some("p-secret"),
                Some("GSSAPI"),
                ENV_SASL_MECHANISM,
            ),
        ] {
            let err = Credentials::from_parts(
                user.map(str::to_owned),
                password.map(Secret::from),
                mechanism,
            )
            .expect_err(name);
            let text = err.to_string();
            assert!(text.contains(name) && !text.contains("p-secret"), "{text}");
        }
    }

    #[test]
    fn the_password_never_shows() {
        let c = Credentials::new("outbox", "pw-secret").mechanism(SaslMechanism::Plain);
        assert!(!format!("{c:?}").contains("pw-secret"));
        assert_eq!(c.describe(), "user `outbox` (PLAIN)");
        assert!(Credentials::new("outbox", "").validate().is_err());
        assert!(Credentials::new(" ", "p").validate().is_err());
    }
}
