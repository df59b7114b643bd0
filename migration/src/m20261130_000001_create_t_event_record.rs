//! Creates `t_event_record` with its two composite indexes
//! (`idx_t_event_record_status_next_retry`, `idx_t_event_record_status_claimed_at`): the
//! schema of [`crate::create_outbox_table`] before the later migrations.
use sea_orm_migration::prelude::*;

use crate::{table, TABLE};

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261130_000001_create_t_event_record"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::create(manager, TABLE).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::drop(manager, TABLE).await
    }
}
