//! [`Credentials`]: how the publisher logs in to a NATS server (user and password, token, nkey
//! seed or a creds file); each secret is a [`Secret`], which never shows.
use std::path::PathBuf;

use async_nats::ConnectOptions;
use sea_orm_outbox::OutboxError;

/// The environment variable with the user name of a user/password login.
pub const ENV_USER: &str = "NATS_USER";
/// The environment variable with the password of a user/password login.
pub const ENV_PASSWORD: &str = "NATS_PASSWORD";
/// The environment variable with an authentication token.
pub const ENV_TOKEN: &str = "NATS_TOKEN";
/// The environment variable with an nkey seed (`SU...`), the secret of an nkey login.
pub const ENV_NKEY_SEED: &str = "NATS_NKEY_SEED";
/// The environment variable with the path of a creds file (a user JWT and its nkey seed, as
/// `nsc` writes it).
pub const ENV_CREDS_FILE: &str = "NATS_CREDS_FILE";

pub use sea_orm_outbox::Secret;

/// How the publisher (and [`crate::NatsConsumer`]) logs in to a server that requires it.
/// `Debug` shows the user name and the creds file's path, never a secret.
///
/// ```
/// use sea_orm_outbox_nats::Credentials;
/// let c = Credentials::user_password("outbox", "s3cret");
/// assert!(!format!("{c:?}").contains("s3cret"));
/// assert_eq!(c.setting(), "NATS_PASSWORD");
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Credentials {
    /// A user and password (`NATS_USER` + `NATS_PASSWORD`).
    UserPassword {
        /// The user name; it may be shown.
        user: String,
        /// The password.
        password: Secret,
    },
    /// An authentication token (`NATS_TOKEN`).
    Token(Secret),
    /// An nkey seed (`NATS_NKEY_SEED`): the client signs the server's nonce with it.
    NkeySeed(Secret),
    /// A creds file (`NATS_CREDS_FILE`): a user JWT and the nkey seed that signs for it.
    CredsFile(PathBuf),
}

impl Credentials {
    /// A user/password login.
    pub fn user_password(user: impl Into<String>, password: impl Into<Secret>) -> Self {
        Credentials::UserPassword {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The credentials the environment gives, as read from [`ENV_USER`] + [`ENV_PASSWORD`],
    /// [`ENV_TOKEN`], [`ENV_NKEY_SEED`] and [`ENV_CREDS_FILE`] (each `None` when unset or
    /// empty): one kind of login, or none.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when only one of user and password is set, or more than
    /// one kind of login is (the message names the variables, never a value).
    pub fn from_parts(
        user: Option<String>,
        password: Option<Secret>,
        token: Option<Secret>,
        nkey_seed: Option<Secret>,
        creds_file: Option<PathBuf>,
    ) -> Result<Option<Self>, OutboxError> {
        let user_password = match (user, password) {
            (None, None) => None,
            (Some(user), Some(password)) => Some(Credentials::UserPassword { user, password }),
            (Some(_), None) => {
                return Err(OutboxError::InvalidConfig(format!(
                    "{ENV_USER} is set but {ENV_PASSWORD} is not: set both, or neither"
                )))
            }
            (None, Some(_)) => {
                return Err(OutboxError::InvalidConfig(format!(
                    "{ENV_PASSWORD} is set but {ENV_USER} is not: set both, or neither"
                )))
            }
        };
        let all: Vec<Credentials> = [
            user_password,
            token.map(Credentials::Token),
            nkey_seed.map(Credentials::NkeySeed),
            creds_file.map(Credentials::CredsFile),
        ]
        .into_iter()
        .flatten()
        .collect();
        match all.len() {
            0 | 1 => Ok(all.into_iter().next()),
            _ => Err(OutboxError::InvalidConfig(format!(
                "more than one NATS login is set ({}): set only one of {ENV_USER} + \
                 {ENV_PASSWORD}, {ENV_TOKEN}, {ENV_NKEY_SEED} or {ENV_CREDS_FILE}",
                all.iter()
                    .map(Credentials::setting)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// The environment variable of the secret of this login (for user/password the password's):
    /// the setting an error about the login names.
    pub fn setting(&self) -> &'static str {
        match self {
            Credentials::UserPassword { .. } => ENV_PASSWORD,
            Credentials::Token(_) => ENV_TOKEN,
            Credentials::NkeySeed(_) => ENV_NKEY_SEED,
            Credentials::CredsFile(_) => ENV_CREDS_FILE,
        }
    }

    /// Who logs in, for messages: `user `outbox``, `a token`, `an nkey`, `creds file <path>`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Credentials::UserPassword { user, .. } => format!("user `{user}` ({ENV_USER})"),
            Credentials::Token(_) => "a token".into(),
            Credentials::NkeySeed(_) => "an nkey".into(),
            Credentials::CredsFile(path) => format!("creds file {}", path.display()),
        }
    }

    /// Checks the login.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when the user name is empty or holds whitespace or
    /// control characters (not shown: it may be a misplaced secret), or a secret or path is
    /// empty.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let empty = |what: &str| {
            Err(OutboxError::InvalidConfig(format!(
                "{what} is empty: set {} or unset it",
                self.setting()
            )))
        };
        match self {
            Credentials::UserPassword { user, password } => {
                if user.is_empty() || user.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(OutboxError::InvalidConfig(format!(
                        "{ENV_USER} is invalid (value not shown): it must not be empty or hold \
                         spaces or control characters"
                    )));
                }
                if password.expose().is_empty() {
                    return empty("the NATS password");
                }
            }
            Credentials::Token(s) if s.expose().is_empty() => return empty("the NATS token"),
            Credentials::NkeySeed(s) if s.expose().is_empty() => {
                return empty("the NATS nkey seed")
            }
            Credentials::CredsFile(p) if p.as_os_str().is_empty() => {
                return empty("the NATS creds file path")
            }
            _ => {}
        }
        Ok(())
    }

    /// `options` with this login.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when the creds file cannot be read or parsed (the message
    /// names [`ENV_CREDS_FILE`] and the path, never the file's content).
    pub(crate) async fn apply(
        &self,
        options: ConnectOptions,
    ) -> Result<ConnectOptions, OutboxError> {
        Ok(match self {
            Credentials::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.expose().to_owned())
            }
            Credentials::Token(token) => options.token(token.expose().to_owned()),
            Credentials::NkeySeed(seed) => options.nkey(seed.expose().to_owned()),
            Credentials::CredsFile(path) => options.credentials_file(path).await.map_err(|e| {
                OutboxError::InvalidConfig(format!(
                    "the NATS creds file {} ({ENV_CREDS_FILE}) cannot be used: {}",
                    path.display(),
                    e.kind()
                ))
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show() {
        for c in [
            Credentials::user_password("outbox", "very-secret-1"),
            Credentials::Token("very-secret-1".into()),
            Credentials::NkeySeed("very-secret-1".into()),
        ] {
            let text = format!("{c:?} {}", c.describe());
            assert!(!text.contains("very-secret-1"), "{text}");
        }
        assert!(format!("{:?}", Credentials::user_password("outbox", "x")).contains("outbox"));
    }

    #[test]
    fn one_login_or_none() {
        let none = Credentials::from_parts(None, None, None, None, None).expect("none");
        assert_eq!(none, None);
        let up = Credentials::from_parts(Some("u".into()), Some("p-1".into()), None, None, None)
            .expect("user/password")
            .expect("some");
        assert_eq!(up.setting(), ENV_PASSWORD);
        let err = Credentials::from_parts(Some("u".into()), None, None, None, None)
            .expect_err("no password");
        assert!(err.to_string().contains(ENV_PASSWORD), "{err}");
        let err = Credentials::from_parts(None, Some("p-1".into()), None, None, None)
            .expect_err("no user");
        assert!(
            err.to_string().contains(ENV_USER) && !err.to_string().contains("p-1"),
            "{err}"
        );
        let err = Credentials::from_parts(
            None,
            None,
            Some("tok-1".into()),
            Some("SUseed".into()),
            None,
        )
        .expect_err("two logins");
        let text = err.to_string();
        assert!(
            text.contains(ENV_TOKEN) && text.contains(ENV_NKEY_SEED) && !text.contains("tok-1"),
            "{text}"
        );
        let creds = Credentials::from_parts(None, None, None, None, Some("/x.creds".into()))
            .expect("creds")
            .expect("some");
        assert_eq!(creds.setting(), ENV_CREDS_FILE);
    }

    #[test]
    fn validate_names_the_variable() {
        let err = Credentials::user_password("a b", "p")
            .validate()
            .expect_err("space");
        assert!(err.to_string().contains(ENV_USER), "{err}");
        assert!(!err.to_string().contains("a b"), "{err}");
        let err = Credentials::Token(Secret::default())
            .validate()
            .expect_err("empty");
        assert!(err.to_string().contains(ENV_TOKEN), "{err}");
        Credentials::user_password("outbox", "p")
            .validate()
            .expect("valid");
    }
}
