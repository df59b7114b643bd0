//! Migrations of [sea-orm-outbox](https://docs.rs/sea-orm-outbox): the outbox table
//! `t_event_record` (the producer side) and the idempotent consumer's `t_consumed_message`.
//!
//! Two ways to apply them, both with `sea-orm-cli migrate`:
//!
//! 1. **Composed** (recommended): list the outbox's migrations in your own `Migrator`, so one
//!    history (`seaql_migrations`) holds your tables and the outbox's. Put them at the place in
//!    your list where you adopt the outbox (normally after your newest migration at that time),
//!    and add your later migrations after them: `migrate down -n 1` rolls back the last entry
//!    of the list that is applied. Name each migration (rather than splicing in
//!    [`migrations`]): `sea-orm-cli migrate generate` then keeps appending to the `vec!`, and a
//!    later outbox release that adds a migration (named in its release notes) goes at the end
//!    of your list like any new one, so list order stays the order of application.
//!
//!    ```
//!    use sea_orm_migration::prelude::*;
//!
//!    # mod m20250101_000001_create_order {
//!    #     use sea_orm_migration::prelude::*;
//!    #     #[derive(DeriveMigrationName)]
//!    #     pub struct Migration;
//!    #     #[async_trait::async_trait]
//!    #     impl MigrationTrait for Migration {
//!    #         async fn up(&self, _: &SchemaManager) -> Result<(), DbErr> { Ok(()) }
//!    #     }
//!    # }
//!    pub struct Migrator;
//!
//!    #[async_trait::async_trait]
//!    impl MigratorTrait for Migrator {
//!        fn migrations() -> Vec<Box<dyn MigrationTrait>> {
//!            vec![
//!                Box::new(m20250101_000001_create_order::Migration),
//!                Box::new(sea_orm_outbox_migration::CreateEventRecord),
//!                Box::new(sea_orm_outbox_migration::CreateConsumedMessage),
//!                Box::new(sea_orm_outbox_migration::AddEventHeaders),
//!                Box::new(sea_orm_outbox_migration::AddBizNoStatusIndex),
//!                // your later migrations go here
//!            ]
//!        }
//!    }
//!    ```
//!
//!    A service that only consumes events takes [`consumer_migrations`]; one that only
//!    produces them takes [`producer_migrations`].
//!
//! 2. **Standalone**: run this crate's [`Migrator`] beside your own. It records itself in the
//!    tracking table [`MIGRATION_TABLE`] (`seaql_migrations_outbox`), never in your
//!    `seaql_migrations`, so neither migrator sees the other's rows (sea-orm-migration refuses
//!    to run when its table holds a version it does not know). From this crate's directory:
//!    `sea-orm-cli migrate up -d migration -u URL`, or from code
//!    `Migrator::up(&db, None).await`.
//!
//! The migration names are stable (`m20261130_000001_create_t_event_record`,
//! `m20261130_000002_create_t_consumed_message`, `m20261201_000003_add_event_headers`,
//! `m20261202_000004_add_biz_no_status_index`); a later version adds new migrations and never
//! changes these.
//!
//! ## Upgrading
//! The release after the first (0.1.0) adds [`AddEventHeaders`]
//! (`m20261201_000003_add_event_headers`, the nullable `t_event_record.headers` column).
//! Composed: append `Box::new(AddEventHeaders)` to your list (after your newest migration) and
//! run `migrate up` before the new relay starts; standalone:
//! `migrate up` with this crate's [`Migrator`]. A relay or writer of the new version on a table
//! without the column fails with `OutboxError::SchemaOutdated`, naming the migration, writers
//! included (`with_event` names the column): run the migration BEFORE any binary of the new
//! version starts. The previous version keeps working on the migrated table, but its relays
//! send events without their headers: upgrade every relay before writers set headers (or turn
//! on the `opentelemetry` feature). Rolling back: stop the new binaries, then `migrate down -n
//! 1` drops the column (and the headers of events not yet sent).
//!
//! The next release adds [`AddBizNoStatusIndex`] (`m20261202_000004_add_biz_no_status_index`,
//! the index `idx_t_event_record_biz_no_status_id` of the ordered claim). Append it to your
//! list the same way and run `migrate up` before a relay runs in ordered mode (relays in the
//! default mode do not need it; without it the ordered claim still works, reading the key's
//! rows without the index). `migrate down -n 1` drops the index.
#![deny(missing_docs)]

use sea_orm_migration::sea_orm::DynIden;
use sea_orm_migration::sea_query::{Alias, IntoIden};
use sea_orm_migration::{MigrationTrait, MigratorTrait};

/// The migration `m20261130_000001_create_t_event_record`: the outbox table
/// `t_event_record` with `idx_t_event_record_status_next_retry` and
/// `idx_t_event_record_status_claimed_at`.
pub mod m20261130_000001_create_t_event_record;
/// The migration `m20261130_000002_create_t_consumed_message`: the idempotent consumer's
/// table `t_consumed_message`.
pub mod m20261130_000002_create_t_consumed_message;
/// The migration `m20261201_000003_add_event_headers`: the nullable `t_event_record.headers`
/// column (message headers as a JSON object of strings).
pub mod m20261201_000003_add_event_headers;
/// The migration `m20261202_000004_add_biz_no_status_index`: the index
/// `idx_t_event_record_biz_no_status_id (biz_no, status, id)` of the ordered claim.
pub mod m20261202_000004_add_biz_no_status_index;

/// Creates the outbox table `t_event_record` (the producer side).
pub use m20261130_000001_create_t_event_record::Migration as CreateEventRecord;
/// Creates the idempotent consumer's `t_consumed_message` (the consumer side).
pub use m20261130_000002_create_t_consumed_message::Migration as CreateConsumedMessage;
/// Adds `t_event_record.headers` (the producer side; after [`CreateEventRecord`]).
pub use m20261201_000003_add_event_headers::Migration as AddEventHeaders;
/// Adds `idx_t_event_record_biz_no_status_id` (the producer side; after [`CreateEventRecord`]).
pub use m20261202_000004_add_biz_no_status_index::Migration as AddBizNoStatusIndex;

/// The tracking table of the standalone [`Migrator`].
pub const MIGRATION_TABLE: &str = "seaql_migrations_outbox";

/// Every outbox migration, in the order to apply them: [`CreateEventRecord`],
/// [`CreateConsumedMessage`], [`AddEventHeaders`], then [`AddBizNoStatusIndex`] (the order in
/// which they were released, so that a standalone history stays in order across upgrades).
/// The standalone [`Migrator`] runs these; in your own `Migrator::migrations()` prefer naming
/// each one (see the crate documentation).
pub fn migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![
        Box::new(CreateEventRecord),
        Box::new(CreateConsumedMessage),
        Box::new(AddEventHeaders),
        Box::new(AddBizNoStatusIndex),
    ]
}

/// The migrations a service that writes and relays events needs: [`CreateEventRecord`],
/// [`AddEventHeaders`] and [`AddBizNoStatusIndex`].
pub fn producer_migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![
        Box::new(CreateEventRecord),
        Box::new(AddEventHeaders),
        Box::new(AddBizNoStatusIndex),
    ]
}

/// The migrations a service that only consumes events needs (the idempotent consumer's
/// table): [`CreateConsumedMessage`].
pub fn consumer_migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![Box::new(CreateConsumedMessage)]
}

/// The standalone migrator: every outbox migration ([`migrations`]), tracked in
/// [`MIGRATION_TABLE`] so that it can run beside the application's own migrator on one
/// database.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        migrations()
    }

    fn migration_table_name() -> DynIden {
        Alias::new(MIGRATION_TABLE).into_iden()
    }
}
