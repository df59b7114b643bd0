//! The app's first migration, from before it adopted the outbox: the `t_order` table.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(TOrder::Table)
                    .if_not_exists()
                    .col(big_pk_auto(TOrder::Id))
                    .col(string_len_uniq(TOrder::OrderNo, 64))
                    .col(big_integer(TOrder::Amount))
                    .col(timestamp_with_time_zone_default_now(TOrder::CreatedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TOrder::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum TOrder {
    Table,
    Id,
    OrderNo,
    Amount,
    CreatedAt,
}
