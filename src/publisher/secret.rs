//! [`Secret`]: a password or key that never shows in logs, errors or output.
use std::fmt;

/// What a secret prints as.
const REDACTED: &str = "<redacted>";

/// A secret (a broker password, a secret key): `Debug` and `Display` print `<redacted>`, never
/// the value. Read it with [`Secret::expose`], only to hand it to a client. Every publisher
/// crate takes its passwords and keys as this type.
///
/// ```
/// use sea_orm_outbox::Secret;
/// let secret = Secret::new("s3cret");
/// assert_eq!(format!("{secret} {secret:?}"), "<redacted> <redacted>");
/// assert_eq!(secret.expose(), "s3cret");
/// ```
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps `secret`.
    pub fn new(secret: impl Into<String>) -> Self {
        Secret(secret.into())
    }

    /// The secret itself. Never log or print it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Secret(secret)
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Self {
        Secret(secret.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}
