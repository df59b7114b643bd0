//! `outbox relay`: check the settings, fit the RocketMQ producer to them, wait for the
//! database, then run a worker until Ctrl-C or SIGTERM.
use std::sync::Arc;

use crate::redact::redact_url;
use sea_orm::DatabaseConnection;
use sea_orm_outbox::{CancellationToken, Outbox, OutboxError, Publisher, WorkerConfig};

use crate::args::RelayArgs;
use crate::connect::wait_for_database;
use crate::failure::Failure;

/// Runs `outbox relay` on the database at `url` until it is stopped.
pub(crate) async fn relay(url: &str, args: &RelayArgs, outbox: &Outbox) -> Result<(), Failure> {
    // Settings that cannot work are refused before waiting for anything.
    let config = args.config();
    config.validate()?;
    // The tool's send timeout is its publisher's: the one send-timeout rule applies to it
    // whatever the renewal setting (the RocketMQ client's timeout is fitted to the same limit).
    config.check_publisher_send_timeout("--send-timeout", config.send_timeout)?;
    let rocketmq = match args.rocketmq_namesrv.as_deref().map(str::trim) {
        None if args.dry_run => None,
        // A relay that marked events delivered without sending them would lose every one: no
        // broker is a mistake (a variable missing from a deployment), never a default.
        None => {
            return Err(Failure::Outbox(OutboxError::InvalidConfig(
                NO_BROKER.into(),
            )))
        }
        Some("") => {
            return Err(Failure::Outbox(OutboxError::InvalidConfig(format!(
                "--rocketmq-namesrv / ROCKETMQ_NAMESRV_ADDR is set but empty; {NO_BROKER}"
            ))))
        }
        // Checked in a dry run too (which never contacts the broker), so that a dry run fails
        // where the real one would.
        Some(addr) => Some(rmq::config(addr, args, &config)?),
    };
    let cancel = CancellationToken::new();
    let signal = shutdown_signal();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            signal.await;
            tracing::info!("shutdown requested");
            cancel.cancel();
        }
    });
    // Wait for the database, and refuse to start without the table rather than log the error
    // every round.
    let Some(db) = wait_for_database(url, outbox, args.connect_timeout, &cancel).await? else {
        println!("relay stopped before the database could be reached");
        return Ok(());
    };
    let result = match rocketmq {
        Some(rocketmq) if !args.dry_run => {
            relay_on(outbox, db.clone(), url, args, config, rocketmq, cancel).await
        }
        // A dry run (without a broker, nothing else got this far).
        _ => dry_run(outbox, &db, url, config.poll_delay, cancel).await,
    };
    db.close().await.ok();
    result
}

/// Why `outbox relay` refuses to start without a broker.
const NO_BROKER: &str = "no broker to publish to: give the RocketMQ name server \
    (--rocketmq-namesrv or ROCKETMQ_NAMESRV_ADDR, host:port), or --dry-run to see what would be \
    sent without sending, claiming or marking anything";

/// `outbox relay --dry-run`: until `cancel`, every `poll_delay` logs how many events wait and
/// how long the most overdue one has been due; reads only, so nothing is sent, claimed or
/// marked.
async fn dry_run(
    outbox: &Outbox,
    db: &DatabaseConnection,
    url: &str,
    poll_delay: std::time::Duration,
    cancel: CancellationToken,
) -> Result<(), Failure> {
    tracing::info!(database = %redact_url(url), "relay started (dry run): nothing is sent, claimed or marked");
    loop {
        match sea_orm_outbox::ops::backlog(outbox, db).await {
            Ok(b) => tracing::info!(
                wait = b.wait,
                sending = b.sending,
                dead_letters = b.fail,
                most_overdue_seconds = b.oldest_wait_age_seconds,
                "dry run: {} event(s) waiting (due or backing off); nothing sent",
                b.wait
            ),
            Err(e) => tracing::warn!(error = %e, "dry run: cannot read the backlog"),
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(poll_delay) => {}
        }
    }
    println!("relay stopped (dry run): nothing was sent");
    Ok(())
}

/// The relay proper, once the database answers: publisher, worker, run until `cancel`.
async fn relay_on(
    outbox: &Outbox,
    db: DatabaseConnection,
    url: &str,
    // Read only by the fault injection of a `chaos-testing` build.
    #[cfg_attr(not(feature = "chaos-testing"), expect(unused_variables))] args: &RelayArgs,
    config: WorkerConfig,
    rocketmq: rmq::RocketMqConfig,
    cancel: CancellationToken,
) -> Result<(), Failure> {
    let (publisher, handle, target): (Arc<dyn Publisher>, _, String) = rmq::start(rocketmq).await?;
    #[cfg(feature = "chaos-testing")]
    let publisher = crate::chaos::inject(&args.chaos, publisher);
    let worker = match outbox.worker(db, publisher, config) {
        Ok(w) => w,
        Err(e) => {
            handle.shutdown().await;
            return Err(e.into());
        }
    };
    // A table lacking a newer migration refuses the start (exit status 3); any other error is
    // left to the worker, which retries.
    if let Err(e) = worker.check_schema().await {
        if matches!(
            e,
            OutboxError::SchemaOutdated(_) | OutboxError::TableMissing(_)
        ) {
            drop(worker);
            handle.shutdown().await;
            return Err(e.into());
        }
    }
    tracing::info!(owner = %worker.owner(), database = %redact_url(url), table = outbox.table_name(), publisher = %target, config = ?worker.config(), "relay started");
    let summary = worker.run(cancel).await;
    // The worker holds the other reference to the publisher: drop it, then stop the producer.
    drop(worker);
    handle.shutdown().await;
    println!("relay stopped: {summary:?}");
    Ok(())
}

/// `outbox relay` publishing to RocketMQ.
mod rmq {
    use std::sync::Arc;

    use sea_orm_outbox::{OutboxError, Publisher, WorkerConfig};
    pub use sea_orm_outbox_rocketmq::RocketMqConfig;
    use sea_orm_outbox_rocketmq::{Credentials, RocketMqPublisher, SecretKey};

    use crate::args::RelayArgs;

    /// The publisher, kept to stop it at the end.
    pub struct Handle(Arc<RocketMqPublisher>);

    /// The producer's configuration, checked: name server `addr`, topic and group when given,
    /// send timeout fitted to the worker (at most its send timeout and a third of its lease).
    pub fn config(
        addr: &str,
        args: &RelayArgs,
        worker: &WorkerConfig,
    ) -> Result<RocketMqConfig, OutboxError> {
        let timeout = worker.publisher_send_timeout_limit();
        let mut config = RocketMqConfig::new(addr).send_timeout(timeout);
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        if let Some(t) = given(&args.topic) {
            config = config.topic(t);
        }
        if let Some(g) = given(&args.producer_group) {
            config = config.producer_group(g);
        }
        if let Some(spec) = given(&args.topic_map) {
            config = config.topics_from_spec(&spec)?;
        }
        let secret = args
            .rocketmq_secret_key
            .as_ref()
            .map(|s| SecretKey::new(s.expose().trim()))
            .filter(|s| !s.is_empty());
        config.credentials = Credentials::from_parts(given(&args.rocketmq_access_key), secret)?;
        if let Some(verify) = args.rocketmq_verify_credentials {
            config = config.verify_credentials(verify);
        }
        if let Some(f) = given(&args.rocketmq_failover) {
            config = config.failover(f.parse()?);
        }
        if let Some(n) = args.rocketmq_max_message_bytes {
            config = config.max_message_bytes(n);
        }
        if let Some(n) = args.rocketmq_max_batch_bytes {
            config = config.max_batch_bytes(n);
        }
        config.validate_for(worker)?;
        Ok(config)
    }

    /// Starts the producer.
    pub async fn start(
        config: RocketMqConfig,
    ) -> Result<(Arc<dyn Publisher>, Handle, String), OutboxError> {
        let access_key = config.credentials.as_ref().map(|c| c.access_key());
        let mut target = format!(
            "rocketmq {} topic {} access key {}",
            config.namesrv_addr,
            config.topic,
            access_key.unwrap_or("-")
        );
        for (event_type, topic) in &config.topics {
            target.push_str(&format!(", {event_type} to {topic}"));
        }
        let p = Arc::new(RocketMqPublisher::start(config).await?);
        Ok((p.clone(), Handle(p), target))
    }

    impl Handle {
        /// Stops the producer once the worker has let go of it.
        pub async fn shutdown(self) {
            match Arc::try_unwrap(self.0) {
                Ok(p) => p.shutdown().await,
                Err(_) => tracing::warn!("RocketMQ publisher still shared at exit; not flushed"),
            }
        }
    }
}

/// A future that resolves on Ctrl-C or (on Unix) SIGTERM. The handlers are installed by this
/// call, not on the first poll, so a signal that arrives right after it is not lost.
#[cfg(unix)]
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    async move {
        tokio::select! {
            () = next_signal(int.as_mut()) => {}
            () = next_signal(term.as_mut()) => {}
        }
    }
}

/// Resolves when `signal` is next received; never without a handler.
#[cfg(unix)]
async fn next_signal(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// A future that resolves on Ctrl-C.
#[cfg(not(unix))]
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
