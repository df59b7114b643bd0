//! Adds `t_event_record.headers`: the event's message headers, a JSON object of strings (for
//! example `{"tenant":"acme","traceparent":"00-…-01"}`), or `NULL` when the event has none.
//!
//! The relay sends each header as a RocketMQ user property (see `NewEvent::header` in
//! sea-orm-outbox). A nullable column added without a default: rows written before the
//! migration read as "no headers", and on every backend the `ALTER TABLE` only changes the
//! table's definition (Postgres and MariaDB add a nullable column without rewriting the rows;
//! SQLite's `ADD COLUMN` never rewrites).
use sea_orm_migration::prelude::*;

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000003_add_event_headers"
    }
}

#[derive(DeriveIden)]
enum TEventRecord {
    Table,
    Headers,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Idempotent: a table that has the column already (added by hand, or by the other of
        // the two ways to migrate) is left as it is.
        if manager.has_column("t_event_record", "headers").await? {
            return Ok(());
        }
        manager
            .alter_table(
                Table::alter()
                    .table(TEventRecord::Table)
                    .add_column(ColumnDef::new(TEventRecord::Headers).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite drops a column since 3.35 (sqlx bundles a later one).
        manager
            .alter_table(
                Table::alter()
                    .table(TEventRecord::Table)
                    .drop_column(TEventRecord::Headers)
                    .to_owned(),
            )
            .await
    }
}
