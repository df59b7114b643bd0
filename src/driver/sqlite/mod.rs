//! SQLite: time as fixed-width RFC 3339 text, `RETURNING` (3.35+), one writer at a time.
//! Writers take the write lock with `BEGIN IMMEDIATE` ([`crate::ext::begin_write`]); the relay
//! holds it only for single autocommit statements, and an idle relay not at all (`claim.rs`).
pub(super) mod claim;
pub(super) mod error;
pub(super) mod ordered;

use std::time::Duration;

/// `strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')`, with a `'±s.ffffff seconds'` modifier for
/// an offset: every value has one fixed width, so text order is time order (RFC 3339).
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
