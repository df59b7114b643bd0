//! The outbox's migration `m20261202_000004_add_biz_no_status_index`: the index
//! `idx_t_event_record_biz_no_status_id` of ordered delivery.
pub use sea_orm_outbox_migration::AddBizNoStatusIndex as Migration;
