//! The relay: a worker that claims due events, publishes them and records the outcome, with no
//! lock held across broker I/O. One event's way, file by file: `claim` takes it into a free
//! send slot and into the worker's `Inflight` set; `slots` sends it in a task of its own
//! (`send`); `outcome` records what became of it with owner-guarded statements, and only then
//! does it leave `Inflight`, whose leases `maintenance/` renews meanwhile. `observe` counts,
//! exports and logs every outcome.
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::WorkerConfig;
use crate::driver::{Driver, RelayDb};
use crate::error::OutboxError;
use crate::instance::instance_id;
use crate::outbox::Outbox;
use crate::publisher::Publisher;
use crate::wake::{ListenState, Wake};
use maintenance::{Healer, LeaseRenewer, Monitor, Reclaimer, Retention};
use sea_orm_outbox_entity::event_record::Model;

mod claim;
mod health;
mod inflight;
mod maintenance;
mod observe;
mod outcome;
mod send;
mod slots;
mod summary;

pub(crate) use inflight::Inflight;
pub(crate) use observe::{Observer, Op};
pub use summary::WorkerSummary;

/// A relay instance. Run one per service instance (or several); they coordinate through the
/// table alone. It opens a pool of its own by default ([`WorkerConfig::relay_pool`]).
///
/// ```no_run
/// # async fn demo(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm_outbox::OutboxError> {
/// use std::sync::Arc;
/// use sea_orm_outbox::{LoggingPublisher, Worker, WorkerConfig};
/// use tokio_util::sync::CancellationToken;
///
/// let worker = Worker::new(db, Arc::new(LoggingPublisher), WorkerConfig::default().service_name("order"))?;
/// let cancel = CancellationToken::new();
/// let handle = tokio::spawn({ let cancel = cancel.clone(); async move { worker.run(cancel).await } });
/// // ... on shutdown:
/// cancel.cancel();
/// let summary = handle.await.expect("worker task");
/// # let _ = summary; Ok(()) }
/// ```
pub struct Worker {
    db: RelayDb,
    publisher: Arc<dyn Publisher>,
    config: WorkerConfig,
    owner: String,
    observer: Observer,
    reclaimer: Reclaimer,
    /// `None` when delivered events are kept ([`WorkerConfig::retention`]).
    retention: Option<Retention>,
    /// Set when the worker heals dead letters ([`WorkerConfig::heal_dead_letters`]).
    healer: Option<Healer>,
    renewer: LeaseRenewer,
    monitor: Monitor,
    /// Whether the worker's wake-on-commit is down (while it runs).
    listen: ListenState,
    /// Set once [`Worker::check_schema`] passed.
    schema_checked: tokio::sync::OnceCell<()>,
}

impl Outbox {
    /// A [`Worker`] relaying the events of this outbox's table: [`Worker::new`] with this
    /// outbox's table (its reclaims, lease renewals and gauges too).
    ///
    /// # Errors
    /// As [`Worker::new`].
    pub fn worker(
        &self,
        db: DatabaseConnection,
        publisher: Arc<dyn Publisher>,
        config: WorkerConfig,
    ) -> Result<Worker, OutboxError> {
        config.validate()?;
        Driver::with_feature(db.get_database_backend())?;
        let pool = config.relay_pool.connections(&db, config.wake_on_commit)?;
        let db = RelayDb::new(pool, config.statement_protocol)?.with_table(self.table_ref());
        let owner = config
            .instance_id
            .clone()
            .unwrap_or_else(|| instance_id("outbox"));
        let listen = ListenState::default();
        Ok(Worker {
            observer: Observer::new(&owner),
            reclaimer: Reclaimer::new(db.clone(), &config),
            retention: config
                .retention
                .map(|keep| Retention::new(db.clone(), keep)),
            healer: Healer::new(db.clone(), &config),
            renewer: LeaseRenewer::new(db.clone(), &config),
            monitor: Monitor::new(db.clone(), &config, &owner, listen.clone()),
            listen,
            db,
            publisher,
            config,
            owner,
            schema_checked: tokio::sync::OnceCell::new(),
        })
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker over the database of `db` (its table `t_event_record`: for another,
    /// [`Outbox::worker`]), sending through `publisher`.
    ///
    /// By default the worker opens a pool of its own with `db`'s options, lazily
    /// ([`crate::RelayPool::Own`]).
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] when `config` fails [`WorkerConfig::validate`], or when
    /// `db` is a backend whose feature this crate was built without (`postgres`, `mysql`,
    /// `sqlite`): the relay would run without that backend's wake-up and error handling.
    /// Also when `config.statement_protocol` is [`crate::StatementProtocol::Simple`] and `db`
    /// is not Postgres (MySQL/MariaDB and SQLite are refused, not silently ignored).
    pub fn new(
        db: DatabaseConnection,
        publisher: Arc<dyn Publisher>,
        config: WorkerConfig,
    ) -> Result<Self, OutboxError> {
        Outbox::default().worker(db, publisher, config)
    }

    /// The instance id this worker writes into `claim_owner` (each claim adds `#` and a claim
    /// token of its own).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The configuration in force.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The pool this worker uses (its own unless configured [`crate::RelayPool::Shared`]).
    pub fn db(&self) -> &DatabaseConnection {
        self.db.inner()
    }

    /// Totals so far.
    pub fn summary(&self) -> WorkerSummary {
        self.observer.totals()
    }

    /// Runs the relay until `cancel` fires, then returns the totals.
    ///
    /// Up to `send_concurrency` sends are in flight, each in a task of its own; the worker
    /// claims only as many events as it has free slots (at most `batch_size` per claim), and
    /// waits `poll_delay` (or a commit's notification) when a claim comes back short.
    /// Meanwhile it reclaims expired leases (every tenth of the lease, at most every 60 s),
    /// renews its own (every third), heals dead letters when configured (every quarter of the
    /// quiet period, 50 ms to 60 s; [`WorkerConfig::heal_dead_letters`]), and every heartbeat
    /// interval writes its heartbeat into `t_outbox_relay` and refreshes the gauges (see
    /// [`WorkerConfig::heartbeat_interval`]).
    /// Errors are logged and counted; the loops go on. On cancellation no new claim or send
    /// starts; sends in flight finish (bounded by the send timeout) and are recorded, and the
    /// worker deletes its heartbeat (an instance that dies instead leaves its row to expire).
    pub async fn run(&self, cancel: CancellationToken) -> WorkerSummary {
        let span = tracing::info_span!("outbox_worker", owner = %self.owner);
        tracing::info!(parent: &span, owner = %self.owner, "outbox worker started");
        let wake = Wake::new(
            self.db.inner(),
            &self.db.table().label(),
            self.config.wake_on_commit,
            self.listen.clone(),
        );
        let inflight = Inflight::default();
        let signals = slots::Signals::default();
        let sending = async {
            let pump = slots::Slots::new(self, &inflight, &cancel).run(&cancel, &signals);
            tokio::select! {
                biased;
                () = pump => {}
                () = signals.run_timer(wake, self.config.poll_delay) => {}
                () = self.renewer.run(&inflight, &self.observer) => {}
            }
        };
        let monitor = self.monitor.run(&cancel, &self.observer);
        let retention = async {
            if let Some(r) = &self.retention {
                r.run(&cancel, &self.observer).await;
            }
        };
        let healer = async {
            if let Some(healer) = &self.healer {
                healer.run(&cancel, &self.observer).await;
            }
        };
        async {
            tokio::join!(
                sending,
                self.reclaimer.run(&cancel, &self.observer),
                healer,
                monitor,
                retention
            )
        }
        .instrument(span.clone())
        .await;
        if let Err(e) = self.monitor.count_delivered(&self.observer).await {
            let mut s = WorkerSummary::default();
            let what = "the last deliveries were not added to t_outbox_counter at shutdown";
            self.observer.error(&mut s, Op::Heartbeat, &e, what);
            self.observer.commit(&mut s);
        }
        if let Err(e) = self.monitor.remove().await {
            let mut s = WorkerSummary::default();
            let what = "heartbeat not deleted at shutdown; it expires by itself";
            self.observer.error(&mut s, Op::Heartbeat, &e, what);
            self.observer.commit(&mut s);
        }
        let total = self.summary();
        tracing::info!(parent: &span, ?total, "outbox worker stopped");
        total
    }

    /// Checks once per worker that the outbox table has every column this version uses and
    /// that the relays' tables `t_outbox_relay` and `t_outbox_counter` exist. [`Worker::run`]
    /// checks before its first claim and, failing, logs the error at every poll and claims
    /// nothing; call this before `run` to refuse to start instead (`outbox relay` does, exit
    /// status 3).
    ///
    /// SQL (reads no row): `SELECT t_event_record.headers FROM t_event_record WHERE 1 = 0`, then
    /// `SELECT instance_id FROM t_outbox_relay WHERE 1 = 0`, then `SELECT delivered FROM
    /// t_outbox_counter WHERE 1 = 0`.
    ///
    /// # Errors
    /// [`OutboxError::TableMissing`] without the outbox table, [`OutboxError::SchemaOutdated`]
    /// without a newer migration's column or the relays' tables, [`OutboxError::Db`]
    /// otherwise.
    pub async fn check_schema(&self) -> Result<(), OutboxError> {
        self.schema_checked
            .get_or_try_init(|| async { crate::driver::check_schema(&self.db).await })
            .await?;
        Ok(())
    }

    /// One round: claims up to `batch_size` due events (per the claim strategy), sends them
    /// through the slots and returns once every outcome is recorded. One event's failure never
    /// stops the others. When `cancel` fires, no new send starts and unsent events go back to
    /// `WAIT`.
    ///
    /// # Errors
    /// Only when nothing could be claimed because of the database; errors on single events are
    /// logged and counted in the returned summary (the event is left to the reclaim).
    pub async fn run_once(&self, cancel: &CancellationToken) -> Result<WorkerSummary, OutboxError> {
        let inflight = Inflight::default();
        let mut round = WorkerSummary::default();
        let work = async {
            let batch = self.config.batch_size;
            let claimed = claim::Claimer::new(self, &inflight)
                .claim(batch, batch, cancel, None, &mut round)
                .await?;
            slots::Slots::new(self, &inflight, cancel)
                .drain(claimed.events, cancel, &mut round)
                .await;
            Ok(())
        }
        .instrument(tracing::debug_span!("outbox_round", owner = %self.owner));
        let result = tokio::select! {
            biased;
            r = work => r,
            () = self.renewer.run(&inflight, &self.observer) => Ok(()),
        };
        let out = round;
        self.observer.commit(&mut round);
        result.map(|()| out)
    }

    /// One reclaim pass: every `SENDING` row whose lease
    /// (`claimed_at`, database clock) is older than `lease` goes back to `WAIT` with
    /// `retry_count + 1`, or to `FAIL` once its retries are used up, in batches. Logs the
    /// count at WARN when there was any; returns how many leases it handled.
    ///
    /// # Errors
    /// A database error.
    pub async fn reclaim_once(&self) -> Result<u64, OutboxError> {
        let r = self.reclaimer.run_once().await?;
        let mut s = WorkerSummary::default();
        self.observer.reclaimed(&mut s, &r, self.config.lease);
        self.observer.commit(&mut s);
        Ok(r.total())
    }
}

impl Worker {
    /// One healing pass ([`WorkerConfig::heal_dead_letters`]): every dead letter of a transient
    /// failure (`last_error` starting `retryable: `) whose round is due goes back to `WAIT`, due
    /// now, in batches. Logs the count at INFO when there was any; returns how many it healed
    /// (0 when the worker heals no dead letter).
    ///
    /// SQL: `SELECT id FROM t_event_record WHERE status = 'FAIL' AND last_error LIKE 'retryable:
    /// %' AND ((retry_count <= :max_retries + 1 AND update_time < now - :quiet) OR (retry_count
    /// = :max_retries + 2 AND update_time < now - :quiet × 2) OR ...) LIMIT 1000`, then `UPDATE
    /// t_event_record SET status = 'WAIT', next_retry_time = now, claim_owner = NULL, claimed_at
    /// = NULL, update_time = now WHERE id IN (:ids)` and the same conditions, until a batch comes
    /// back short.
    ///
    /// # Errors
    /// A database error.
    pub async fn heal_once(&self) -> Result<u64, OutboxError> {
        let Some(healer) = &self.healer else {
            return Ok(0);
        };
        let n = healer.run_once().await?;
        let mut s = WorkerSummary::default();
        self.observer.healed(&mut s, n, &healer.policy());
        self.observer.commit(&mut s);
        Ok(n)
    }
}

/// `events` grouped by `key`, the groups in the order of their first event.
fn group_by<K: PartialEq>(events: Vec<Model>, key: impl Fn(&Model) -> K) -> Vec<(K, Vec<Model>)> {
    let mut groups: Vec<(K, Vec<Model>)> = Vec::new();
    for event in events {
        let k = key(&event);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, group)) => group.push(event),
            None => groups.push((k, vec![event])),
        }
    }
    groups
}
