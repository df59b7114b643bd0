//! The relay's maintenance services, built the way River builds its maintenance services: each
//! has a config with default constants and a `validate` step, a `run_once` that does one
//! bounded pass (tests call it directly), and a loop that logs an error and goes on.
//! [`crate::Worker::run`] composes them with the send slots.
//!
//! - [`Reclaimer`]: expired leases back to `WAIT` (or `FAIL` past the retry limit), in batches.
//! - [`LeaseRenewer`]: renews the leases of the events a worker holds.
//! - [`GaugeRefresher`]: the backlog gauges.
mod gauges;
mod reclaimer;
mod renewer;

pub use gauges::{GaugeRefresher, GAUGE_INTERVAL};
pub use reclaimer::{Reclaimer, ReclaimerConfig, DEFAULT_RECLAIM_BATCH};
pub use renewer::{LeaseRenewer, LeaseRenewerConfig, Renewal, DEFAULT_RENEW_BATCH};

pub use crate::driver::Reclaimed;

use crate::error::OutboxError;

/// `InvalidConfig` for a maintenance setting.
fn invalid(what: String) -> Result<(), OutboxError> {
    Err(OutboxError::InvalidConfig(what))
}
