//! SQLite: time as fixed-width RFC 3339 text, `RETURNING` (3.35+), one writer at a time.
//!
//! The database has one write lock. A business transaction begun `DEFERRED` that has read and
//! then writes fails at once with `database is locked` when a relay holds that lock at that
//! moment (or has committed since its read): SQLite calls no busy handler for that upgrade.
//! Writers avoid it with `BEGIN IMMEDIATE` ([`crate::ext::begin_write`]); the relay keeps its
//! own hold on the lock short and rare: every statement it runs here is one autocommit
//! statement (it waits for the lock within the connection's busy timeout, and a busy error
//! left over is retried, see [`crate::driver::retry_transient`]), and an idle relay takes no
//! write lock at all (`claim.rs`: the batch claim reads first).
pub(super) mod claim;
pub(super) mod error;
pub(super) mod ordered;

use std::time::Duration;

/// The crate feature serving SQLite, and whether this build has it.
pub(super) const FEATURE: (&str, bool) = ("sqlite", cfg!(feature = "sqlite"));
/// `INSERT`/`UPDATE ... RETURNING` exist (3.35+).
pub(super) const RETURNING: bool = true;

/// SQLite keeps time as text: every value the outbox writes has the one fixed-width form
/// `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (SQLite's clock has milliseconds; the last three digits
/// are zero), so text order is time order and chrono reads it back as RFC 3339.
/// `strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')`, with a `'±s.ffffff seconds'` modifier for
/// an offset: every value has one fixed width, so text order is time order.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')".to_owned(),
        Some((sign, d)) => format!(
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '{sign}{}.{:06} seconds')",
            d.as_secs(),
            d.subsec_micros()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_clock() {
        let d = Duration::from_millis(1500);
        assert_eq!(
            now_sql(Some(('+', d))),
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '+1.500000 seconds')"
        );
    }
}
