//! Redis client errors as retryable, permanent or configuration [`PublishError`]s.
//!
//! The classification goes by the error's kind and the server's error code (the first word of
//! its reply, e.g. `NOPERM`, `OOM`), never by the wording of a message, except for the one
//! server reply that refuses a value for its size.
use redis::{ErrorKind, RedisError, ServerErrorKind};
use sea_orm_outbox::PublishError;

use crate::config::ENV_URL;
use crate::credentials::{ENV_PASSWORD, ENV_USERNAME};

/// Server error codes that mean the publisher's own configuration or permissions are wrong:
/// no or rejected credentials, a user not allowed to `XADD` to the stream, a stream key that
/// holds another type, or a cluster node that does not own the key (this client speaks to one
/// server, not a cluster).
const CONFIGURATION_CODES: &[&str] = &[
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    "WRONGTYPE",
    "MOVED",
    "ASK",
    "CROSSSLOT",
];

/// What to check when Redis refused the credentials of user `username` (`None`: the
/// `default` user or no user given).
pub(crate) fn rejected_credentials_text(username: Option<&str>) -> String {
    let user = username.map_or_else(|| "the default user".to_owned(), |u| format!("user `{u}`"));
    format!(
        "Redis rejected the credentials of {user}: check {ENV_PASSWORD} (and {ENV_USERNAME}), \
         or the user and password in {ENV_URL}"
    )
}

/// What to set when Redis asks for credentials the publisher did not give.
pub(crate) fn missing_credentials_text() -> String {
    format!(
        "Redis requires a password (NOAUTH): set {ENV_PASSWORD} (and {ENV_USERNAME} for an ACL \
         user), or put them in {ENV_URL}"
    )
}

/// Whether `e` says the credentials were rejected (`AuthenticationFailed`, `WRONGPASS`).
pub(crate) fn is_rejected_credentials(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS")
}

/// Whether `e` says credentials are required (`NOAUTH`).
pub(crate) fn is_missing_credentials(e: &RedisError) -> bool {
    e.code() == Some("NOAUTH")
}

/// Decides whether a failed `XADD` (or the pipeline that carried it) may succeed later, as
/// the [`PublishError`] the relay records.
///
/// Configuration ([`sea_orm_outbox::PublishErrorKind::Configuration`], the attempt is not
/// counted and the event stays `WAIT`): rejected or missing credentials (`WRONGPASS`,
/// `NOAUTH`, a failed `AUTH`), an ACL that denies the command or key (`NOPERM`), a stream key
/// that holds another type (`WRONGTYPE`), a cluster redirect (`MOVED`, `ASK`, `CROSSSLOT`),
/// and a client configuration the client refuses. Permanent: the server refused the value for
/// its size (`Protocol error: invalid bulk length`, beyond its `proto-max-bulk-len`: lower
/// `max_message_bytes`). Everything else is retryable: connection refused, dropped or timed
/// out, `OOM`, `LOADING`, `BUSY`, `READONLY` (a replica during a failover), `TRYAGAIN`,
/// `MASTERDOWN`, other server errors and unexpected replies. The message is the client's text
/// (which never holds the password: the client does not put it in errors).
pub fn classify(e: &RedisError) -> PublishError {
    let text = e.to_string();
    if is_rejected_credentials(e) {
        return PublishError::configuration(format!(
            "{} ({text})",
            rejected_credentials_text(None)
        ));
    }
    if is_missing_credentials(e) {
        return PublishError::configuration(format!("{} ({text})", missing_credentials_text()));
    }
    let code = e.code().unwrap_or_default();
    if CONFIGURATION_CODES.contains(&code)
        || matches!(
            e.kind(),
            ErrorKind::InvalidClientConfig | ErrorKind::RESP3NotSupported
        )
    {
        return PublishError::configuration(format!(
            "Redis refused the publisher's configuration or permissions: {text}"
        ));
    }
    let too_large = e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail()
            .is_some_and(|d| d.contains("invalid bulk length"));
    if too_large {
        return PublishError::permanent(format!(
            "Redis refused the entry for its size (above the server's proto-max-bulk-len; \
             lower max_message_bytes below it): {text}"
        ));
    }
    if e.is_timeout() {
        return PublishError::retryable(format!("Redis did not answer in time: {text}"));
    }
    PublishError::retryable(format!("Redis send failed: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm_outbox::PublishErrorKind::{self, Configuration, Permanent, Retryable};

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    fn kind(e: &RedisError) -> PublishErrorKind {
        classify(e).kind
    }

    #[test]
    fn classifies_by_kind_and_code() {
        for code in CONFIGURATION_CODES {
            assert_eq!(kind(&server(code, "x")), Configuration, "{code}");
        }
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let p = classify(&auth);
        assert_eq!(p.kind, Configuration);
        assert!(p.message.contains(ENV_PASSWORD), "{}", p.message);
        let p = classify(&server("NOAUTH", "Authentication required."));
        assert!(p.message.contains("requires a password"), "{}", p.message);
        assert_eq!(
            kind(&RedisError::from((ErrorKind::InvalidClientConfig, "bad"))),
            Configuration
        );
        for code in [
            "OOM",
            "LOADING",
            "BUSY",
            "READONLY",
            "TRYAGAIN",
            "MASTERDOWN",
            "ERR",
        ] {
            assert_eq!(kind(&server(code, "x")), Retryable, "{code}");
        }
        for io in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(
                kind(&RedisError::from(std::io::Error::from(io))),
                Retryable,
                "{io:?}"
            );
        }
        let timeout = classify(&RedisError::from(std::io::Error::from(
            std::io::ErrorKind::TimedOut,
        )));
        assert_eq!(timeout.kind, Retryable);
        assert!(timeout.message.contains("in time"), "{}", timeout.message);
        assert_eq!(
            kind(&RedisError::from((ErrorKind::Parse, "garbage"))),
            Retryable
        );
    }

    #[test]
    fn a_value_beyond_proto_max_bulk_len_is_permanent() {
        // How Redis 7 answers a bulk string longer than its `proto-max-bulk-len`.
        let e = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "Protocol error: invalid bulk length".to_owned(),
        ));
        assert_eq!(kind(&e), Permanent);
    }
}
