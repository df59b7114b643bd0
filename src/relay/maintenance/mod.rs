//! The relay's maintenance services, each with a bounded `run_once` (tests call it directly)
//! and a loop that logs an error and goes on: [`Reclaimer`] (expired leases back to `WAIT` or
//! `FAIL`), [`LeaseRenewer`] (the leases a worker holds), [`GaugeRefresher`] (the backlog gauges).
mod gauges;
mod reclaimer;
mod renewer;

#[cfg(test)]
mod tests;

pub(crate) use gauges::GaugeRefresher;
pub(crate) use reclaimer::{Reclaimer, ReclaimerConfig};
pub(crate) use renewer::{LeaseRenewer, LeaseRenewerConfig};
