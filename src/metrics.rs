//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: install any recorder (for
//! example `metrics-exporter-prometheus`) and these appear; without one they cost nothing.
//!
//! | name | kind | meaning |
//! | --- | --- | --- |
//! | `outbox_published_total` | counter | events published and marked `SUCCESS` |
//! | `outbox_claim_lost_total` | counter | per-row claims another instance won |
//! | `outbox_retries_total` | counter | failed sends put back with back-off |
//! | `outbox_dead_letters_total` | counter | events marked `FAIL` |
//! | `outbox_reclaimed_total` | counter | expired leases reclaimed |
//! | `outbox_late_acks_total` | counter | outcomes dropped because the lease was lost |
//! | `outbox_released_total` | counter | claimed events handed back to `WAIT` unsent (shutdown) |
//! | `outbox_config_faults_total` | counter | sends refused because of the publisher's own configuration or permissions (e.g. the broker's credentials), put back to `WAIT` uncounted |
//! | `outbox_leaked_transactions_total` | counter | connections of a guarded pool (the relay's, or one built with `guarded_pool`) found inside an open transaction before use, closed (see [`crate::pool`]) |
//! | `outbox_errors_total{op}` | counter | errors met by the relay, per step (`claim`, `record`, `renew`, `reclaim`, `gauges`; `send` for a send task that died) |
//! | `outbox_send_duration_seconds` | histogram | one publish call, seconds |
//! | `outbox_sending_dwell_seconds` | histogram | claim to outcome, seconds |
//! | `outbox_backlog{status}` | gauge | rows per status (`WAIT`, `SENDING`, `FAIL`) |
//! | `outbox_oldest_wait_age_seconds` | gauge | age of the oldest due `WAIT` row, seconds |
//! | `outbox_blocked_keys` | gauge | ordered mode with the `Block` policy: keys whose `WAIT` events sit behind a dead letter of their key |
//! | `outbox_oldest_blocked_age_seconds` | gauge | ordered mode with the `Block` policy: age of the oldest `WAIT` event behind a dead letter, seconds (0 when none) |
//! | `outbox_wake_listening` | gauge | 1 while wake-on-commit is live (a `LISTEN` connection whose self-check passed), 0 while the worker only polls; with several workers in one process, how many of them listen |

/// Counter: events published.
pub const PUBLISHED: &str = "outbox_published_total";
/// Counter: claims lost to another instance.
pub const CLAIM_LOST: &str = "outbox_claim_lost_total";
/// Counter: retries scheduled.
pub const RETRIES: &str = "outbox_retries_total";
/// Counter: dead letters.
pub const DEAD_LETTERS: &str = "outbox_dead_letters_total";
/// Counter: reclaimed leases.
pub const RECLAIMED: &str = "outbox_reclaimed_total";
/// Counter: late acknowledgements.
pub const LATE_ACKS: &str = "outbox_late_acks_total";
/// Counter: claimed events handed back to `WAIT` unsent.
pub const RELEASED: &str = "outbox_released_total";
/// Counter: sends refused because of the publisher's configuration, put back uncounted.
pub const CONFIG_FAULTS: &str = "outbox_config_faults_total";
/// Counter: pooled connections found inside an open transaction before use, and closed.
pub const LEAKED_TRANSACTIONS: &str = "outbox_leaked_transactions_total";
/// Counter: database errors met by the relay, labelled `op` (the step).
pub const ERRORS: &str = "outbox_errors_total";
/// Histogram: publish duration in seconds.
pub const SEND_DURATION: &str = "outbox_send_duration_seconds";
/// Histogram: claim-to-outcome time in seconds.
pub const SENDING_DWELL: &str = "outbox_sending_dwell_seconds";
/// Gauge: rows per status.
pub const BACKLOG: &str = "outbox_backlog";
/// Gauge: age of the oldest due `WAIT` row in seconds.
pub const OLDEST_WAIT_AGE: &str = "outbox_oldest_wait_age_seconds";
/// Gauge: keys held back behind a dead letter (ordered mode, `Block` policy).
pub const BLOCKED_KEYS: &str = "outbox_blocked_keys";
/// Gauge: age of the oldest event held back behind a dead letter, seconds.
pub const OLDEST_BLOCKED_AGE: &str = "outbox_oldest_blocked_age_seconds";
/// Gauge: workers of this process whose wake-on-commit is live (1 or 0 with one worker).
pub const WAKE_LISTENING: &str = "outbox_wake_listening";

pub(crate) fn published(n: u64) {
    metrics::counter!(PUBLISHED).increment(n);
}
pub(crate) fn claim_lost() {
    metrics::counter!(CLAIM_LOST).increment(1);
}
pub(crate) fn retry() {
    metrics::counter!(RETRIES).increment(1);
}
pub(crate) fn dead_letters(n: u64) {
    metrics::counter!(DEAD_LETTERS).increment(n);
}
pub(crate) fn reclaimed(n: u64) {
    metrics::counter!(RECLAIMED).increment(n);
}
pub(crate) fn late_acks(n: u64) {
    metrics::counter!(LATE_ACKS).increment(n);
}
// Counted by the guarded pools, which exist only with a backend that has them.
#[allow(dead_code)]
pub(crate) fn leaked_transaction() {
    metrics::counter!(LEAKED_TRANSACTIONS).increment(1);
}
pub(crate) fn config_fault() {
    metrics::counter!(CONFIG_FAULTS).increment(1);
}
pub(crate) fn released(n: u64) {
    metrics::counter!(RELEASED).increment(n);
}
pub(crate) fn error(op: &'static str) {
    metrics::counter!(ERRORS, "op" => op).increment(1);
}
pub(crate) fn send_duration(seconds: f64) {
    metrics::histogram!(SEND_DURATION).record(seconds);
}
pub(crate) fn sending_dwell(seconds: f64) {
    metrics::histogram!(SENDING_DWELL).record(seconds);
}
/// Moves the wake-on-commit gauge by `delta`: +1 when a worker starts listening, -1 when it
/// stops, 0 to register it.
pub(crate) fn wake_listening(delta: f64) {
    metrics::gauge!(WAKE_LISTENING).increment(delta);
}
