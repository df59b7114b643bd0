//! The app's migrations: its own `t_order` first, then the outbox's tables, in one history
//! (`seaql_migrations`).
//!
//! This is the crate `sea-orm-cli migrate init` generates (lib `migration`), adopting the outbox
//! the composed way. Each outbox migration has a module of its own in this crate that only
//! re-exports it (`pub use sea_orm_outbox_migration::CreateEventRecord as Migration;`), because
//! `sea-orm-cli migrate generate` rebuilds the `vec!` below from the `mod` lines of this file,
//! in their order: an entry that no `mod` line names is dropped, and the next `migrate up`
//! fails on the applied migration whose file is missing. The outbox's modules follow the app's
//! newest migration of the day it adopted the outbox; `migrate generate` adds the app's later
//! ones after the last `mod` line, so that `migrate down -n 1` keeps rolling back the newest
//! entry. A later outbox release that adds a migration names it in its release notes; it gets
//! a module at the end like any new migration. The comment lines between the `mod` groups keep
//! rustfmt from sorting the groups into one another.
//!
//! ```text
//! sea-orm-cli migrate up -d examples/existing_app/migration -u URL
//! sea-orm-cli migrate status -d examples/existing_app/migration -u URL
//! sea-orm-cli migrate generate NAME -d examples/existing_app/migration
//! ```
pub use sea_orm_migration::prelude::*;

mod m20250101_000001_create_t_order;
// Adopting the outbox: `t_event_record` and `t_consumed_message`.
mod m20261130_000001_create_t_event_record;
mod m20261130_000002_create_t_consumed_message;
// Upgrading the outbox to the version with event headers (`t_event_record.headers`).
mod m20261201_000003_add_event_headers;
// Upgrading to the version with ordered delivery (the index of its claim).
mod m20261202_000004_add_biz_no_status_index;
// Upgrading to the version with relay heartbeats (`t_outbox_relay`, read by `outbox health`).
mod m20261206_000005_create_t_outbox_relay;

/// The app's migrator: its own migrations and the outbox's, in the order they were adopted.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20250101_000001_create_t_order::Migration),
            Box::new(m20261130_000001_create_t_event_record::Migration),
            Box::new(m20261130_000002_create_t_consumed_message::Migration),
            Box::new(m20261201_000003_add_event_headers::Migration),
            Box::new(m20261202_000004_add_biz_no_status_index::Migration),
            Box::new(m20261206_000005_create_t_outbox_relay::Migration),
        ]
    }
}
