//! The app's migrations: its own `t_order` first, then the outbox's tables, in one history
//! (`seaql_migrations`).
//!
//! This is the crate `sea-orm-cli migrate init` generates (lib `migration`), adopting the outbox
//! the composed way: `sea_orm_outbox_migration::migrations()` is appended where the app adopted
//! it, after its newest migration at that time. Later migrations of the app go after it, so that
//! `migrate down -n 1` keeps rolling back the newest entry.
//!
//! ```text
//! sea-orm-cli migrate up -d examples/existing_app/migration -u URL
//! sea-orm-cli migrate status -d examples/existing_app/migration -u URL
//! ```
pub use sea_orm_migration::prelude::*;

mod m20250101_000001_create_t_order;

/// The app's migrator: its own migrations and the outbox's, in the order they were adopted.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut migrations: Vec<Box<dyn MigrationTrait>> =
            vec![Box::new(m20250101_000001_create_t_order::Migration)];
        // Adopting the outbox: `t_event_record` and `t_consumed_message`.
        migrations.extend(sea_orm_outbox_migration::migrations());
        // The app's later migrations go here.
        migrations
    }
}
