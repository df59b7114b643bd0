//! Adds `t_event_record.headers`: the event's message headers, a JSON object of strings (for
//! example `{"tenant":"acme","traceparent":"00-…-01"}`), or `NULL` when the event has none.
//!
//! The relay sends each header as a RocketMQ user property (see `NewEvent::header` in
//! sea-orm-outbox). A nullable column added without a default: rows written before the
//! migration read as "no headers", and on every backend the `ALTER TABLE` only changes the
//! table's definition (Postgres and MariaDB add a nullable column without rewriting the rows;
//! SQLite's `ADD COLUMN` never rewrites).
use sea_orm_migration::prelude::*;

use crate::{table, TABLE};

/// The migration.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261201_000003_add_event_headers"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::add_headers(manager, TABLE).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        table::drop_headers(manager, TABLE).await
    }
}
