//! MySQL and MariaDB: `UTC_TIMESTAMP(6)`, no `RETURNING` (`LAST_INSERT_ID()`), `SKIP LOCKED`
//! (MySQL 8, MariaDB 10.6), InnoDB's row locks on every row a statement reads (hence
//! `by_ids.rs`: statements by id through the primary key alone).
pub(super) mod by_ids;
pub(super) mod claim;
pub(super) mod error;
pub(super) mod health;
pub(super) mod ordered;
#[cfg(feature = "mysql")]
pub(super) mod pool;
pub(super) mod resume;

use std::time::Duration;

/// `UTC_TIMESTAMP(6)` (whatever the connection's time zone; sqlx sets `+00:00`, other clients the
/// server's zone), or `(UTC_TIMESTAMP(6) ± INTERVAL n MICROSECOND)`.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "UTC_TIMESTAMP(6)".to_owned(),
        Some((sign, d)) => format!(
            "(UTC_TIMESTAMP(6) {sign} INTERVAL {} MICROSECOND)",
            d.as_micros()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_clock() {
        let d = Duration::from_millis(1500);
        assert_eq!(now_sql(None), "UTC_TIMESTAMP(6)");
        assert_eq!(
            now_sql(Some(('-', d))),
            "(UTC_TIMESTAMP(6) - INTERVAL 1500000 MICROSECOND)"
        );
    }
}
