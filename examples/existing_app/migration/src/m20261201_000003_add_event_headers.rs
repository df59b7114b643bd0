//! The outbox's migration `m20261201_000003_add_event_headers`: the nullable
//! `t_event_record.headers` column (event headers).
pub use sea_orm_outbox_migration::AddEventHeaders as Migration;
