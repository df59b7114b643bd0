//! [`Credentials`]: the access key and secret key a RocketMQ broker with authentication
//! (ACL) requires; the secret is a [`Secret`], which never shows it.
use std::fmt;
use std::sync::Arc;

use rocketmq_client_rust::{AclClientRPCHook, SessionCredentials};

use sea_orm_outbox::OutboxError;

pub use sea_orm_outbox::Secret;

/// The environment variable with the RocketMQ access key (the broker's user name).
pub const ENV_ACCESS_KEY: &str = "ROCKETMQ_ACCESS_KEY";
/// The environment variable with the RocketMQ secret key (the user's password).
pub const ENV_SECRET_KEY: &str = "ROCKETMQ_SECRET_KEY";

/// An access key and its secret key for a RocketMQ broker with authentication enabled
/// (`authenticationEnabled = true`; RocketMQ ACL). Every request to a broker is then signed
/// (HmacSHA1 over the request's fields and body, as the Java client does); the name server is
/// not asked for credentials.
///
/// `Debug` shows the access key and `<redacted>` for the secret.
///
/// ```
/// use sea_orm_outbox_rocketmq::Credentials;
/// let c = Credentials::new("order-service", "s3cret");
/// assert_eq!(c.access_key(), "order-service");
/// assert!(!format!("{c:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key: String,
    secret_key: Secret,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &self.secret_key)
            .finish()
    }
}

impl Credentials {
    /// Credentials of `access_key` with `secret_key` (checked by [`Credentials::validate`]).
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<Secret>) -> Self {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }
    }

    /// Credentials from an access key and a secret key that may each be missing, as read from
    /// `ROCKETMQ_ACCESS_KEY` and `ROCKETMQ_SECRET_KEY` (or the tool's flags): both give
    /// credentials, neither gives `None`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when only one of the two is given (the message names the
    /// missing one and never shows the secret), or the pair fails [`Credentials::validate`].
    pub fn from_parts(
        access_key: Option<String>,
        secret_key: Option<Secret>,
    ) -> Result<Option<Self>, OutboxError> {
        match (access_key, secret_key) {
            (None, None) => Ok(None),
            (Some(ak), Some(sk)) => {
                let c = Credentials::new(ak, sk);
                c.validate()?;
                Ok(Some(c))
            }
            (Some(ak), None) => Err(OutboxError::InvalidConfig(format!(
                "RocketMQ access key `{ak}` is set ({ENV_ACCESS_KEY}) but the secret key is not: \
                 set {ENV_SECRET_KEY} too, or neither"
            ))),
            (None, Some(_)) => Err(OutboxError::InvalidConfig(format!(
                "RocketMQ secret key is set ({ENV_SECRET_KEY}) but the access key is not: set \
                 {ENV_ACCESS_KEY} too, or neither"
            ))),
        }
    }

    /// The access key (the broker's user name); it may be shown.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret key, redacted in `Debug` and `Display`.
    pub fn secret_key(&self) -> &Secret {
        &self.secret_key
    }

    /// Checks the pair.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when the access key is empty or holds whitespace or
    /// control characters (the value is not shown: it may be a misplaced secret), or the secret
    /// key is empty or holds control characters (the message shows the access key, never the
    /// secret).
    pub fn validate(&self) -> Result<(), OutboxError> {
        let ak = &self.access_key;
        if ak.is_empty() || ak.chars().any(|c| c.is_whitespace() || c.is_control()) {
            // Not shown: an access key with spaces may well be a secret key set in its place.
            return Err(OutboxError::InvalidConfig(
                "RocketMQ access key is invalid (value not shown): it must not be empty or hold \
                 spaces or control characters; is ROCKETMQ_SECRET_KEY's value in \
                 ROCKETMQ_ACCESS_KEY?"
                    .into(),
            ));
        }
        if self.secret_key.is_empty() || self.secret_key.expose().chars().any(char::is_control) {
            return Err(OutboxError::InvalidConfig(format!(
                "RocketMQ secret key of access key `{ak}` is invalid: it must not be empty or \
                 hold control characters"
            )));
        }
        Ok(())
    }

    /// The client's signing hook for these credentials.
    pub(super) fn rpc_hook(&self) -> Arc<AclClientRPCHook> {
        Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(
            self.access_key.as_str(),
            self.secret_key.expose(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_never_shows() {
        let c = Credentials::new("ak", "very-secret-value");
        for text in [
            format!("{c:?}"),
            format!("{:?}", c.secret_key()),
            c.secret_key().to_string(),
        ] {
            assert!(!text.contains("very-secret-value"), "{text}");
        }
        assert!(format!("{c:?}").contains("ak"));
        assert_eq!(c.secret_key().expose(), "very-secret-value");
    }

    #[test]
    fn both_or_neither() {
        assert_eq!(Credentials::from_parts(None, None).expect("none"), None);
        let both = Credentials::from_parts(Some("ak".into()), Some("sk-123".into()))
            .expect("both")
            .expect("some");
        assert_eq!(both.access_key(), "ak");
        let err = Credentials::from_parts(Some("ak".into()), None).expect_err("no secret");
        assert!(err.to_string().contains(ENV_SECRET_KEY), "{err}");
        let err = Credentials::from_parts(None, Some("sk-123".into())).expect_err("no access key");
        assert!(
            err.to_string().contains(ENV_ACCESS_KEY) && !err.to_string().contains("sk-123"),
            "{err}"
        );
        for (ak, sk) in [
            ("", "sec-x1"),
            ("a b", "sec-x1"),
            ("ak", ""),
            ("ak", "sec\nx1"),
        ] {
            let err =
                Credentials::from_parts(Some(ak.into()), Some(sk.into())).expect_err("invalid");
            assert!(matches!(err, OutboxError::InvalidConfig(_)), "{err}");
            if !sk.is_empty() {
                assert!(!err.to_string().contains(sk), "{err}");
            }
        }
        // A secret set as the access key by mistake (it has a space) is not echoed.
        let err = Credentials::from_parts(Some("pass phrase 42".into()), Some("x".into()))
            .expect_err("spaces");
        assert!(!err.to_string().contains("phrase"), "{err}");
    }
}
