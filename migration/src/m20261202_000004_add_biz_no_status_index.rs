//! Adds `idx_t_event_record_biz_no_status_id (biz_no, status, id)`: the index of the ordered
//! claim's predecessor check (sea-orm-outbox's `WorkerConfig::ordered`), "is an earlier event
//! of this key still `WAIT` or `SENDING` (or `FAIL`)", which reads one index range per status
//! (`biz_no = :k AND status = :s AND id < :id`) however many delivered events the key has.
//! `outbox stats` counts the keys blocked behind a dead letter with it too.
//!
//! Every backend builds it with a plain `CREATE INDEX` (Postgres takes a lock that blocks
//! writes to the table while it builds, MariaDB builds it online); on a large table prefer
//! creating it by hand first (`CREATE INDEX CONCURRENTLY` on Postgres): the migration then
//! finds it and leaves it alone.
use sea_orm_migration::prelude::*;

use crate::{table, TABLE};

/// The migration.
pub struct Migration;

/// The index's name.
pub const INDEX: &str = "idx_t_event_record_biz_no_status_id";

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261202_000004_add_biz_no_status_index"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::add_biz_no_index(manager, TABLE).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::drop_biz_no_index(manager, TABLE).await
    }
}
