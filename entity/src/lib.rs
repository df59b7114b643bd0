//! SeaORM entities of sea-orm-outbox.
//!
//! [`event_record`] is the outbox table `t_event_record` described in the project's design: one
//! row per event, written in the business transaction and relayed by the worker.
//! [`consumed_message`] is the idempotent consumer's record of processed messages.
//! [`outbox_relay`] is the relays' heartbeat table `t_outbox_relay`, [`outbox_counter`] their
//! count of delivered events `t_outbox_counter`.
#![deny(missing_docs)]

pub mod consumed_message;
pub mod event_record;
pub mod outbox_counter;
pub mod outbox_relay;

pub use event_record::EventStatus;
