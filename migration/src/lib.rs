//! Migrations of sea-orm-outbox: the outbox table `t_event_record`, then the idempotent
//! consumer's `t_consumed_message`.
//!
//! Run them with `sea-orm-cli migrate up -d migration -u URL`, `cargo run -p migration -- up -u
//! URL`, or from code with `Migrator::up(&db, None)`.
#![deny(missing_docs)]

pub use sea_orm_migration::prelude::*;
/// Whether a migration is applied (see `Migrator::get_migration_with_status`).
pub use sea_orm_migration::MigrationStatus;

mod m20261130_000001_create_t_event_record;
mod m20261130_000002_create_t_consumed_message;

/// The migrator holding every sea-orm-outbox migration, in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_create_t_event_record::Migration),
            Box::new(m20261130_000002_create_t_consumed_message::Migration),
        ]
    }
}
