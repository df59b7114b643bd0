//! `outbox relay`: check the settings, fit the broker's publisher to them (see
//! [`crate::publishers`]), wait for the database, then run a worker until Ctrl-C or SIGTERM.
use std::sync::Arc;

use crate::redact::redact_url;
use sea_orm::DatabaseConnection;
use sea_orm_outbox::{CancellationToken, Outbox, OutboxError, Publisher, WorkerConfig};

use crate::args::RelayArgs;
use crate::connect::wait_for_database;
use crate::failure::Failure;
use crate::publishers::Settings;

/// Runs `outbox relay` on the database at `url` until it is stopped.
pub(crate) async fn relay(url: &str, args: &RelayArgs, outbox: &Outbox) -> Result<(), Failure> {
    // Settings that cannot work are refused before waiting for anything.
    let config = args.config();
    config.validate()?;
    // The tool's send timeout is its publisher's: the one send-timeout rule applies to it
    // whatever the renewal setting (the broker client's timeout is fitted to the same limit).
    config.check_publisher_send_timeout("--send-timeout", config.send_timeout)?;
    let broker = crate::publishers::settings(args, &config)?;
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
    let result = match broker {
        Some(broker) if !args.dry_run => {
            relay_on(outbox, db.clone(), url, args, config, broker, cancel).await
        }
        // A dry run (without a broker, nothing else got this far).
        _ => dry_run(outbox, &db, url, config.poll_delay, cancel).await,
    };
    db.close().await.ok();
    result
}

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
    broker: Settings,
    cancel: CancellationToken,
) -> Result<(), Failure> {
    let (publisher, handle, target): (Arc<dyn Publisher>, _, String) =
        crate::publishers::start(broker).await?;
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
