//! A backend sea-orm may add that this crate does not know: every capability is "no", and
//! every statement fails with an error that says so (the worker refuses such a database at
//! [`crate::Worker::new`]), instead of running another backend's SQL.
use std::time::Duration;

use sea_orm::sea_query::InsertStatement;
use sea_orm::{DbBackend, DbErr, Statement};
use sea_orm_outbox_entity::event_record::Model;

/// No feature of this crate serves it.
pub(super) const FEATURE: Option<(&str, bool)> = None;
/// Not supported.
pub(super) const RETURNING: bool = false;
/// Not supported.
pub(super) const SKIP_LOCKED: bool = false;
/// Not supported.
pub(super) const LISTEN: bool = false;

/// The error of every statement on an unsupported backend.
pub(super) fn not_supported() -> DbErr {
    DbErr::Custom(
        "this database backend is not supported by sea-orm-outbox (Postgres, MySQL/MariaDB, SQLite)"
            .into(),
    )
}

/// SQL that the database refuses with a message naming the cause.
pub(super) fn now_sql(_offset: Option<(char, Duration)>) -> String {
    "sea_orm_outbox_backend_not_supported()".to_owned()
}

/// Refused.
pub(super) fn by_primary_key(_stmt: Statement) -> Result<Statement, DbErr> {
    Err(not_supported())
}

/// A statement the database refuses.
pub(super) fn insert_if_absent(backend: DbBackend, _insert: &InsertStatement) -> Statement {
    Statement::from_string(backend, "SELECT sea_orm_outbox_backend_not_supported()")
}

/// Unchanged (no wake-up).
pub(super) fn with_wakeup(insert: Statement, _notify: Option<Duration>) -> Statement {
    insert
}

/// Refused.
pub(super) async fn claim_batch<C>(_db: &C, _owner: &str, _n: u64) -> Result<Vec<Model>, DbErr> {
    Err(not_supported())
}
