//! Keeping database passwords out of every output: print URLs only through [`redact_url`], and
//! pass any text that may quote a URL (a driver's error: SeaORM puts the whole connection string
//! into its "no supporting driver" error) through [`redact_secrets`] before it is shown.
//!
//! SeaORM's `Database::connect` span records the whole `ConnectOptions`, URL included, so every
//! log line the tool writes goes through [`redact_secrets`] too.
use std::borrow::Cow;

/// What a password is replaced with.
const REDACTED: &str = "***";

/// `url` with its password, and the value of any query parameter that looks like a secret
/// (`password`, `pass`, `pwd`, `secret`, `token` in its name), replaced by [`REDACTED`]. The
/// scheme, user, host, port, database and other parameters stay readable.
///
/// Errs on the safe side for text that is no proper URL: the user information is everything
/// before the last `@` ahead of the query string, so a password holding `/` or `@` is hidden
/// whole.
pub(crate) fn redact_url(url: &str) -> String {
    let parts = Parts::of(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    match parts.password_at {
        Some((start, end)) => {
            out.push_str(&parts.before_query[..start]);
            out.push_str(REDACTED);
            out.push_str(&parts.before_query[end..]);
        }
        None => out.push_str(parts.before_query),
    }
    if let Some(query) = parts.query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if is_secret_key(key) => format!("{key}={REDACTED}"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = parts.fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `text` with `url` shown redacted ([`redact_url`]) and every other occurrence of the URL's
/// password (as written, percent-decoded, and escaped as `{:?}` prints it) replaced by
/// [`REDACTED`]. Use it on error messages and log lines that may quote the URL or the password.
pub(crate) fn redact_secrets(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact_url(url));
    for secret in secrets(url) {
        if !secret.is_empty() && out.contains(secret.as_ref()) {
            out = out.replace(secret.as_ref(), REDACTED);
        }
    }
    out
}

/// The secrets of `url` as written and percent-decoded, longest first (so a secret that
/// contains another is replaced whole).
fn secrets(url: &str) -> Vec<Cow<'_, str>> {
    let parts = Parts::of(url);
    let mut raw: Vec<&str> = Vec::new();
    if let Some((start, end)) = parts.password_at {
        raw.push(&parts.before_query[start..end]);
    }
    if let Some(query) = parts.query {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=') {
                if is_secret_key(key) {
                    raw.push(value);
                }
            }
        }
    }
    let mut all: Vec<Cow<'_, str>> = Vec::new();
    for r in raw {
        all.push(Cow::Borrowed(r));
        let decoded = percent_decode(r);
        // As `{:?}` prints it inside a quoted string (a logged `ConnectOptions`, say).
        for form in [
            r.escape_debug().to_string(),
            decoded.escape_debug().to_string(),
        ] {
            if form != r && form != decoded {
                all.push(Cow::Owned(form));
            }
        }
        if decoded != r {
            all.push(Cow::Owned(decoded));
        }
    }
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token"]
        .iter()
        .any(|k| key.contains(k))
}

/// `%XX` sequences decoded (invalid ones kept as written; `+` kept).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL cut into the pieces redaction needs.
struct Parts<'a> {
    /// `scheme://`, or empty when there is no `://`.
    scheme: &'a str,
    /// From after the scheme to the query (or the end).
    before_query: &'a str,
    /// Byte range of the password inside `before_query`.
    password_at: Option<(usize, usize)>,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Self {
        let (scheme, rest) = match url.find("://") {
            Some(i) => url.split_at(i + 3),
            None => ("", url),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        // User information ends at the last `@` (a password may hold an unescaped `@` or `/`).
        let password_at = before_query.rfind('@').and_then(|at| {
            let colon = before_query[..at].find(':')?;
            Some((colon + 1, at))
        });
        Parts {
            scheme,
            before_query,
            password_at,
            query,
            fragment,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_the_password_keeps_the_rest() {
        assert_eq!(
            redact_url("postgres://postgres:hunter2@127.0.0.1:5432/outbox"),
            "postgres://postgres:***@127.0.0.1:5432/outbox"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1:3306/test"),
            "mysql://root@127.0.0.1:3306/test"
        );
        assert_eq!(
            redact_url("mysql://u:a/b@c@host/db"),
            "mysql://u:***@host/db"
        );
        assert_eq!(
            redact_url("postgres://h/db?user=u&Password=x&sslmode=disable#f"),
            "postgres://h/db?user=u&Password=***&sslmode=disable#f"
        );
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
        assert_eq!(
            redact_url("sqlite:///tmp/a.db?mode=rwc"),
            "sqlite:///tmp/a.db?mode=rwc"
        );
        assert_eq!(redact_url(""), "");
    }

    #[test]
    fn secrets_in_free_text() {
        let url = "postgres://app:p%2Fw%40d@db/x?token=t0k";
        let text = format!("failed: {url}; password p/w@d; token t0k; raw p%2Fw%40d");
        let out = redact_secrets(&text, url);
        for secret in ["p/w@d", "p%2Fw%40d", "t0k"] {
            assert!(!out.contains(secret), "{out}");
        }
        assert!(out.contains("postgres://app:***@db/x?token=***"), "{out}");
    }

    #[test]
    fn secrets_as_debug_prints_them() {
        let secret = r#"a"b\c"#;
        let url = format!("mysql://root:{secret}@db/x");
        let logged = format!("ConnectOptions {{ url: {url:?} }}");
        let escaped = secret.escape_debug().to_string();
        assert!(logged.contains(&escaped), "premise: {logged}");
        let out = redact_secrets(&logged, &url);
        assert!(!out.contains(&escaped) && !out.contains(secret), "{out}");
        assert!(out.contains("root:***@db/x"), "{out}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%40b%2"), "a@b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%"), "%");
    }

    #[test]
    fn a_url_shows_everything_but_its_secrets() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/orders?sslmode=require&password=x"),
            "postgres://app:***@db:5432/orders?sslmode=require&password=***"
        );
        assert_eq!(
            redact_url("sqlite://outbox.db?mode=rwc"),
            "sqlite://outbox.db?mode=rwc"
        );
    }

    #[test]
    fn text_loses_the_password_as_written_and_decoded() {
        let url = "mysql://root:p%40ss@127.0.0.1/app";
        let error = format!("cannot connect to {url}: access denied (using password p@ss)");
        assert_eq!(
            redact_secrets(&error, url),
            "cannot connect to mysql://root:***@127.0.0.1/app: access denied (using password ***)"
        );
    }

    #[tokio::test]
    async fn a_seaorm_connect_error_is_redacted() {
        let url = "foo://app:s3cret@db.example/x";
        let err = sea_orm::Database::connect(url)
            .await
            .expect_err("no driver");
        assert!(
            err.to_string().contains("s3cret"),
            "premise: SeaORM quotes the URL"
        );
        let shown = redact_secrets(&format!("connect failed: {err}"), url);
        assert!(
            !shown.contains("s3cret") && shown.contains("app:***@"),
            "{shown}"
        );
        assert!(!redact_url(url).contains("s3cret"));
    }
}
