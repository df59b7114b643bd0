//! The outbox's migration `m20261206_000005_create_t_outbox_relay`: the relays' heartbeat
//! table `t_outbox_relay`.
pub use sea_orm_outbox_migration::CreateOutboxRelay as Migration;
