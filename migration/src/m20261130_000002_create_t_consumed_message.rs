//! Creates `t_consumed_message`, the idempotent consumer's record of processed messages.
//!
//! One row per (consumer group, message id) a consumer has processed; the composite primary key
//! is the unique key the consumer helper relies on: inserting an id that is already there
//! affects no row, so the message is a duplicate. `consumed_at` keeps microseconds like the
//! outbox table (Postgres `timestamptz`, MySQL/MariaDB `DATETIME(6)`, SQLite RFC 3339 text).
use sea_orm_migration::prelude::*;

use crate::driver;

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261130_000002_create_t_consumed_message"
    }
}

#[derive(DeriveIden)]
enum TConsumedMessage {
    Table,
    ConsumerGroup,
    MsgId,
    ConsumedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut consumed_at =
            driver::timestamp(manager.get_database_backend(), TConsumedMessage::ConsumedAt);
        manager
            .create_table(
                Table::create()
                    .table(TConsumedMessage::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(TConsumedMessage::ConsumerGroup)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(TConsumedMessage::MsgId)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(consumed_at.not_null())
                    // The unique key on (consumer_group, msg_id).
                    .primary_key(
                        Index::create()
                            .name("pk_consumed_group_msg")
                            .col(TConsumedMessage::ConsumerGroup)
                            .col(TConsumedMessage::MsgId),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TConsumedMessage::Table).to_owned())
            .await
    }
}
