//! Creates `t_event_record` with its two composite indexes
//! (`idx_t_event_record_status_next_retry`, `idx_t_event_record_status_claimed_at`).
//!
//! Timestamps keep microseconds and UTC on every backend: Postgres `timestamptz`, MySQL/MariaDB
//! `DATETIME(6)` (the schema builder would give `DATETIME` with whole seconds there), SQLite text
//! in one fixed-width RFC 3339 form (`YYYY-MM-DDTHH:MM:SS.ffffff+00:00`) written only by the
//! database clock, so that text order is time order.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261130_000001_create_t_event_record"
    }
}

#[derive(DeriveIden)]
enum TEventRecord {
    Table,
    Id,
    BizNo,
    EventType,
    Payload,
    Status,
    RetryCount,
    NextRetryTime,
    ClaimOwner,
    ClaimedAt,
    LastError,
    CreateTime,
    UpdateTime,
}

/// A timestamp column with microsecond precision on `backend`.
fn timestamp(backend: DbBackend, col: TEventRecord) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
        _ => def.timestamp_with_time_zone(),
    };
    def
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let mut payload = ColumnDef::new(TEventRecord::Payload);
        match backend {
            // MySQL TEXT holds 64 KiB only; the default payload limit is 4 MiB.
            DbBackend::MySql => payload.custom(Alias::new("LONGTEXT")),
            _ => payload.text(),
        };
        manager
            .create_table(
                Table::create()
                    .table(TEventRecord::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(TEventRecord::Id)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(TEventRecord::BizNo)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TEventRecord::EventType)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(payload.not_null())
                    .col(
                        ColumnDef::new(TEventRecord::Status)
                            .string_len(16)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TEventRecord::RetryCount)
                            .integer()
                            .not_null()
                            .default(0),
                    )
                    .col(timestamp(backend, TEventRecord::NextRetryTime).not_null())
                    .col(
                        ColumnDef::new(TEventRecord::ClaimOwner)
                            .string_len(128)
                            .null(),
                    )
                    .col(timestamp(backend, TEventRecord::ClaimedAt).null())
                    .col(ColumnDef::new(TEventRecord::LastError).text().null())
                    .col(timestamp(backend, TEventRecord::CreateTime).not_null())
                    .col(timestamp(backend, TEventRecord::UpdateTime).not_null())
                    .to_owned(),
            )
            .await?;
        // Equality column first, range column second: the scan and the reclaim each read one
        // index range, already in order. Named after the table: Postgres index names are unique
        // per schema, and the application's own tables may well have an `idx_status_...`.
        manager
            .create_index(
                Index::create()
                    .name("idx_t_event_record_status_next_retry")
                    .table(TEventRecord::Table)
                    .col(TEventRecord::Status)
                    .col(TEventRecord::NextRetryTime)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_t_event_record_status_claimed_at")
                    .table(TEventRecord::Table)
                    .col(TEventRecord::Status)
                    .col(TEventRecord::ClaimedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Dropping the table drops its indexes on every backend.
        manager
            .drop_table(Table::drop().table(TEventRecord::Table).to_owned())
            .await
    }
}
