//! Worker configuration.
use std::time::Duration;

use crate::error::OutboxError;
use crate::retry::{HealPolicy, RetryPolicy};

mod choices;
#[cfg(test)]
mod tests;

pub use choices::{
    ClaimStrategy, Completion, OrderedPolicy, RelayPool, StatementProtocol,
    MIN_RELAY_POOL_CONNECTIONS,
};

/// Largest `batch_size` accepted: 10,000.
pub const MAX_BATCH_SIZE: u64 = 10_000;
/// Longest duration accepted for any setting: 7 days.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Shortest lease accepted: 1 s.
const MIN_LEASE: Duration = Duration::from_secs(1);
/// Lease renewals per lease; a publisher's send timeout is at most the lease over this.
pub(crate) const RENEWALS_PER_LEASE: u32 = 3;
/// Shortest heartbeat interval accepted: 100 ms (each beat is a few reads and one write).
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Longest heartbeat interval accepted: 10 min (a relay that stopped is noticed within three
/// intervals).
pub const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(600);
/// Shortest retention of delivered events accepted: 1 min.
const MIN_RETENTION: Duration = Duration::from_secs(60);
/// Heartbeats that may be missed before an instance counts as stopped: its row's `expires_at`
/// is the heartbeat plus this many intervals.
pub const HEARTBEATS_PER_TIMEOUT: u32 = 3;
/// With wake-on-commit, the first follow-up wait after a round woken by a notification (twice
/// the writers' default notify interval; see `crate::wake`).
pub const WAKE_FOLLOW_UP: Duration = Duration::from_millis(20);

/// How a [`crate::Worker`] polls, claims, sends and retries.
///
/// ```
/// use std::time::Duration;
/// use sea_orm_outbox::WorkerConfig;
/// let config = WorkerConfig::default()
///     .poll_delay(Duration::from_millis(200))
///     .batch_size(50);
/// config.validate()?;
/// # Ok::<(), sea_orm_outbox::OutboxError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Wait after each round (default 5 s): a fixed delay, not a fixed rate.
    pub poll_delay: Duration,
    /// Candidates per round (default 20).
    pub batch_size: u64,
    /// Lease length (default 10 min; at least 1 s): a `SENDING` row whose `claimed_at` is
    /// older is reclaimed. The worker renews the leases it holds every third of it, from claim
    /// until the outcome is recorded, and reclaims expired leases of other instances every
    /// tenth of it (at most every 60 s).
    pub lease: Duration,
    /// Longest a single publish may take before it counts as a retryable failure (default 3 s,
    /// far below the lease).
    pub send_timeout: Duration,
    /// Retry limit and back-off.
    pub retry: RetryPolicy,
    /// The instance id stored in `claim_owner` (as `<instance id>#<claim token>`; at most 111
    /// characters, no `#`); `None` generates `outbox-<pid>-<6 random hex>`
    /// ([`WorkerConfig::service_name`] generates one from another name). Unique per running
    /// instance is best for the logs; a reused id is still safe, because every claim adds a
    /// token of its own to `claim_owner` and every later transition checks it.
    pub instance_id: Option<String>,
    /// How rounds claim (default [`ClaimStrategy::Batch`]).
    pub claim_strategy: ClaimStrategy,
    /// Send slots: publish calls in flight at once, each in a task of its own (default 16). A
    /// send that hangs holds its own slot and nothing else. The worker claims only as many
    /// events as it has free slots; with a publisher that [`crate::Publisher::batches`], a
    /// claim's events go out in one call in one slot, so up to `send_concurrency × batch_size`
    /// events are in flight.
    pub send_concurrency: usize,
    /// Wake between rounds when an event is written, instead of only after the poll delay
    /// (default true): on every backend when a writer of the same process writes into the
    /// worker's table ([`crate::NewEvent::notify_relays`]), and on Postgres also on
    /// `LISTEN sea_orm_outbox` when any writer commits (the listener holds one pool
    /// connection). Without it the worker polls.
    pub wake_on_commit: bool,
    /// Which connections the relay uses (default [`RelayPool::Own`] with 5 connections: a pool
    /// of its own, opened with the options of the pool handed to [`crate::Worker::new`], whose
    /// connections are checked for leaked transactions; see [`crate::guarded_pool`]).
    pub relay_pool: RelayPool,
    /// How the relay's statements reach Postgres (default [`StatementProtocol::Extended`]:
    /// prepared statements). [`StatementProtocol::Simple`] is for a transaction-mode pooler
    /// such as PgBouncer < 1.21 (see there); Postgres only.
    pub statement_protocol: StatementProtocol,
    /// Ordered delivery per business key (`biz_no`), opt-in: `None` (the default) sends events
    /// in any order; `Some(policy)` claims only the heads of their keys ([`OrderedPolicy`]),
    /// each with a run of the key's next due events, and sends each run in id order in one
    /// send slot, stopping at the first failure. Needs [`ClaimStrategy::Batch`] and the index
    /// of migration `m20261202_000004_add_biz_no_status_index`; see docs/ordered.md.
    pub ordered: Option<OrderedPolicy>,
    /// Between two monitor passes of the worker (default 10 s; 100 ms to 10 min): each writes
    /// the instance's heartbeat into `t_outbox_relay` (it counts as stopped three intervals
    /// after its last one), deletes heartbeats expired for more than a day, and refreshes the
    /// gauges of [`crate::metrics`].
    pub heartbeat_interval: Duration,
    /// What a delivered event's row becomes (default [`Completion::Delete`]: deleted by the
    /// owner-guarded statement that would have marked it); [`Completion::Update`] marks it
    /// `SUCCESS` and keeps it for `retention`.
    pub completion: Completion,
    /// How long delivered events kept as `SUCCESS` rows ([`Completion::Update`], or written
    /// before a switch to delete) are kept (default 7 days; `None` keeps them until
    /// `outbox purge`): every worker deletes those last updated longer ago (database clock)
    /// at its start and every 10 minutes, 1,000 rows per statement
    /// ([`crate::ops::purge_delivered`]). `WAIT`, `SENDING` and `FAIL` rows are never deleted.
    pub retention: Option<Duration>,
    /// Healing of dead letters, opt-in: `None` (the default) leaves every dead letter to a
    /// person; `Some(policy)` puts a dead letter of a transient failure back to `WAIT` after a
    /// quiet period, for a few rounds ([`HealPolicy`]). Every instance of the table should run
    /// with the same `retry` and `heal_dead_letters` (the round is read from `retry_count`).
    /// Off by default: a healed event is sent again, once per round, however long ago it was
    /// written and without anyone deciding it (a consumer that drops stale events, or an
    /// ordered [`OrderedPolicy::Skip`] relay whose key went on without it, must allow for
    /// that), so turning it on is the service's choice.
    pub heal_dead_letters: Option<HealPolicy>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll_delay: Duration::from_secs(5),
            batch_size: 20,
            lease: Duration::from_secs(10 * 60),
            send_timeout: Duration::from_secs(3),
            retry: RetryPolicy::default(),
            instance_id: None,
            claim_strategy: ClaimStrategy::Batch,
            send_concurrency: 16,
            wake_on_commit: true,
            relay_pool: RelayPool::default(),
            statement_protocol: StatementProtocol::Extended,
            ordered: None,
            heartbeat_interval: Duration::from_secs(10),
            completion: Completion::Delete,
            retention: Some(Duration::from_secs(7 * 24 * 60 * 60)),
            heal_dead_letters: None,
        }
    }
}

/// Builder methods: each sets the field of its name and returns the configuration.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        impl WorkerConfig {
            $(
                #[doc = concat!("Sets [`WorkerConfig::", stringify!($field), "`].")]
                pub fn $field(mut self, $field: $ty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

setters! {
    poll_delay: Duration,
    batch_size: u64,
    lease: Duration,
    send_timeout: Duration,
    retry: RetryPolicy,
    claim_strategy: ClaimStrategy,
    send_concurrency: usize,
    wake_on_commit: bool,
    relay_pool: RelayPool,
    statement_protocol: StatementProtocol,
    ordered: Option<OrderedPolicy>,
    heartbeat_interval: Duration,
    completion: Completion,
    retention: Option<Duration>,
    heal_dead_letters: Option<HealPolicy>,
}

impl WorkerConfig {
    /// Sets a fixed [`WorkerConfig::instance_id`].
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }
    /// Sets the instance id to one generated from the service's `name`:
    /// `<name>-<pid>-<6 random hex digits>`, e.g. `order-4242-a1b2c3`. [`WorkerConfig::validate`]
    /// refuses a name that makes the id invalid.
    pub fn service_name(self, name: impl AsRef<str>) -> Self {
        self.instance_id(crate::instance::instance_id(name.as_ref()))
    }

    /// Checks that the configuration can work.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when the batch size or send concurrency is 0, the batch
    /// size is over 10,000, a duration is zero or over 7 days, the lease is shorter than 1 s,
    /// the instance id is empty, longer than 111 characters or not one plain word, ordered mode
    /// is asked for with [`ClaimStrategy::PerRow`], the heartbeat interval is not 100 ms to
    /// 10 min, the retention is under 1 min, or the relay pool, the retry policy or the
    /// healing policy fails its own `validate`.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |m: String| Err(OutboxError::InvalidConfig(m));
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1".into());
        }
        if self.send_concurrency == 0 {
            return bad("send_concurrency must be at least 1".into());
        }
        if self.batch_size > MAX_BATCH_SIZE {
            return bad(format!(
                "batch_size must be at most {MAX_BATCH_SIZE} (ids are bound as statement \
                 parameters, and drivers allow 32,766 to 65,535 of them)"
            ));
        }
        for (name, d) in [
            ("poll_delay", self.poll_delay),
            ("lease", self.lease),
            ("send_timeout", self.send_timeout),
            ("retry.backoff_base", self.retry.backoff_base),
            ("retry.max_backoff", self.retry.max_backoff),
        ] {
            if d > MAX_DURATION {
                return bad(format!("{name} must be at most 7 days"));
            }
            // The retry policy's durations may be zero (retry at once).
            if d.is_zero() && !name.starts_with("retry.") {
                return bad(format!("{name} must be greater than zero"));
            }
        }
        // No '#' (it separates the instance id from the claim token in `claim_owner`), no
        // whitespace or control characters (log lines and `claim_owner` stay one readable word).
        if let Some(id) = &self.instance_id {
            if id.is_empty()
                || id.chars().count() > crate::instance::INSTANCE_ID_MAX_LEN
                || id
                    .chars()
                    .any(|c| c == '#' || c.is_whitespace() || c.is_control())
            {
                return bad(format!(
                    "instance_id must be 1 to {} characters, without '#', whitespace or control \
                     characters (claim_owner holds the instance id, '#' and a claim token of 16 \
                     hex digits)",
                    crate::instance::INSTANCE_ID_MAX_LEN
                ));
            }
        }
        if self.ordered.is_some() && self.claim_strategy != ClaimStrategy::Batch {
            return bad(
                "ordered mode claims the heads of their keys with the batch claim: use \
                 ClaimStrategy::Batch (the default) with ordered"
                    .into(),
            );
        }
        if !(MIN_HEARTBEAT_INTERVAL..=MAX_HEARTBEAT_INTERVAL).contains(&self.heartbeat_interval) {
            return bad("heartbeat_interval must be 100 ms to 10 min".into());
        }
        if self.retention.is_some_and(|r| r < MIN_RETENTION) {
            return bad(
                "retention must be at least 1 min (or None to keep delivered events)".into(),
            );
        }
        if self.lease < MIN_LEASE {
            return bad("lease must be at least 1 s (it is renewed every third of it, and expired leases are \
                 reclaimed every tenth)".into());
        }
        self.relay_pool.validate()?;
        if let Some(heal) = &self.heal_dead_letters {
            heal.validate()?;
        }
        self.retry.validate()
    }

    /// The longest a publisher's own send timeout may be under this worker: the worker's
    /// `send_timeout`, and at most a third of the lease (else a send the worker gave up on, or
    /// one outliving its lease, is sent again).
    pub fn publisher_send_timeout_limit(&self) -> Duration {
        self.send_timeout.min(self.lease / RENEWALS_PER_LEASE)
    }

    /// Checks a publisher's send timeout (`what` names it in the error) against
    /// [`WorkerConfig::publisher_send_timeout_limit`].
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] naming the limit that `timeout` exceeds.
    pub fn check_publisher_send_timeout(
        &self,
        what: &str,
        timeout: Duration,
    ) -> Result<(), OutboxError> {
        if timeout <= self.publisher_send_timeout_limit() {
            return Ok(());
        }
        let why = if timeout > self.lease / RENEWALS_PER_LEASE {
            format!(
                "must be at most a third of the worker's lease ({} ms): a send still running \
                 when the lease ends is sent again by another instance",
                self.lease.as_millis()
            )
        } else {
            format!(
                "must not exceed the worker's send_timeout ({} ms): the worker would give up \
                 first and send the event again",
                self.send_timeout.as_millis()
            )
        };
        let ms = timeout.as_millis();
        Err(OutboxError::InvalidConfig(format!(
            "{what} ({ms} ms) {why}"
        )))
    }
}
