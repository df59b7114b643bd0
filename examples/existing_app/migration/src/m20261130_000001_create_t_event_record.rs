//! The outbox's migration `m20261130_000001_create_t_event_record`: the outbox table
//! `t_event_record` (the producer side).
pub use sea_orm_outbox_migration::CreateEventRecord as Migration;
