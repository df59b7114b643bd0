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

/// The migration.
pub struct Migration;

/// The index this migration adds.
pub const INDEX: &str = "idx_t_event_record_biz_no_status_id";

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261202_000004_add_biz_no_status_index"
    }
}

#[derive(DeriveIden)]
enum TEventRecord {
    Table,
    BizNo,
    Status,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Idempotent: an index of that name made by hand (or by the other way to migrate) is
        // left as it is.
        if manager.has_index("t_event_record", INDEX).await? {
            return Ok(());
        }
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table(TEventRecord::Table)
                    .col(TEventRecord::BizNo)
                    .col(TEventRecord::Status)
                    .col(TEventRecord::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_index("t_event_record", INDEX).await? {
            return Ok(());
        }
        manager
            .drop_index(
                Index::drop()
                    .name(INDEX)
                    .table(TEventRecord::Table)
                    .to_owned(),
            )
            .await
    }
}
