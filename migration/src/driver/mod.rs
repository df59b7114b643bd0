//! The column types that differ per backend; the rest of the schema is sea-query's, rendered
//! per backend.
//!
//! | column | Postgres | MySQL / MariaDB | SQLite |
//! | --- | --- | --- | --- |
//! | timestamp | `timestamptz` | `DATETIME(6)` (the schema builder's `DATETIME` keeps whole seconds) | RFC 3339 text |
//! | long text (the payload) | `text` | `LONGTEXT` (`TEXT` holds 64 KiB only) | `text` |
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

/// A timestamp column `col` with microsecond precision on `backend`.
pub(crate) fn timestamp(backend: DbBackend, col: impl IntoIden) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("DATETIME(6)")),
        _ => def.timestamp_with_time_zone(),
    };
    def
}

/// A text column `col` that holds the default payload limit (4 MiB) on `backend`.
pub(crate) fn long_text(backend: DbBackend, col: impl IntoIden) -> ColumnDef {
    let mut def = ColumnDef::new(col);
    match backend {
        DbBackend::MySql => def.custom(Alias::new("LONGTEXT")),
        _ => def.text(),
    };
    def
}
