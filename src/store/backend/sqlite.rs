//! SQLite: time as fixed-width RFC 3339 text, `RETURNING` (3.35+), one writer at a time.
use std::time::Duration;

use sea_orm::sea_query::UpdateStatement;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use sea_orm_outbox_entity::event_record::Model;

/// The crate feature serving SQLite, and whether this build has it.
pub(super) const FEATURE: (&str, bool) = ("sqlite", cfg!(feature = "sqlite"));
/// `INSERT`/`UPDATE ... RETURNING` exist (3.35+).
pub(super) const RETURNING: bool = true;
/// No row locks to skip: SQLite has one writer at a time.
pub(super) const SKIP_LOCKED: bool = false;
/// No `LISTEN`: relays poll.
pub(super) const LISTEN: bool = false;

/// `strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')`, with a `'±s.ffffff seconds'` modifier for
/// an offset: every value has one fixed width, so text order is time order.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now')".to_owned(),
        Some((sign, d)) => format!(
            "strftime('%Y-%m-%dT%H:%M:%f000+00:00', 'now', '{sign}{}.{:06} seconds')",
            d.as_secs(),
            d.subsec_micros()
        ),
    }
}

/// Unchanged: SQLite locks the database, not rows.
pub(super) fn by_primary_key(stmt: Statement) -> Result<Statement, DbErr> {
    Ok(stmt)
}

/// Unchanged: SQLite relays poll.
pub(super) fn with_wakeup(insert: Statement, _notify: bool) -> Statement {
    insert
}

/// `UPDATE ... WHERE status = 'WAIT' AND id IN (SELECT id ... LIMIT :n) RETURNING *` (no lock
/// clause: one writer at a time).
pub(super) fn claim_batch_statement(owner: &str, n: u64) -> UpdateStatement {
    crate::store::claim_update(DbBackend::Sqlite, owner, n, false)
}

/// [`claim_batch_statement`], one round trip.
pub(super) async fn claim_batch<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    n: u64,
) -> Result<Vec<Model>, DbErr> {
    super::claim_returning(db, &claim_batch_statement(owner, n)).await
}
