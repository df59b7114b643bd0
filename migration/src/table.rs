//! The outbox table's schema, for a table of any name: what the migrations of this crate run
//! on `t_event_record`, and what [`crate::create_outbox_table`] runs on a table the application
//! names.
//!
//! Index names are the table's name between `idx_` and the indexed columns, because Postgres
//! index names are unique per schema and the application's own tables may well have an
//! `idx_status_...`.
//!
//! Timestamps keep microseconds and UTC on every backend (see [`crate::driver`]); SQLite's are
//! text in one fixed-width RFC 3339 form (`YYYY-MM-DDTHH:MM:SS.ffffff+00:00`) written only by
//! the database clock, so that text order is time order.
use sea_orm_migration::prelude::*;

use crate::driver::{long_text, timestamp};

/// The columns of an outbox table.
#[derive(DeriveIden, Clone, Copy)]
enum Col {
    Id,
    BizNo,
    EventType,
    Payload,
    Status,
    RetryCount,
    NextRetryTime,
    ClaimOwner,
    ClaimedAt,
    LastError,
    CreateTime,
    UpdateTime,
    Headers,
}

/// Longest outbox table name: 40 characters, so that `idx_<table>_biz_no_status_id` stays
/// within Postgres's 63-byte identifiers (longer ones are cut short silently) and MySQL's 64.
pub(crate) const MAX_NAME_LEN: usize = 40;

/// Refuses a name that is empty, longer than [`MAX_NAME_LEN`], starts with a digit, or holds
/// anything but ASCII letters, digits and underscores.
pub(crate) fn check_name(table: &str) -> Result<(), DbErr> {
    let plain = table
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let digit_first = table.bytes().next().is_some_and(|b| b.is_ascii_digit());
    if table.is_empty() || table.len() > MAX_NAME_LEN || !plain || digit_first {
        return Err(DbErr::Custom(format!(
            "outbox table name {table:?}: use 1 to {MAX_NAME_LEN} ASCII letters, digits and \
             underscores, not starting with a digit"
        )));
    }
    Ok(())
}

/// The name of `table`'s index over `columns` (`idx_<table>_<columns>`).
pub(crate) fn index_name(table: &str, columns: &str) -> String {
    format!("idx_{table}_{columns}")
}

/// Creates `table` (if absent) without its `headers` column, with its two composite indexes
/// `idx_<table>_status_next_retry` and `idx_<table>_status_claimed_at`.
pub(crate) async fn create(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    let backend = manager.get_database_backend();
    let mut payload = long_text(backend, Col::Payload);
    manager
        .create_table(
            Table::create()
                .table(Alias::new(table))
                .if_not_exists()
                .col(
                    ColumnDef::new(Col::Id)
                        .big_integer()
                        .not_null()
                        .auto_increment()
                        .primary_key(),
                )
                .col(ColumnDef::new(Col::BizNo).string_len(64).not_null())
                .col(ColumnDef::new(Col::EventType).string_len(64).not_null())
                .col(payload.not_null())
                .col(ColumnDef::new(Col::Status).string_len(16).not_null())
                .col(
                    ColumnDef::new(Col::RetryCount)
                        .integer()
                        .not_null()
                        .default(0),
                )
                .col(timestamp(backend, Col::NextRetryTime).not_null())
                .col(ColumnDef::new(Col::ClaimOwner).string_len(128).null())
                .col(timestamp(backend, Col::ClaimedAt).null())
                .col(ColumnDef::new(Col::LastError).text().null())
                .col(timestamp(backend, Col::CreateTime).not_null())
                .col(timestamp(backend, Col::UpdateTime).not_null())
                .to_owned(),
        )
        .await?;
    // Equality column first, range column second: the scan and the reclaim each read one
    // index range, already in order.
    for (columns, range) in [
        ("status_next_retry", Col::NextRetryTime),
        ("status_claimed_at", Col::ClaimedAt),
    ] {
        manager
            .create_index(
                Index::create()
                    .name(index_name(table, columns))
                    .table(Alias::new(table))
                    .col(Col::Status)
                    .col(range)
                    .to_owned(),
            )
            .await?;
    }
    Ok(())
}

/// Drops `table` (its indexes with it, on every backend).
pub(crate) async fn drop(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    manager
        .drop_table(Table::drop().table(Alias::new(table)).to_owned())
        .await
}

/// Adds the nullable `headers` column (message headers as a JSON object of strings) unless
/// `table` has it already (added by hand, or by the other of the two ways to migrate).
pub(crate) async fn add_headers(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    if manager.has_column(table, "headers").await? {
        return Ok(());
    }
    manager
        .alter_table(
            Table::alter()
                .table(Alias::new(table))
                .add_column(ColumnDef::new(Col::Headers).text().null())
                .to_owned(),
        )
        .await
}

/// Drops the `headers` column (SQLite drops a column since 3.35; sqlx bundles a later one).
pub(crate) async fn drop_headers(manager: &SchemaManager<'_>, table: &str) -> Result<(), DbErr> {
    manager
        .alter_table(
            Table::alter()
                .table(Alias::new(table))
                .drop_column(Col::Headers)
                .to_owned(),
        )
        .await
}

/// Adds the ordered claim's index `idx_<table>_biz_no_status_id (biz_no, status, id)` unless an
/// index of that name exists (made by hand, or by the other way to migrate).
pub(crate) async fn add_biz_no_index(
    manager: &SchemaManager<'_>,
    table: &str,
) -> Result<(), DbErr> {
    let name = index_name(table, "biz_no_status_id");
    if manager.has_index(table, &name).await? {
        return Ok(());
    }
    manager
        .create_index(
            Index::create()
                .name(name)
                .table(Alias::new(table))
                .col(Col::BizNo)
                .col(Col::Status)
                .col(Col::Id)
                .to_owned(),
        )
        .await
}

/// Drops the ordered claim's index, if it exists.
pub(crate) async fn drop_biz_no_index(
    manager: &SchemaManager<'_>,
    table: &str,
) -> Result<(), DbErr> {
    let name = index_name(table, "biz_no_status_id");
    if !manager.has_index(table, &name).await? {
        return Ok(());
    }
    manager
        .drop_index(Index::drop().name(name).table(Alias::new(table)).to_owned())
        .await
}
