//! The outbox's migrations beside an application's own, run on Postgres, MariaDB and SQLite
//! (see `tests/common`): the standalone `Migrator` (history in `seaql_migrations_outbox`)
//! next to the application's migrator, the composed list (one history in `seaql_migrations`),
//! the producer/consumer subsets and the stable migration names.
//!
//! Every test starts from an empty database ([`common::TestContext::new_empty`]): no outbox
//! table and no tracking table.
mod common;

use common::TestContext;
use sea_orm::{ConnectionTrait, Statement};
use sea_orm_migration::prelude::*;
use sea_orm_migration::MigrationStatus;
use sea_orm_outbox::migration::{self as outbox_migration, MIGRATION_TABLE};

/// One `#[tokio::test]` per backend for each `async fn name(ctx: &TestContext)`, on an empty
/// database (the suites' `backend_tests!` migrates the outbox first).
macro_rules! empty_backend_tests {
    ($($name:ident),* $(,)?) => {
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on_empty($crate::common::Backend::Postgres, stringify!($name), super::$name).await } )* }
        mod mariadb { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on_empty($crate::common::Backend::MySql, stringify!($name), super::$name).await } )* }
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on_empty($crate::common::Backend::Sqlite, stringify!($name), super::$name).await } )* }
    };
}

empty_backend_tests!(
    standalone_migrator_runs_beside_the_app_migrator,
    one_history_table_for_both_breaks_the_app_migrator,
    composed_migrator_records_everything_in_one_history,
    composed_down_follows_the_list_not_the_names,
    producer_migrations_create_only_the_outbox_table,
    consumer_migrations_create_only_the_consumed_table,
    upgrade_adds_headers_and_keeps_the_events,
    a_table_of_the_apps_naming_beside_the_default_one,
);

const APP_ORDER: &str = "m20250101_000001_create_t_order";
const APP_INVOICE: &str = "m20250201_000002_create_t_invoice";
const EVENT_RECORD: &str = "m20261130_000001_create_t_event_record";
const CONSUMED_MESSAGE: &str = "m20261130_000002_create_t_consumed_message";
const EVENT_HEADERS: &str = "m20261201_000003_add_event_headers";
const BIZ_NO_INDEX: &str = "m20261202_000004_add_biz_no_status_index";
const OUTBOX_RELAY: &str = "m20261206_000005_create_t_outbox_relay";

/// The application's first migration: its own table `t_order`.
mod m20250101_000001_create_t_order {
    use sea_orm_migration::prelude::*;

    pub struct Migration;

    // Not `#[derive(DeriveMigrationName)]`: it names a migration after its FILE
    // (`file!()`'s stem), which here would be `migrations` for both modules.
    impl MigrationName for Migration {
        fn name(&self) -> &str {
            super::APP_ORDER
        }
    }

    #[derive(DeriveIden)]
    enum TOrder {
        Table,
        Id,
        OrderNo,
    }

    #[async_trait::async_trait]
    impl MigrationTrait for Migration {
        async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
            manager
                .create_table(
                    Table::create()
                        .table(TOrder::Table)
                        .col(
                            ColumnDef::new(TOrder::Id)
                                .big_integer()
                                .not_null()
                                .auto_increment()
                                .primary_key(),
                        )
                        .col(ColumnDef::new(TOrder::OrderNo).string_len(32).not_null())
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
}

/// A later application migration, added after the outbox was adopted, whose name (dated
/// before the outbox's `m20261130_*`) sorts before the outbox's: `t_invoice`.
mod m20250201_000002_create_t_invoice {
    use sea_orm_migration::prelude::*;

    pub struct Migration;

    // Not `#[derive(DeriveMigrationName)]`: it names a migration after its FILE
    // (`file!()`'s stem), which here would be `migrations` for both modules.
    impl MigrationName for Migration {
        fn name(&self) -> &str {
            super::APP_INVOICE
        }
    }

    #[derive(DeriveIden)]
    enum TInvoice {
        Table,
        Id,
    }

    #[async_trait::async_trait]
    impl MigrationTrait for Migration {
        async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
            manager
                .create_table(
                    Table::create()
                        .table(TInvoice::Table)
                        .col(
                            ColumnDef::new(TInvoice::Id)
                                .big_integer()
                                .not_null()
                                .auto_increment()
                                .primary_key(),
                        )
                        .to_owned(),
                )
                .await
        }

        async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
            manager
                .drop_table(Table::drop().table(TInvoice::Table).to_owned())
                .await
        }
    }
}

/// The application's own migrator: only its migrations, in the default `seaql_migrations`.
struct AppMigrator;

#[async_trait::async_trait]
impl MigratorTrait for AppMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(m20250101_000001_create_t_order::Migration)]
    }
}

/// The application's migration followed by every outbox migration, in `seaql_migrations`.
struct ComposedMigrator;

#[async_trait::async_trait]
impl MigratorTrait for ComposedMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut all: Vec<Box<dyn MigrationTrait>> =
            vec![Box::new(m20250101_000001_create_t_order::Migration)];
        all.extend(outbox_migration::migrations());
        all
    }
}

/// [`ComposedMigrator`] plus a later application migration after the outbox's.
struct ComposedLaterMigrator;

#[async_trait::async_trait]
impl MigratorTrait for ComposedLaterMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut all = ComposedMigrator::migrations();
        all.push(Box::new(m20250201_000002_create_t_invoice::Migration));
        all
    }
}

/// The outbox's migrations in the default `seaql_migrations`, run beside [`AppMigrator`]:
/// what the standalone `Migrator`'s own tracking table exists to prevent.
struct OutboxInAppHistory;

#[async_trait::async_trait]
impl MigratorTrait for OutboxInAppHistory {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        outbox_migration::migrations()
    }
}

/// The composed list of the release before event headers: the app's migration and the outbox's
/// first two.
struct BeforeHeadersMigrator;

#[async_trait::async_trait]
impl MigratorTrait for BeforeHeadersMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20250101_000001_create_t_order::Migration),
            Box::new(outbox_migration::CreateEventRecord),
            Box::new(outbox_migration::CreateConsumedMessage),
        ]
    }
}

/// [`BeforeHeadersMigrator`] after the upgrade to this version: `AddEventHeaders` and
/// `CreateOutboxRelay` (which this version's relay needs too) appended.
struct AfterHeadersMigrator;

#[async_trait::async_trait]
impl MigratorTrait for AfterHeadersMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut all = BeforeHeadersMigrator::migrations();
        all.push(Box::new(outbox_migration::AddEventHeaders));
        all.push(Box::new(outbox_migration::CreateOutboxRelay));
        all
    }
}

/// Only the producer side (`t_event_record`).
struct ProducerMigrator;

#[async_trait::async_trait]
impl MigratorTrait for ProducerMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        outbox_migration::producer_migrations()
    }
}

/// Only the consumer side (`t_consumed_message`).
struct ConsumerMigrator;

#[async_trait::async_trait]
impl MigratorTrait for ConsumerMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        outbox_migration::consumer_migrations()
    }
}

/// The application's migration creating an outbox table of its own naming, `outbox_events`.
mod m20261206_000001_create_outbox_events {
    use sea_orm_migration::prelude::*;

    pub struct Migration;

    impl MigrationName for Migration {
        fn name(&self) -> &str {
            "m20261206_000001_create_outbox_events"
        }
    }

    #[async_trait::async_trait]
    impl MigrationTrait for Migration {
        async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
            sea_orm_outbox::migration::create_outbox_table(manager, "outbox_events").await
        }

        async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
            sea_orm_outbox::migration::drop_outbox_table(manager, "outbox_events").await
        }
    }
}

/// The default outbox and a second one of the application's naming, in one history.
struct TwoOutboxesMigrator;

#[async_trait::async_trait]
impl MigratorTrait for TwoOutboxesMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut all = outbox_migration::producer_migrations();
        all.push(Box::new(m20261206_000001_create_outbox_events::Migration));
        all
    }
}

/// Whether `table` exists, by sea-orm-migration's own schema discovery.
async fn has_table(ctx: &TestContext, table: &str) -> bool {
    SchemaManager::new(&ctx.db)
        .has_table(table)
        .await
        .unwrap_or_else(|e| panic!("has_table({table}): {e}"))
}

/// Asserts which of `tables` exist (`true`) and which do not.
async fn assert_tables(ctx: &TestContext, expected: &[(&str, bool)], when: &str) {
    let mut actual = Vec::new();
    for (table, _) in expected {
        actual.push((*table, has_table(ctx, table).await));
    }
    assert_eq!(actual, expected, "{:?}, {when}", ctx.backend);
}

/// The versions recorded in the tracking table `table`, in version order.
async fn history(ctx: &TestContext, table: &str) -> Vec<String> {
    let sql = format!("SELECT version FROM {table} ORDER BY version");
    ctx.db
        .query_all_raw(Statement::from_string(ctx.db_backend(), sql))
        .await
        .unwrap_or_else(|e| panic!("read {table}: {e}"))
        .iter()
        .map(|r| r.try_get::<String>("", "version").expect("version"))
        .collect()
}

/// `(name, status)` of each migration of `M`, in its list order.
async fn statuses<M: MigratorTrait>(ctx: &TestContext) -> Vec<(String, MigrationStatus)> {
    M::get_migration_with_status(&ctx.db)
        .await
        .expect("get_migration_with_status")
        .iter()
        .map(|m| (m.name().to_owned(), m.status()))
        .collect()
}

fn expect(list: &[(&str, MigrationStatus)]) -> Vec<(String, MigrationStatus)> {
    list.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
}

use MigrationStatus::{Applied, Pending};

async fn standalone_migrator_runs_beside_the_app_migrator(ctx: &TestContext) {
    let db = &ctx.db;
    AppMigrator::up(db, None).await.expect("app up");
    assert_eq!(history(ctx, "seaql_migrations").await, [APP_ORDER]);

    // The outbox's standalone migrator beside the application's history.
    sea_orm_outbox::Migrator::up(db, None)
        .await
        .expect("outbox up");
    assert_tables(
        ctx,
        &[
            ("t_order", true),
            ("t_event_record", true),
            ("t_consumed_message", true),
        ],
        "after outbox up",
    )
    .await;
    assert_eq!(
        statuses::<sea_orm_outbox::Migrator>(ctx).await,
        expect(&[
            (EVENT_RECORD, Applied),
            (CONSUMED_MESSAGE, Applied),
            (EVENT_HEADERS, Applied),
            (BIZ_NO_INDEX, Applied),
            (OUTBOX_RELAY, Applied)
        ])
    );
    sea_orm_outbox::Migrator::status(db)
        .await
        .expect("outbox status");
    assert_eq!(MIGRATION_TABLE, "seaql_migrations_outbox");
    assert_eq!(
        history(ctx, MIGRATION_TABLE).await,
        [
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
    assert_eq!(
        history(ctx, "seaql_migrations").await,
        [APP_ORDER],
        "the outbox wrote nothing into the application's history"
    );
    // The application's migrator does not see the outbox's rows.
    assert_eq!(
        statuses::<AppMigrator>(ctx).await,
        expect(&[(APP_ORDER, Applied)])
    );
    AppMigrator::up(db, None)
        .await
        .expect("app up beside the outbox");

    sea_orm_outbox::Migrator::down(db, None)
        .await
        .expect("outbox down");
    assert_tables(
        ctx,
        &[
            ("t_order", true),
            ("t_event_record", false),
            ("t_consumed_message", false),
        ],
        "after outbox down",
    )
    .await;
    assert_eq!(
        statuses::<sea_orm_outbox::Migrator>(ctx).await,
        expect(&[
            (EVENT_RECORD, Pending),
            (CONSUMED_MESSAGE, Pending),
            (EVENT_HEADERS, Pending),
            (BIZ_NO_INDEX, Pending),
            (OUTBOX_RELAY, Pending)
        ])
    );
    // `down` empties the tracking table but leaves it in place.
    assert!(has_table(ctx, MIGRATION_TABLE).await);
    assert!(history(ctx, MIGRATION_TABLE).await.is_empty());

    // The application's migrator is untouched by the outbox's down.
    AppMigrator::status(db).await.expect("app status");
    assert_eq!(
        statuses::<AppMigrator>(ctx).await,
        expect(&[(APP_ORDER, Applied)])
    );
    AppMigrator::up(db, None).await.expect("app up after down");
    assert!(AppMigrator::get_pending_migrations(db)
        .await
        .expect("pending")
        .is_empty());
    assert_eq!(history(ctx, "seaql_migrations").await, [APP_ORDER]);
    assert!(has_table(ctx, "t_order").await);

    // Up again: both histories present, the application's migrator still works.
    sea_orm_outbox::Migrator::up(db, None)
        .await
        .expect("outbox up again");
    assert!(has_table(ctx, "t_event_record").await);
    AppMigrator::up(db, None)
        .await
        .expect("app up with both histories");
    AppMigrator::status(db)
        .await
        .expect("app status with both histories");
    assert!(AppMigrator::get_pending_migrations(db)
        .await
        .expect("pending")
        .is_empty());
    assert_eq!(history(ctx, "seaql_migrations").await, [APP_ORDER]);
    assert_eq!(
        history(ctx, MIGRATION_TABLE).await,
        [
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
}

/// Why the standalone migrator has its own tracking table: sea-orm-migration refuses to run
/// when its table holds a version its list does not know.
async fn one_history_table_for_both_breaks_the_app_migrator(ctx: &TestContext) {
    let db = &ctx.db;
    AppMigrator::up(db, None).await.expect("app up");
    OutboxInAppHistory::up(db, None)
        .await
        .expect_err("the app's row is unknown to the outbox's list");
    assert!(
        !has_table(ctx, "t_event_record").await,
        "refused before any migration ran"
    );
    // The other way round: outbox first, then the application.
    AppMigrator::down(db, None).await.expect("app down");
    OutboxInAppHistory::up(db, None).await.expect("outbox up");
    let err = AppMigrator::up(db, None)
        .await
        .expect_err("the outbox's rows are unknown to the app's list");
    assert!(
        err.to_string().contains(EVENT_RECORD) && err.to_string().contains("is missing"),
        "{err}"
    );
    AppMigrator::status(db)
        .await
        .expect_err("status refuses too");
    assert!(!has_table(ctx, "t_order").await);
}

async fn composed_migrator_records_everything_in_one_history(ctx: &TestContext) {
    let db = &ctx.db;
    ComposedMigrator::up(db, None).await.expect("composed up");
    assert_tables(
        ctx,
        &[
            ("t_order", true),
            ("t_event_record", true),
            ("t_consumed_message", true),
        ],
        "after composed up",
    )
    .await;
    assert_eq!(
        history(ctx, "seaql_migrations").await,
        [
            APP_ORDER,
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
    assert!(
        !has_table(ctx, MIGRATION_TABLE).await,
        "composed, the standalone tracking table is never created"
    );
    ComposedMigrator::status(db).await.expect("status");

    // `down(Some(n))` rolls back n migrations: the last entries of the list that are applied
    // (sea-orm-migration walks the applied migrations in reverse list order), here the
    // outbox's heartbeat table, its `biz_no` index, its `headers` column, then
    // `t_consumed_message`.
    ComposedMigrator::down(db, Some(4))
        .await
        .expect("down four");
    assert_tables(
        ctx,
        &[
            ("t_order", true),
            ("t_event_record", true),
            ("t_consumed_message", false),
        ],
        "after down(Some(4))",
    )
    .await;
    assert_eq!(
        statuses::<ComposedMigrator>(ctx).await,
        expect(&[
            (APP_ORDER, Applied),
            (EVENT_RECORD, Applied),
            (CONSUMED_MESSAGE, Pending),
            (EVENT_HEADERS, Pending),
            (BIZ_NO_INDEX, Pending),
            (OUTBOX_RELAY, Pending)
        ])
    );
    assert_eq!(
        history(ctx, "seaql_migrations").await,
        [APP_ORDER, EVENT_RECORD]
    );

    ComposedMigrator::up(db, None).await.expect("up again");
    assert!(has_table(ctx, "t_consumed_message").await);
    ComposedMigrator::down(db, None).await.expect("down all");
    assert_tables(
        ctx,
        &[
            ("t_order", false),
            ("t_event_record", false),
            ("t_consumed_message", false),
        ],
        "after down(None)",
    )
    .await;
    assert!(history(ctx, "seaql_migrations").await.is_empty());
}

/// `up` and `down` follow the list's order, not the names' order: an application migration
/// listed after the outbox's is applied after them and rolled back first, although its name
/// sorts before theirs.
async fn composed_down_follows_the_list_not_the_names(ctx: &TestContext) {
    let db = &ctx.db;
    // A database on the older list, then the application adds `t_invoice` after the outbox.
    ComposedMigrator::up(db, None).await.expect("composed up");
    assert_eq!(
        statuses::<ComposedLaterMigrator>(ctx).await,
        expect(&[
            (APP_ORDER, Applied),
            (EVENT_RECORD, Applied),
            (CONSUMED_MESSAGE, Applied),
            (EVENT_HEADERS, Applied),
            (BIZ_NO_INDEX, Applied),
            (OUTBOX_RELAY, Applied),
            (APP_INVOICE, Pending)
        ])
    );
    ComposedLaterMigrator::up(db, None).await.expect("later up");
    assert!(has_table(ctx, "t_invoice").await);

    ComposedLaterMigrator::down(db, Some(1))
        .await
        .expect("down one");
    assert_tables(
        ctx,
        &[
            ("t_invoice", false),
            ("t_consumed_message", true),
            ("t_event_record", true),
            ("t_order", true),
        ],
        "down(Some(1)) rolls back the last of the list",
    )
    .await;
    ComposedLaterMigrator::down(db, Some(4))
        .await
        .expect("down four more");
    assert_tables(
        ctx,
        &[("t_consumed_message", false), ("t_event_record", true)],
        "then the outbox's last",
    )
    .await;
    assert_eq!(
        history(ctx, "seaql_migrations").await,
        [APP_ORDER, EVENT_RECORD]
    );
}

async fn producer_migrations_create_only_the_outbox_table(ctx: &TestContext) {
    ProducerMigrator::up(&ctx.db, None)
        .await
        .expect("producer up");
    assert_tables(
        ctx,
        &[("t_event_record", true), ("t_consumed_message", false)],
        "producer only",
    )
    .await;
    assert_eq!(
        history(ctx, "seaql_migrations").await,
        [EVENT_RECORD, EVENT_HEADERS, BIZ_NO_INDEX, OUTBOX_RELAY]
    );
    assert!(has_table(ctx, "t_outbox_relay").await);
    ProducerMigrator::down(&ctx.db, None)
        .await
        .expect("producer down");
    assert!(!has_table(ctx, "t_event_record").await);
    assert!(!has_table(ctx, "t_outbox_relay").await);
}

async fn consumer_migrations_create_only_the_consumed_table(ctx: &TestContext) {
    ConsumerMigrator::up(&ctx.db, None)
        .await
        .expect("consumer up");
    assert_tables(
        ctx,
        &[("t_event_record", false), ("t_consumed_message", true)],
        "consumer only",
    )
    .await;
    assert_eq!(history(ctx, "seaql_migrations").await, [CONSUMED_MESSAGE]);
    ConsumerMigrator::down(&ctx.db, None)
        .await
        .expect("consumer down");
    assert!(!has_table(ctx, "t_consumed_message").await);
}

fn names(list: Vec<Box<dyn MigrationTrait>>) -> Vec<String> {
    list.iter().map(|m| m.name().to_owned()).collect()
}

/// The names are the outbox's contract with every history that recorded them: a release
/// adds migrations, never renames these.
#[test]
fn migration_names_are_stable() {
    assert_eq!(
        names(outbox_migration::migrations()),
        [
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
    assert_eq!(
        names(outbox_migration::producer_migrations()),
        [EVENT_RECORD, EVENT_HEADERS, BIZ_NO_INDEX, OUTBOX_RELAY]
    );
    assert_eq!(
        names(outbox_migration::consumer_migrations()),
        [CONSUMED_MESSAGE]
    );
    assert_eq!(
        names(sea_orm_outbox::Migrator::migrations()),
        [
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
    assert_eq!(
        MigrationName::name(&outbox_migration::CreateEventRecord),
        EVENT_RECORD
    );
    assert_eq!(
        MigrationName::name(&outbox_migration::CreateConsumedMessage),
        CONSUMED_MESSAGE
    );
    assert_eq!(
        MigrationName::name(&outbox_migration::AddEventHeaders),
        EVENT_HEADERS
    );
    assert_eq!(
        MigrationName::name(&outbox_migration::AddBizNoStatusIndex),
        BIZ_NO_INDEX
    );
    assert_eq!(
        MigrationName::name(&outbox_migration::CreateOutboxRelay),
        OUTBOX_RELAY
    );
    assert_eq!(
        names(ComposedMigrator::migrations()),
        [
            APP_ORDER,
            EVENT_RECORD,
            CONSUMED_MESSAGE,
            EVENT_HEADERS,
            BIZ_NO_INDEX,
            OUTBOX_RELAY
        ]
    );
}

/// An adopter's upgrade: events written before `AddEventHeaders` stay and are relayed after it;
/// this version on the old table refuses clearly (`SchemaOutdated`) and writes nothing.
async fn upgrade_adds_headers_and_keeps_the_events(ctx: &TestContext) {
    use sea_orm::sea_query::{Expr, Query};
    use sea_orm::EntityTrait;
    use sea_orm_outbox::{
        event_record, CancellationToken, EventStatus, InMemoryPublisher, NewEvent, OutboxError,
        OutboxExt, Worker, WorkerConfig,
    };

    let db = &ctx.db;
    BeforeHeadersMigrator::up(db, None).await.expect("old up");
    // A row as the release before headers wrote it.
    let now = common::db_now(ctx.db_backend(), None);
    let mut insert = Query::insert();
    insert
        .into_table(event_record::Entity)
        .columns([
            event_record::Column::BizNo,
            event_record::Column::EventType,
            event_record::Column::Payload,
            event_record::Column::Status,
            event_record::Column::RetryCount,
            event_record::Column::NextRetryTime,
            event_record::Column::CreateTime,
            event_record::Column::UpdateTime,
        ])
        .values_panic([
            Expr::val("OLD-1"),
            Expr::val("ORDER_CREATED"),
            Expr::val("{}"),
            Expr::val("WAIT"),
            Expr::val(0),
            now.clone(),
            now.clone(),
            now,
        ]);
    db.execute(&insert).await.expect("old-style insert");

    // This version before the upgrade: a clear error, nothing written, nothing claimed.
    let err = db
        .with_event(NewEvent::raw("NEW-0", "ORDER_CREATED", "{}"))
        .await
        .expect_err("the column is missing");
    assert!(matches!(err, OutboxError::SchemaOutdated(_)), "{err}");
    assert!(
        err.to_string()
            .contains("m20261201_000003_add_event_headers"),
        "{err}"
    );
    let publisher = std::sync::Arc::new(InMemoryPublisher::new());
    let worker = Worker::new(
        db.clone(),
        publisher.clone(),
        WorkerConfig::default()
            .completion(common::completion())
            .instance_id("upgrade-relay"),
    )
    .expect("worker");
    let err = worker
        .run_once(&CancellationToken::new())
        .await
        .expect_err("the relay cannot read the old table");
    assert!(matches!(err, OutboxError::SchemaOutdated(_)), "{err}");
    assert!(publisher.is_empty());

    AfterHeadersMigrator::up(db, None).await.expect("upgrade");
    assert_eq!(
        statuses::<AfterHeadersMigrator>(ctx).await,
        expect(&[
            (APP_ORDER, Applied),
            (EVENT_RECORD, Applied),
            (CONSUMED_MESSAGE, Applied),
            (EVENT_HEADERS, Applied),
            (OUTBOX_RELAY, Applied)
        ])
    );
    let new_id = db
        .with_event(NewEvent::raw("NEW-1", "ORDER_CREATED", "{}").header("tenant", "acme"))
        .await
        .expect("with_event after the upgrade");
    worker
        .run_once(&CancellationToken::new())
        .await
        .expect("round after the upgrade");
    let sent = publisher.messages();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let old = sent
        .iter()
        .find(|m| m.biz_no == "OLD-1")
        .expect("old event sent");
    assert!(old.headers.is_empty());
    let new = sent
        .iter()
        .find(|m| m.event_id == new_id)
        .expect("new event sent");
    assert_eq!(new.header("tenant"), Some("acme"));
    let rows = event_record::Entity::find().all(db).await.expect("rows");
    // With completion by delete (`OUTBOX_TEST_COMPLETION=delete`) no delivered row is left.
    let delivered_rows = if common::deleting() { 0 } else { 2 };
    assert_eq!(rows.len(), delivered_rows, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.status == EventStatus::Success),
        "{rows:?}"
    );

    // And back: down(Some(2)) drops the heartbeat table and the column again, the events stay.
    AfterHeadersMigrator::down(db, Some(2))
        .await
        .expect("down two");
    assert_eq!(
        statuses::<BeforeHeadersMigrator>(ctx).await,
        expect(&[
            (APP_ORDER, Applied),
            (EVENT_RECORD, Applied),
            (CONSUMED_MESSAGE, Applied)
        ])
    );
    let left = db
        .query_all_raw(Statement::from_string(
            ctx.db_backend(),
            "SELECT id FROM t_event_record",
        ))
        .await
        .expect("rows after down");
    assert_eq!(left.len(), delivered_rows);
}

/// `create_outbox_table` gives a table of the application's naming the schema the migrations
/// give `t_event_record`: the same columns, and the three indexes named after the table.
async fn a_table_of_the_apps_naming_beside_the_default_one(ctx: &TestContext) {
    TwoOutboxesMigrator::up(&ctx.db, None).await.expect("up");
    assert_tables(
        ctx,
        &[("t_event_record", true), ("outbox_events", true)],
        "after up",
    )
    .await;
    let manager = SchemaManager::new(&ctx.db);
    for column in [
        "id",
        "biz_no",
        "event_type",
        "payload",
        "status",
        "retry_count",
        "next_retry_time",
        "claim_owner",
        "claimed_at",
        "last_error",
        "create_time",
        "update_time",
        "headers",
    ] {
        for table in ["t_event_record", "outbox_events"] {
            assert!(
                manager.has_column(table, column).await.expect("has_column"),
                "{:?}: {table}.{column}",
                ctx.backend
            );
        }
    }
    for index in ["status_next_retry", "status_claimed_at", "biz_no_status_id"] {
        for table in ["t_event_record", "outbox_events"] {
            let name = format!("idx_{table}_{index}");
            assert!(
                manager.has_index(table, &name).await.expect("has_index"),
                "{:?}: {name}",
                ctx.backend
            );
        }
    }
    for bad in ["", "outbox events", "outbox;drop", &"x".repeat(41)] {
        let refused = sea_orm_outbox::migration::create_outbox_table(&manager, bad).await;
        assert!(
            matches!(refused, Err(DbErr::Custom(_))),
            "{bad:?}: {refused:?}"
        );
    }
    TwoOutboxesMigrator::down(&ctx.db, None)
        .await
        .expect("down");
    assert_tables(
        ctx,
        &[("t_event_record", false), ("outbox_events", false)],
        "after down",
    )
    .await;
}
