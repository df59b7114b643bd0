//! The relay's maintenance services, each with a bounded pass (tests call it directly) and a
//! loop that logs an error and goes on: [`Reclaimer`] (expired leases back to `WAIT` or
//! `FAIL`), [`Healer`] (dead letters of transient failures back to `WAIT`, when configured),
//! [`LeaseRenewer`] (the leases a worker holds) and [`Retention`] (delivered events past the
//! retention period) over [`every`], [`Monitor`] (the
//! worker's heartbeat and the gauges) with a loop of its own that remembers the previous
//! pass.
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::relay::{Observer, WorkerSummary};

mod healer;
mod monitor;
mod reclaimer;
mod renewer;
mod retention;

#[cfg(test)]
mod tests;

pub(crate) use healer::Healer;
pub(crate) use monitor::Monitor;
pub(crate) use reclaimer::Reclaimer;
pub(crate) use renewer::LeaseRenewer;
pub(crate) use retention::Retention;

/// Runs `pass` at once and then every `interval` until `cancel` fires; what a pass counts (its
/// errors too, logged by the pass) reaches `observer`'s totals after it.
async fn every<F: Future<Output = WorkerSummary>>(
    interval: Duration,
    cancel: &CancellationToken,
    observer: &Observer,
    mut pass: impl FnMut() -> F,
) {
    while !cancel.is_cancelled() {
        observer.commit(&mut pass().await);
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
