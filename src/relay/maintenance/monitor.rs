//! The monitor pass, every heartbeat interval: this worker's heartbeat in `t_outbox_relay`,
//! its deliveries added to `t_outbox_counter`, the removal of heartbeats expired for more than
//! a day, and the gauges.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{WorkerConfig, HEARTBEATS_PER_TIMEOUT};
use crate::driver::relays::{Beat, EXPIRED_RELAYS_KEPT};
use crate::driver::RelayDb;
use crate::error::OutboxError;
use crate::ops::Backlog;
use crate::outbox::Outbox;
use crate::relay::{Observer, Op, WorkerSummary};
use crate::wake::ListenState;

/// How long after a heartbeat's expiry the gauges are refreshed for it.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// The monitor of one worker: its heartbeat and the gauges of its table, all labelled `table`
/// (`schema.table`, or `table`), so that two outboxes in one process keep gauges of their own.
/// Every live instance exports every gauge; they agree, being read from the same tables.
#[derive(Debug, Clone)]
pub(crate) struct Monitor {
    db: RelayDb,
    /// The worker's instance id.
    owner: String,
    /// Between passes.
    interval: Duration,
    /// Whether the blocked-key gauges are refreshed too.
    blocked: bool,
    /// The worker's wake-on-commit, whose gauge each pass marks as current.
    listen: ListenState,
    /// The worker's deliveries (its `published` total) already added to `t_outbox_counter`.
    counted: Arc<AtomicU64>,
}

impl Monitor {
    /// The monitor of the worker `owner` configured with `c`, over the relay's connection `db`,
    /// with the worker's wake-on-commit state `listen`.
    pub(crate) fn new(db: RelayDb, c: &WorkerConfig, owner: &str, listen: ListenState) -> Self {
        Monitor {
            db,
            owner: owner.to_owned(),
            interval: c.heartbeat_interval,
            blocked: c.ordered == Some(crate::OrderedPolicy::Block),
            listen,
            counted: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Adds the worker's deliveries not yet counted (its `published` total, from `observer`)
    /// to `t_outbox_counter`: nothing when there are none. On an error they stay uncounted
    /// and go with the next addition.
    ///
    /// SQL: [`crate::driver::Driver::add_delivered`].
    pub(crate) async fn count_delivered(&self, observer: &Observer) -> Result<(), OutboxError> {
        use sea_orm::ConnectionTrait;
        let published = observer.totals().published;
        let counted = self.counted.load(Ordering::Relaxed);
        let n = published.saturating_sub(counted);
        if n == 0 {
            return Ok(());
        }
        self.db.execute(&self.db.driver().add_delivered(n)).await?;
        self.counted.store(published, Ordering::Relaxed);
        Ok(())
    }

    /// Writes this worker's heartbeat: `first` for the first of a run; `round` and `success`
    /// when the worker completed a claim round, or published, since the previous one.
    ///
    /// SQL: [`crate::driver::Driver::heartbeat`].
    pub(crate) async fn beat(
        &self,
        first: bool,
        round: bool,
        success: bool,
    ) -> Result<(), OutboxError> {
        use sea_orm::ConnectionTrait;
        let driver = self.db.driver();
        let beat = Beat {
            instance_id: &self.owner,
            version: env!("CARGO_PKG_VERSION"),
            timeout: self.interval * HEARTBEATS_PER_TIMEOUT,
            first,
            round,
            success,
        };
        self.db.execute(&driver.heartbeat(&beat)).await?;
        Ok(())
    }

    /// Deletes the heartbeats of this table's instances that expired more than 24 h ago.
    ///
    /// SQL: [`crate::driver::Driver::delete_expired_relays`].
    pub(crate) async fn delete_expired(&self) -> Result<(), OutboxError> {
        use sea_orm::ConnectionTrait;
        let delete = self.db.driver().delete_expired_relays(EXPIRED_RELAYS_KEPT);
        self.db.execute(&delete).await?;
        Ok(())
    }

    /// Deletes this worker's heartbeat: it stopped cleanly.
    pub(crate) async fn remove(&self) -> Result<(), OutboxError> {
        use sea_orm::ConnectionTrait;
        let delete = self.db.driver().delete_relay(&self.owner);
        self.db.execute(&delete).await?;
        Ok(())
    }

    /// Reads the backlog and the heartbeats (and the blocked keys) and sets the gauges; returns
    /// the backlog, and how long until the first live heartbeat expires (by the database
    /// clock). On a database error the gauges keep their last values.
    ///
    /// Gauges: `outbox_backlog{status}`, `outbox_oldest_wait_age_seconds`,
    /// `outbox_oldest_undelivered_age_seconds`, `outbox_backoff_events` from
    /// [`crate::ops::backlog`]; the counter `outbox_delivered_total` from `t_outbox_counter`;
    /// `outbox_relays_alive`, `outbox_last_success_age_seconds` from
    /// the heartbeats; for a worker in ordered mode with [`crate::OrderedPolicy::Block`]
    /// `outbox_blocked_keys` and `outbox_oldest_blocked_age_seconds`.
    pub(crate) async fn refresh_gauges(&self) -> Result<(Backlog, Option<Duration>), OutboxError> {
        use crate::metrics as m;
        let outbox = Outbox::of_table(self.db.table());
        let table = self.db.table().label();
        let gauge = |name: &'static str, value: f64| {
            metrics::gauge!(name, "table" => table.clone()).set(value);
        };
        self.listen.touch_gauge();
        let b = crate::ops::backlog(&outbox, &self.db).await?;
        for (status, rows) in [("WAIT", b.wait), ("SENDING", b.sending), ("FAIL", b.fail)] {
            metrics::gauge!(m::BACKLOG, "status" => status, "table" => table.clone())
                .set(rows as f64);
        }
        gauge(m::OLDEST_WAIT_AGE, b.oldest_wait_age_seconds);
        gauge(m::OLDEST_UNDELIVERED_AGE, b.oldest_undelivered_age_seconds);
        gauge(m::BACKOFF_EVENTS, b.backing_off as f64);
        let delivered = crate::driver::counter::delivered(&self.db, self.db.driver()).await?;
        metrics::counter!(m::DELIVERED, "table" => table.clone()).absolute(delivered);
        let (relays, now) = crate::ops::relays_at(&outbox, &self.db).await?;
        gauge(m::RELAYS_ALIVE, crate::ops::alive(&relays) as f64);
        let last_success = now.map_or(0.0, |now| crate::ops::last_success_age(&relays, now));
        gauge(m::LAST_SUCCESS_AGE, last_success);
        let next_expiry = now.and_then(|now| {
            let first = relays
                .iter()
                .filter(|r| r.alive)
                .map(|r| r.expires_at)
                .min()?;
            (first - now).to_std().ok()
        });
        if self.blocked {
            let k = crate::ops::blocked_keys(&outbox, &self.db).await?;
            gauge(m::BLOCKED_KEYS, k.keys as f64);
            gauge(m::OLDEST_BLOCKED_AGE, k.oldest_age_seconds.unwrap_or(0.0));
        }
        Ok((b, next_expiry))
    }

    /// One pass: the heartbeat ([`Monitor::beat`]) unless `beat` is `None`, then the gauges;
    /// an error of either is logged and counted into `s`, and the other still runs. Returns
    /// whether the heartbeat was written, and how long until the first live heartbeat expires.
    async fn pass(
        &self,
        s: &mut WorkerSummary,
        observer: &Observer,
        beat: Option<(bool, bool, bool)>,
    ) -> (bool, Option<Duration>) {
        // The cleanup goes first: a heartbeat that shows means this pass wrote all it writes.
        if beat.is_some() {
            if let Err(e) = self.delete_expired().await {
                let what = "expired heartbeats not deleted; the next heartbeat tries again";
                observer.error(s, Op::Heartbeat, &e, what);
            }
        }
        let written = match beat {
            None => false,
            Some((first, round, success)) => match self.beat(first, round, success).await {
                Ok(()) => true,
                Err(e) => {
                    observer.error(s, Op::Heartbeat, &e, "heartbeat not written");
                    false
                }
            },
        };
        if beat.is_some() {
            if let Err(e) = self.count_delivered(observer).await {
                observer.error(
                    s,
                    Op::Heartbeat,
                    &e,
                    "deliveries not counted; the next heartbeat adds them",
                );
            }
        }
        match self.refresh_gauges().await {
            Ok((_, next_expiry)) => (written, next_expiry),
            Err(e) => {
                observer.error(s, Op::Gauges, &e, "gauges not refreshed");
                (written, None)
            }
        }
    }

    /// A pass at once and then every heartbeat interval until `cancel` fires; the interval
    /// counts from the start of a pass, so a slow pass does not push the next heartbeat
    /// towards its row's expiry. Between two, the gauges alone are refreshed just after a live
    /// heartbeat expires, so that `outbox_relays_alive` drops when another instance's
    /// heartbeat times out, not up to an interval later. A claim round or a publish since the
    /// previous written heartbeat shows in the worker's totals (`observer`); until one is
    /// written, each is the run's first.
    pub(crate) async fn run(&self, cancel: &CancellationToken, observer: &Observer) {
        let mut last: Option<WorkerSummary> = None;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut expiry: Option<tokio::time::Instant> = None;
        loop {
            let expired = async move {
                match expiry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let heartbeat = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                _ = tick.tick() => true,
                () = expired => false,
            };
            let now = observer.totals();
            let before = last.unwrap_or_default();
            let beat = heartbeat.then(|| {
                (
                    last.is_none(),
                    now.rounds > before.rounds,
                    now.published > before.published,
                )
            });
            let mut s = WorkerSummary::default();
            let (written, next_expiry) = self.pass(&mut s, observer, beat).await;
            if written {
                last = Some(now);
            }
            // Just past the expiry, so that the database's now is beyond it.
            expiry = next_expiry.map(|d| tokio::time::Instant::now() + d + EXPIRY_MARGIN);
            observer.commit(&mut s);
        }
    }
}
