//! Creates `t_outbox_relay`, the relays' heartbeat table: one row per running relay instance
//! of an outbox table (primary key `(outbox_table, instance_id)`), written by the instance
//! every heartbeat interval, so that any instance and the `outbox` tool can tell which relays
//! are alive. Its timestamps keep microseconds like the outbox table (Postgres `timestamptz`,
//! MySQL/MariaDB `DATETIME(6)`, SQLite RFC 3339 text). Also creates `t_outbox_counter`, the
//! relays' count of delivered events: one row per outbox table (primary key `outbox_table`),
//! to which each instance adds what it delivered at every heartbeat.
use sea_orm_migration::prelude::*;

use crate::driver;

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261206_000005_create_t_outbox_relay"
    }
}

#[derive(DeriveIden)]
enum TOutboxRelay {
    Table,
    OutboxTable,
    InstanceId,
    Version,
    StartedAt,
    HeartbeatAt,
    ExpiresAt,
    LastRoundAt,
    LastSuccessAt,
}

#[derive(DeriveIden)]
enum TOutboxCounter {
    Table,
    OutboxTable,
    Delivered,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let time = |col| driver::timestamp(backend, col);
        manager
            .create_table(
                Table::create()
                    .table(TOutboxRelay::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(TOutboxRelay::OutboxTable)
                            .string_len(128)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TOutboxRelay::InstanceId)
                            .string_len(128)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TOutboxRelay::Version)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(time(TOutboxRelay::StartedAt).not_null())
                    .col(time(TOutboxRelay::HeartbeatAt).not_null())
                    .col(time(TOutboxRelay::ExpiresAt).not_null())
                    .col(time(TOutboxRelay::LastRoundAt).null())
                    .col(time(TOutboxRelay::LastSuccessAt).null())
                    .primary_key(
                        Index::create()
                            .name("pk_outbox_relay")
                            .col(TOutboxRelay::OutboxTable)
                            .col(TOutboxRelay::InstanceId),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TOutboxCounter::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(TOutboxCounter::OutboxTable)
                            .string_len(128)
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(TOutboxCounter::Delivered)
                            .big_integer()
                            .not_null(),
                    )
                    .col(driver::timestamp(backend, TOutboxCounter::UpdatedAt).not_null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(TOutboxCounter::Table)
                    .if_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(TOutboxRelay::Table).to_owned())
            .await
    }
}
