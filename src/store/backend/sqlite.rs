//! SQLite: time as fixed-width RFC 3339 text, `RETURNING` (3.35+), one writer at a time.
//!
//! The database has one write lock. A business transaction begun `DEFERRED` that has read and
//! then writes fails at once with `database is locked` when a relay holds that lock at that
//! moment (or has committed since its read): SQLite calls no busy handler for that upgrade.
//! Writers avoid it with `BEGIN IMMEDIATE` ([`crate::ext::begin_write`]); the relay keeps its
//! own hold on the lock short and rare: every statement it runs here is one autocommit
//! statement (it waits for the lock within the connection's busy timeout, and a busy error
//! left over is retried, see [`crate::store::retry_transient`]), and an idle relay takes no
//! write lock at all ([`claim_batch`] reads first).
use std::time::Duration;

use sea_orm::sea_query::UpdateStatement;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, QuerySelect, Select, Statement};
use sea_orm_outbox_entity::event_record::{Column, Entity, Model};

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
pub(super) fn with_wakeup(insert: Statement, _notify: Option<Duration>) -> Statement {
    insert
}

/// `UPDATE ... WHERE status = 'WAIT' AND id IN (SELECT id ... LIMIT :n) RETURNING *` (no lock
/// clause: one writer at a time).
pub(super) fn claim_batch_statement(owner: &str, n: u64) -> UpdateStatement {
    crate::store::claim_update(DbBackend::Sqlite, owner, n, false)
}

/// `SELECT id FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
/// next_retry_time LIMIT 1`: whether anything is due, read without a lock (WAL mode) through
/// `idx_t_event_record_status_next_retry`.
pub(super) fn due_probe_query() -> Select<Entity> {
    crate::store::candidates_query(DbBackend::Sqlite, 1)
        .select_only()
        .column(Column::Id)
}

/// [`due_probe_query`], then, when something is due, [`claim_batch_statement`] (two round
/// trips; an idle poll is one read). The probe keeps an idle relay off the write lock: an
/// `UPDATE` takes it even when it matches no row, and each poll of every relay would otherwise
/// hold it for a moment in which a business transaction's first write after a read fails at
/// once (`database is locked`).
/// An event committed between the probe and the next poll waits one poll delay, as it would
/// when committed just after the claim.
pub(super) async fn claim_batch<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    n: u64,
) -> Result<Vec<Model>, DbErr> {
    let due: Option<i64> = due_probe_query().into_tuple().one(db).await?;
    if due.is_none() {
        return Ok(Vec::new());
    }
    super::claim_returning(db, &claim_batch_statement(owner, n)).await
}

/// The ordered claim's heads: [`due_probe_query`], then (when something is due)
/// [`crate::store::ordered_heads_statement`] without a lock clause: one writer at a time, so
/// the predecessor check and the update see the same committed rows.
pub(super) async fn claim_ordered_heads<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    policy: crate::config::OrderedPolicy,
    n: u64,
    scan: crate::store::HeadScan,
) -> Result<Vec<Model>, DbErr> {
    let due: Option<i64> = due_probe_query().into_tuple().one(db).await?;
    if due.is_none() {
        return Ok(Vec::new());
    }
    let stmt =
        crate::store::ordered_heads_statement(DbBackend::Sqlite, owner, policy, n, false, scan);
    super::claim_returning(db, &stmt).await
}
