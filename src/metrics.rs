//! The metric names, through the [`metrics`](https://docs.rs/metrics) facade: install any
//! recorder (for example `metrics-exporter-prometheus`) and these appear; without one they cost
//! nothing.

/// Counter: events published and marked `SUCCESS`.
pub const PUBLISHED: &str = "outbox_published_total";
/// Counter: per-row claims another instance won.
pub const CLAIM_LOST: &str = "outbox_claim_lost_total";
/// Counter: failed sends put back with back-off.
pub const RETRIES: &str = "outbox_retries_total";
/// Counter: events marked `FAIL` (dead letters).
pub const DEAD_LETTERS: &str = "outbox_dead_letters_total";
/// Counter: expired leases reclaimed.
pub const RECLAIMED: &str = "outbox_reclaimed_total";
/// Counter: outcomes dropped because the lease was lost.
pub const LATE_ACKS: &str = "outbox_late_acks_total";
/// Counter: claimed events handed back to `WAIT` unsent (shutdown).
pub const RELEASED: &str = "outbox_released_total";
/// Counter: sends refused because of the publisher's own configuration or permissions (e.g.
/// the broker's credentials), put back to `WAIT` uncounted.
pub const CONFIG_FAULTS: &str = "outbox_config_faults_total";
/// Counter: connections of a guarded pool (the relay's, or one from
/// [`crate::guarded_pool`]) found inside an open transaction before use, and closed.
pub const LEAKED_TRANSACTIONS: &str = "outbox_leaked_transactions_total";
/// Counter: errors met by the relay, labelled `op` (`claim`, `record`, `renew`, `reclaim`,
/// `gauges`; `send` for a send task that died).
pub const ERRORS: &str = "outbox_errors_total";
/// Histogram: one publish call, seconds.
pub const SEND_DURATION: &str = "outbox_send_duration_seconds";
/// Histogram: claim to outcome, seconds.
pub const SENDING_DWELL: &str = "outbox_sending_dwell_seconds";
/// Gauge: rows per status, labelled `status` (`WAIT`, `SENDING`, `FAIL`). This gauge and the
/// three below are also labelled `table` (the outbox's table, `schema.table` with a schema).
pub const BACKLOG: &str = "outbox_backlog";
/// Gauge: age of the oldest due `WAIT` row, seconds.
pub const OLDEST_WAIT_AGE: &str = "outbox_oldest_wait_age_seconds";
/// Gauge: ordered mode with the `Block` policy: keys whose `WAIT` events sit behind a dead
/// letter of their key.
pub const BLOCKED_KEYS: &str = "outbox_blocked_keys";
/// Gauge: ordered mode with the `Block` policy: age of the oldest `WAIT` event behind a dead
/// letter, seconds (0 when none).
pub const OLDEST_BLOCKED_AGE: &str = "outbox_oldest_blocked_age_seconds";
/// Gauge: workers of this process whose wake-on-commit is live (a `LISTEN` connection whose
/// self-check passed); 0 while they only poll. A `LISTEN` connection that goes quiet without
/// closing (half-open) counts no more about 15 seconds later: after 10 s without a
/// notification the worker sends a `NOTIFY` of its own through the pool, which must come back
/// within 5 s (as long as the database answers through the pool).
pub const WAKE_LISTENING: &str = "outbox_wake_listening";

/// Counts a guarded pool's leaked transaction (only a backend with guarded pools calls it).
#[allow(dead_code)]
pub(crate) fn leaked_transaction() {
    metrics::counter!(LEAKED_TRANSACTIONS).increment(1);
}
