//! The app's migrations: its own `t_order` first, then the outbox's tables, in one history
//! (`seaql_migrations`).
//!
//! This is the crate `sea-orm-cli migrate init` generates (lib `migration`), adopting the outbox
//! the composed way: the outbox's migrations are listed where the app adopted it, after its
//! newest migration at that time. Later migrations of the app go after them (`sea-orm-cli
//! migrate generate` appends to this `vec!`), so that `migrate down -n 1` keeps rolling back
//! the newest entry. A later outbox release that adds a migration names it in its release
//! notes; it is added at the end of the list like any new migration.
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
        vec![
            Box::new(m20250101_000001_create_t_order::Migration),
            // Adopting the outbox: `t_event_record` and `t_consumed_message`.
            Box::new(sea_orm_outbox_migration::CreateEventRecord),
            Box::new(sea_orm_outbox_migration::CreateConsumedMessage),
            // Upgrading the outbox to the version with event headers (`t_event_record.headers`).
            Box::new(sea_orm_outbox_migration::AddEventHeaders),
            // Upgrading to the version with ordered delivery (the index of its claim).
            Box::new(sea_orm_outbox_migration::AddBizNoStatusIndex),
            // The app's later migrations go here.
        ]
    }
}
