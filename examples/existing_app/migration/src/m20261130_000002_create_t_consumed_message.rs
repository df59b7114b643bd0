//! The outbox's migration `m20261130_000002_create_t_consumed_message`: the idempotent
//! consumer's table `t_consumed_message`.
pub use sea_orm_outbox_migration::CreateConsumedMessage as Migration;
