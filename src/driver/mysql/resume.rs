//! Where the MySQL/MariaDB batch claim starts its scan. Each claim moves its rows out of
//! `WAIT`, which leaves their entries in `idx_<table>_status_next_retry` delete-marked until
//! InnoDB's purge removes them; under a backlog the purge trails the claims, and a scan from
//! the start of the `WAIT` range walks every one of those entries before it reaches a row it
//! can take. So while claims come back full, the next one resumes at the `next_retry_time`
//! where the last one ended.
//!
//! A row due before that point (one whose claim another instance rolled back, one reclaimed
//! with its old `next_retry_time`, one committed late by a long transaction) is left for the
//! next scan from the start: after any claim that was not full, and at least every
//! [`FULL_SCAN_EVERY`].
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sea_orm::prelude::DateTimeUtc;

/// Longest between two scans from the start of the `WAIT` range while claims come back full.
pub(crate) const FULL_SCAN_EVERY: Duration = Duration::from_secs(1);

/// One worker's resume point (shared by the clones of its connection; only the claim uses it).
#[derive(Debug, Default)]
pub(crate) struct ScanResume(Mutex<Option<Point>>);

#[derive(Debug, Clone, Copy)]
struct Point {
    /// The `next_retry_time` of the last row the previous full claim took.
    from: DateTimeUtc,
    /// When the last scan from the start ran.
    full_scan_at: Instant,
}

impl ScanResume {
    /// Where the next scan starts: `None` for the start of the range.
    pub(crate) fn start(&self) -> Option<DateTimeUtc> {
        let point = *self.0.lock().unwrap_or_else(|p| p.into_inner());
        point
            .filter(|p| p.full_scan_at.elapsed() < FULL_SCAN_EVERY)
            .map(|p| p.from)
    }

    /// Records a claim that scanned from `scanned_from` (`None`: the start) and took `taken`
    /// rows of the `wanted`, the last of them due at `last_due`.
    pub(crate) fn claimed(
        &self,
        scanned_from: Option<DateTimeUtc>,
        wanted: u64,
        taken: usize,
        last_due: Option<DateTimeUtc>,
    ) {
        let mut point = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *point = match (last_due, taken as u64 >= wanted) {
            (Some(from), true) => Some(Point {
                from,
                full_scan_at: match (scanned_from, *point) {
                    (Some(_), Some(p)) => p.full_scan_at,
                    _ => Instant::now(),
                },
            }),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_while_full_and_restarts_otherwise() {
        let r = ScanResume::default();
        assert_eq!(r.start(), None);
        let t = chrono::Utc::now();
        r.claimed(None, 10, 10, Some(t));
        assert_eq!(r.start(), Some(t));
        let later = t + chrono::Duration::seconds(1);
        r.claimed(Some(t), 10, 10, Some(later));
        assert_eq!(r.start(), Some(later));
        r.claimed(Some(later), 10, 3, Some(later));
        assert_eq!(
            r.start(),
            None,
            "a claim that was not full scans from the start next"
        );
    }
}
