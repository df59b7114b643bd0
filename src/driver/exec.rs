//! What every statement shares: running a guarded statement again on a transient conflict,
//! running statements by ids and reads, the outcomes of the claim and the transitions, and the
//! check of the table's columns.
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr, FromQueryResult};
use sea_orm_outbox_entity::event_record;

use super::is_transient;
use super::{ByIds, Driver, RelayDb};

/// Attempts a guarded statement makes when it meets a transient conflict (deadlock,
/// serialization failure, SQLite busy) before the error is returned.
pub const TRANSIENT_ATTEMPTS: u32 = 4;

/// Runs `op` again (after 10, 20, 40 ms) while it fails with a transient conflict. Only for
/// statements whose failed run changed nothing and that are safe to repeat.
pub(crate) async fn retry_transient<T, F, Fut>(mut op: F) -> Result<T, DbErr>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbErr>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < TRANSIENT_ATTEMPTS && is_transient(&e) => {
                tracing::debug!(error = %e, attempt, "transient conflict; running the statement again");
                tokio::time::sleep(Duration::from_millis(10 << (attempt - 1))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Longest `last_error` stored, in bytes (MySQL `TEXT` holds 64 KiB).
pub const MAX_REASON_BYTES: usize = 4096;

/// `reason` cut to at most [`MAX_REASON_BYTES`] bytes on a character boundary.
pub(crate) fn truncate_reason(reason: &str) -> &str {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Runs `stmt` ([`ByIds::build`]) and returns `rows_affected`; transient conflicts are
/// retried ([`TRANSIENT_ATTEMPTS`]). A statement with an empty id list is not sent: 0.
pub async fn exec_by_ids<C: ConnectionTrait>(db: &C, stmt: &ByIds) -> Result<u64, DbErr> {
    if stmt.names_none {
        return Ok(0);
    }
    let stmt = stmt.build();
    Ok(retry_transient(|| db.execute_raw(stmt.clone()))
        .await?
        .rows_affected())
}

/// The runners of the relay's statements, each statement built by `stmt` for the relay's
/// driver.
impl RelayDb {
    /// Runs the statement by ids ([`exec_by_ids`]) and returns `rows_affected` (a [`Claim`] by
    /// `Claim::from`).
    pub async fn run(&self, stmt: impl FnOnce(Driver) -> ByIds) -> Result<u64, DbErr> {
        exec_by_ids(self, &stmt(self.driver())).await
    }

    /// [`RelayDb::run`] of an owner-guarded transition of one claimed row.
    pub async fn transition(
        &self,
        stmt: impl FnOnce(Driver) -> ByIds,
    ) -> Result<Transition, DbErr> {
        Ok(Transition::from(self.run(stmt).await?))
    }

    /// The events the read returns ([`query_events`]).
    pub async fn query_events(
        &self,
        stmt: impl FnOnce(Driver) -> SelectStatement,
    ) -> Result<Vec<event_record::Model>, DbErr> {
        query_events(self, &stmt(self.driver())).await
    }

    /// The ids the read returns ([`query_ids`]).
    pub async fn query_ids(
        &self,
        stmt: impl FnOnce(Driver) -> SelectStatement,
    ) -> Result<Vec<i64>, DbErr> {
        query_ids(self, &stmt(self.driver())).await
    }
}

/// Outcome of a per-row claim ([`Driver::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// `rows_affected == 1`: the lease is ours.
    Won,
    /// `rows_affected == 0`: another instance claimed it first (or it is no longer due). Normal
    /// with many scanners; not an error.
    Lost,
}

impl From<u64> for Claim {
    fn from(rows: u64) -> Self {
        if rows == 1 {
            Claim::Won
        } else {
            Claim::Lost
        }
    }
}

/// Outcome of an owner-guarded transition ([`Driver::mark_success`],
/// [`Driver::release_for_retry`], [`Driver::mark_fail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Transition {
    /// The row was still `SENDING` under our lease and now has its new state.
    Applied,
    /// `rows_affected == 0`: our lease was reclaimed meanwhile; the row was left as it is so the
    /// new owner's outcome stands.
    LeaseLost,
}

impl From<u64> for Transition {
    fn from(rows: u64) -> Self {
        if rows == 1 {
            Transition::Applied
        } else {
            Transition::LeaseLost
        }
    }
}

/// Every column of an event, qualified by the table's name (`"t_event_record"."id", ...`):
/// SQLite reads an unqualified double-quoted name that names no column as a string literal, so
/// a table that lacks a later migration's column must fail the read, not return the name.
pub(crate) fn event_columns(driver: Driver) -> Vec<(&'static str, event_record::Column)> {
    use sea_orm::Iterable;
    let table = driver.table().name();
    event_record::Column::iter().map(|c| (table, c)).collect()
}

/// The events `stmt` reads (every column of the table, by name).
pub(crate) async fn query_events<C: ConnectionTrait>(
    db: &C,
    stmt: &SelectStatement,
) -> Result<Vec<event_record::Model>, DbErr> {
    db.query_all(stmt)
        .await?
        .iter()
        .map(|row| event_record::Model::from_query_result(row, ""))
        .collect()
}

/// The ids `stmt` reads (its first column).
pub(crate) async fn query_ids<C: ConnectionTrait>(
    db: &C,
    stmt: &SelectStatement,
) -> Result<Vec<i64>, DbErr> {
    db.query_all(stmt)
        .await?
        .iter()
        .map(|row| row.try_get_by_index::<i64>(0))
        .collect()
}

impl Driver {
    /// `SELECT t_event_record.headers FROM t_event_record WHERE 1 = 0`: reads no row, and fails
    /// when the table lacks a column of a later migration (`headers`,
    /// `m20261201_000003_add_event_headers`); qualified as in `event_columns`.
    pub fn schema_probe(self) -> SelectStatement {
        Query::select()
            .column((self.table().name(), event_record::Column::Headers))
            .from(self.table())
            .and_where(Expr::val(1).eq(0))
            .to_owned()
    }
}

/// Checks that the outbox table has every column this version reads and writes, and that the
/// relays' tables exist ([`Driver::relay_table_probe`], [`Driver::counter_probe`]).
///
/// # Errors
/// The database error of [`Driver::schema_probe`] or [`Driver::relay_table_probe`]: as an
/// [`crate::OutboxError`], `SchemaOutdated` for the missing column or heartbeat table,
/// `TableMissing` without the outbox table.
pub async fn check_schema(db: &RelayDb) -> Result<(), DbErr> {
    db.query_all(&db.driver().schema_probe()).await?;
    db.query_all(&db.driver().relay_table_probe()).await?;
    db.query_all(&db.driver().counter_probe()).await.map(drop)
}
