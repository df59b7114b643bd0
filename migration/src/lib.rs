//! Migrations of [sea-orm-outbox](https://docs.rs/sea-orm-outbox): the outbox table
//! `t_event_record`, the relays' heartbeat table `t_outbox_relay` and their count of delivered
//! events `t_outbox_counter` (the producer side), and
//! the idempotent consumer's `t_consumed_message`.
//!
//! Two ways to apply them, both with `sea-orm-cli migrate`; use one, never both on one database:
//!
//! 1. **Composed** (recommended): list the outbox's migrations in your own `Migrator`, so one
//!    history (`seaql_migrations`) holds your tables and the outbox's. Give each outbox
//!    migration a module of its own in your migration crate, a file that only re-exports it:
//!    `sea-orm-cli migrate generate` rebuilds the `vec!` of your `lib.rs` from its `mod` lines
//!    (in their order, the new one last), and drops an entry that no `mod` line names, after
//!    which `migrate up` fails with "Migration file of version '...' is missing". Put the
//!    outbox's modules where you adopt it (after your newest migration of that day); `migrate
//!    generate` adds your later ones after them, so `migrate down -n 1` rolls back your newest.
//!
//!    ```ignore
//!    // migration/src/m20261130_000001_create_t_event_record.rs, and one such file per
//!    // migration: m20261130_000002_create_t_consumed_message.rs (CreateConsumedMessage),
//!    // m20261201_000003_add_event_headers.rs (AddEventHeaders),
//!    // m20261202_000004_add_biz_no_status_index.rs (AddBizNoStatusIndex),
//!    // m20261206_000005_create_t_outbox_relay.rs (CreateOutboxRelay)
//!    pub use sea_orm_outbox_migration::CreateEventRecord as Migration;
//!
//!    // migration/src/lib.rs
//!    pub use sea_orm_migration::prelude::*;
//!
//!    mod m20250101_000001_create_order;
//!    // The outbox (a comment line keeps rustfmt from sorting these into the lines above):
//!    mod m20261130_000001_create_t_event_record;
//!    mod m20261130_000002_create_t_consumed_message;
//!    mod m20261201_000003_add_event_headers;
//!    mod m20261202_000004_add_biz_no_status_index;
//!    mod m20261206_000005_create_t_outbox_relay;
//!
//!    pub struct Migrator;
//!
//!    #[async_trait::async_trait]
//!    impl MigratorTrait for Migrator {
//!        fn migrations() -> Vec<Box<dyn MigrationTrait>> {
//!            vec![
//!                Box::new(m20250101_000001_create_order::Migration),
//!                Box::new(m20261130_000001_create_t_event_record::Migration),
//!                Box::new(m20261130_000002_create_t_consumed_message::Migration),
//!                Box::new(m20261201_000003_add_event_headers::Migration),
//!                Box::new(m20261202_000004_add_biz_no_status_index::Migration),
//!                Box::new(m20261206_000005_create_t_outbox_relay::Migration),
//!            ]
//!        }
//!    }
//!    ```
//!
//!    `examples/existing_app/migration` in the repository is this layout, compiled and run by
//!    CI. A service that only consumes events lists `CreateConsumedMessage` alone
//!    ([`consumer_migrations`]); one that only produces them the other four
//!    ([`producer_migrations`]).
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
//! `m20261202_000004_add_biz_no_status_index`, `m20261206_000005_create_t_outbox_relay`); a
//! later version adds new migrations and never changes these.
//!
//! ## Upgrading
//! A release that adds a migration names it in its release notes. Composed: give it a module
//! at the end of your list, like any new migration; standalone: `migrate up` with this crate's
//! [`Migrator`]. Run it before any binary of the new version starts.
//!
//! - [`AddEventHeaders`] (`m20261201_000003_add_event_headers`, the nullable
//!   `t_event_record.headers` column): a relay or writer of the new version on a table without
//!   the column fails with `OutboxError::SchemaOutdated`, naming the migration. The previous
//!   version keeps working on the migrated table, but its relays send events without their
//!   headers: upgrade every relay before writers set headers (or turn on the `opentelemetry`
//!   feature). Rolling back: stop the new binaries, then `migrate down -n 1` drops the column
//!   (and the headers of events not yet sent).
//! - [`AddBizNoStatusIndex`] (`m20261202_000004_add_biz_no_status_index`, the index
//!   `idx_t_event_record_biz_no_status_id` of the ordered claim): run it before a relay runs in
//!   ordered mode (relays in the default mode do not need it; without it the ordered claim
//!   still works, reading the key's rows without the index). `migrate down -n 1` drops the
//!   index.
//! - [`CreateOutboxRelay`] (`m20261206_000005_create_t_outbox_relay`, the relays' heartbeat
//!   table `t_outbox_relay`): a relay of the new version refuses to start without it
//!   (`OutboxError::SchemaOutdated`, naming the migration); relays of the previous version
//!   ignore the table. `outbox health` and `outbox relays` read it. `migrate down -n 1` drops
//!   it (and the heartbeats in it).
#![deny(missing_docs)]

use sea_orm_migration::sea_orm::{DbErr, DynIden};
use sea_orm_migration::sea_query::{Alias, IntoIden};
use sea_orm_migration::{MigrationTrait, MigratorTrait, SchemaManager};

mod driver;
mod table;

/// The outbox table the migrations of this crate create and change: `t_event_record`.
pub const TABLE: &str = "t_event_record";

/// Checks an outbox table (or Postgres schema) name: 1 to 40 ASCII letters, digits and
/// underscores, not starting with a digit (so that the index names of [`create_outbox_table`]
/// fit every backend's 63-byte limit, and the name needs no quoting anywhere). The rule of
/// [`create_outbox_table`] and of `sea_orm_outbox::Outbox::table`.
///
/// # Errors
/// [`DbErr::Custom`] naming the rule.
pub fn check_table_name(name: &str) -> Result<(), DbErr> {
    table::check_name(name)
}

/// Creates an outbox table named `table`, in the schema the migrations of this crate give
/// `t_event_record` (every column, the indexes `idx_<table>_status_next_retry`,
/// `idx_<table>_status_claimed_at` and `idx_<table>_biz_no_status_id`), for a table of the
/// application's naming. Call it from a migration of your own, and
/// [`drop_outbox_table`] from its `down`:
///
/// ```ignore
/// // migration/src/m20261206_000001_create_outbox_events.rs
/// use sea_orm_migration::prelude::*;
///
/// #[derive(DeriveMigrationName)]
/// pub struct Migration;
///
/// #[async_trait::async_trait]
/// impl MigrationTrait for Migration {
///     async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
///         sea_orm_outbox_migration::create_outbox_table(manager, "outbox_events").await
///     }
///     async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
///         sea_orm_outbox_migration::drop_outbox_table(manager, "outbox_events").await
///     }
/// }
/// ```
///
/// The table is created in the connection's current schema (Postgres: the first of its
/// `search_path`). Give the same name to the `sea_orm_outbox::Outbox` that writes and relays
/// its events (`Outbox::new().table("outbox_events")`). A later release that changes the
/// schema adds a function for the change beside the migration that makes it on
/// `t_event_record`.
///
/// # Errors
/// [`DbErr::Custom`] when `table` is not a name [`check_table_name`] accepts; the database's error, for one when
/// `table` exists already with its indexes.
pub async fn create_outbox_table(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    table::check_name(table)?;
    table::create(manager, table).await?;
    table::add_headers(manager, table).await?;
    table::add_biz_no_index(manager, table).await
}

/// Drops the outbox table `table` with its indexes (and the events in it).
///
/// # Errors
/// [`DbErr::Custom`] for a name [`create_outbox_table`] refuses; the database's error.
pub async fn drop_outbox_table(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    table::check_name(table)?;
    table::drop(manager, table).await
}

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
/// The migration `m20261206_000005_create_t_outbox_relay`: the relays' heartbeat table
/// `t_outbox_relay`.
pub mod m20261206_000005_create_t_outbox_relay;

/// Creates the outbox table `t_event_record` (the producer side).
pub use m20261130_000001_create_t_event_record::Migration as CreateEventRecord;
/// Creates the idempotent consumer's `t_consumed_message` (the consumer side).
pub use m20261130_000002_create_t_consumed_message::Migration as CreateConsumedMessage;
/// Adds `t_event_record.headers` (the producer side; after [`CreateEventRecord`]).
pub use m20261201_000003_add_event_headers::Migration as AddEventHeaders;
/// Adds `idx_t_event_record_biz_no_status_id` (the producer side; after [`CreateEventRecord`]).
pub use m20261202_000004_add_biz_no_status_index::Migration as AddBizNoStatusIndex;
/// Creates the relays' heartbeat table `t_outbox_relay` (the producer side).
pub use m20261206_000005_create_t_outbox_relay::Migration as CreateOutboxRelay;

/// The relays' heartbeat table the migration [`CreateOutboxRelay`] creates: `t_outbox_relay`,
/// one per database (its rows name their outbox table), in the connection's default schema.
pub const RELAY_TABLE: &str = "t_outbox_relay";

/// The relays' count of delivered events, also created by [`CreateOutboxRelay`]:
/// `t_outbox_counter`, one row per outbox table, beside [`RELAY_TABLE`].
pub const COUNTER_TABLE: &str = "t_outbox_counter";

/// The tracking table of the standalone [`Migrator`].
pub const MIGRATION_TABLE: &str = "seaql_migrations_outbox";

/// Every outbox migration, in the order to apply them: [`CreateEventRecord`],
/// [`CreateConsumedMessage`], [`AddEventHeaders`], [`AddBizNoStatusIndex`], then
/// [`CreateOutboxRelay`] (the order in
/// which they were released, so that a standalone history stays in order across upgrades).
/// The standalone [`Migrator`] runs these; in your own `Migrator::migrations()` prefer naming
/// each one (see the crate documentation).
pub fn migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![
        Box::new(CreateEventRecord),
        Box::new(CreateConsumedMessage),
        Box::new(AddEventHeaders),
        Box::new(AddBizNoStatusIndex),
        Box::new(CreateOutboxRelay),
    ]
}

/// The migrations a service that writes and relays events needs: [`CreateEventRecord`],
/// [`AddEventHeaders`], [`AddBizNoStatusIndex`] and [`CreateOutboxRelay`].
pub fn producer_migrations() -> Vec<Box<dyn MigrationTrait>> {
    vec![
        Box::new(CreateEventRecord),
        Box::new(AddEventHeaders),
        Box::new(AddBizNoStatusIndex),
        Box::new(CreateOutboxRelay),
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
