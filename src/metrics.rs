//! The metric names, through the [`metrics`](https://docs.rs/metrics) facade: install any
//! recorder (for example `metrics-exporter-prometheus`) and these appear; without one they cost
//! nothing.

/// Counter: events this process published and completed (marked `SUCCESS`, or deleted with
/// [`crate::Completion::Delete`]).
pub const PUBLISHED: &str = "outbox_published_total";
/// Counter, label `table`: events the table's relays have delivered, read from
/// `t_outbox_counter` by every running worker at each heartbeat (so every live instance
/// exports the same value: aggregate with `max by (table)`). Unlike [`PUBLISHED`] (this
/// process' deliveries) it counts every instance's and outlives restarts and deleted rows; it
/// trails the deliveries by up to a heartbeat interval.
pub const DELIVERED: &str = "outbox_delivered_total";
/// Counter: per-row claims another instance won.
pub const CLAIM_LOST: &str = "outbox_claim_lost_total";
/// Counter: failed sends put back with back-off.
pub const RETRIES: &str = "outbox_retries_total";
/// Counter: events marked `FAIL` (dead letters).
pub const DEAD_LETTERS: &str = "outbox_dead_letters_total";
/// Counter: expired leases reclaimed.
pub const RECLAIMED: &str = "outbox_reclaimed_total";
/// Counter: dead letters of transient failures put back to `WAIT` by the healing policy
/// ([`crate::WorkerConfig::heal_dead_letters`]). A healed event that fails again counts in
/// [`DEAD_LETTERS`] again.
pub const HEALED: &str = "outbox_healed_total";
/// Counter: outcomes dropped because the lease was lost.
pub const LATE_ACKS: &str = "outbox_late_acks_total";
/// Counter: claimed events handed back to `WAIT` unsent (shutdown).
pub const RELEASED: &str = "outbox_released_total";
/// Counter, label `table`: delivered events deleted past the retention period
/// ([`crate::WorkerConfig::retention`]).
pub const RETENTION_DELETED: &str = "outbox_retention_deleted_total";
/// Counter: sends refused because of the publisher's own configuration or permissions (e.g.
/// the broker's credentials), put back to `WAIT` uncounted.
pub const CONFIG_FAULTS: &str = "outbox_config_faults_total";
/// Counter: connections of a guarded pool (the relay's, or one from
/// [`crate::guarded_pool`]) found inside an open transaction before use, and closed.
pub const LEAKED_TRANSACTIONS: &str = "outbox_leaked_transactions_total";
/// Counter: errors met by the relay, labelled `op` (`claim`, `record`, `renew`, `reclaim`,
/// `heal`, `heartbeat`, `gauges`; `send` for a send task that died).
pub const ERRORS: &str = "outbox_errors_total";
/// Histogram: one publish call, seconds.
pub const SEND_DURATION: &str = "outbox_send_duration_seconds";
/// Histogram: claim to outcome, seconds.
pub const SENDING_DWELL: &str = "outbox_sending_dwell_seconds";
/// Gauge: rows per status, labelled `status` (`WAIT`, `SENDING`, `FAIL`). This gauge and the
/// seven below are also labelled `table` (the outbox's table, `schema.table` with a schema).
/// Every running worker refreshes them every heartbeat interval
/// ([`crate::WorkerConfig::heartbeat_interval`], default 10 s), each from the database, so
/// they stay right while any instance of the table lives: aggregate them with `max by
/// (table)`, not `sum`.
pub const BACKLOG: &str = "outbox_backlog";
/// Gauge: how long the most overdue `WAIT` row has been due (now − its `next_retry_time`),
/// seconds: the relay's lag behind due events. Events backing off after failed sends are not
/// due, so a publisher failing every send keeps it near 0: watch
/// [`OLDEST_UNDELIVERED_AGE`] for delivery.
pub const OLDEST_WAIT_AGE: &str = "outbox_oldest_wait_age_seconds";
/// Gauge: age of the oldest event not yet delivered (`WAIT` or `SENDING`, due or backing
/// off), seconds: database now − its `create_time`; 0 when there is none. Grows while sends
/// fail, whatever the back-off.
pub const OLDEST_UNDELIVERED_AGE: &str = "outbox_oldest_undelivered_age_seconds";
/// Gauge: `WAIT` events that failed before (`retry_count > 0`) and wait out their back-off
/// (`next_retry_time` in the future).
pub const BACKOFF_EVENTS: &str = "outbox_backoff_events";
/// Gauge: relay instances of the table whose heartbeat has not expired (rows of
/// `t_outbox_relay` with `expires_at` after the database's now). Exported by every live
/// instance, so a dead one is counted out by the others; with none alive no one exports it
/// (alert on its absence too).
pub const RELAYS_ALIVE: &str = "outbox_relays_alive";
/// Gauge: seconds since the newest successful publish of any relay of the table (the newest
/// `last_success_at` in `t_outbox_relay`, at heartbeat precision); when none has succeeded
/// yet, since the oldest relay's start.
pub const LAST_SUCCESS_AGE: &str = "outbox_last_success_age_seconds";
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
/// within 5 s (as long as the database answers through the pool). Exported once a worker that should listen
/// starts (Postgres with `wake_on_commit`); a process whose workers poll by design (MySQL,
/// SQLite, `wake_on_commit(false)`) exports none.
pub const WAKE_LISTENING: &str = "outbox_wake_listening";

/// Counts a guarded pool's leaked transaction (only a backend with guarded pools calls it).
#[allow(dead_code)]
pub(crate) fn leaked_transaction() {
    metrics::counter!(LEAKED_TRANSACTIONS).increment(1);
}
