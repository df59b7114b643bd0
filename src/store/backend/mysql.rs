//! MySQL and MariaDB: `UTC_TIMESTAMP(6)`, no `RETURNING` (`LAST_INSERT_ID()`), `SKIP LOCKED`
//! (MySQL 8, MariaDB 10.6), InnoDB's row locks on every row a statement reads.
use std::time::Duration;

use sea_orm::sea_query::{Expr, InsertStatement, LockBehavior, LockType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult, IsolationLevel,
    QueryFilter, QuerySelect, QueryTrait, Select, Statement, TransactionSession, TransactionTrait,
    UpdateMany,
};
use sea_orm_outbox_entity::event_record::{Column, Entity, Model};
use sea_orm_outbox_entity::EventStatus;

/// The crate feature serving MySQL/MariaDB, and whether this build has it.
pub(super) const FEATURE: (&str, bool) = ("mysql", cfg!(feature = "mysql"));
/// No `UPDATE ... RETURNING` (MariaDB) and no `INSERT ... RETURNING` on MySQL: ids come from
/// `LAST_INSERT_ID()` (sea-orm's `mariadb-use-returning` must stay off).
pub(super) const RETURNING: bool = false;
/// `FOR UPDATE SKIP LOCKED` exists (MySQL 8, MariaDB 10.6).
pub(super) const SKIP_LOCKED: bool = true;
/// No `LISTEN`: relays poll.
pub(super) const LISTEN: bool = false;

/// `UTC_TIMESTAMP(6)` (every session time zone agrees), or `(UTC_TIMESTAMP(6) ± INTERVAL n
/// MICROSECOND)`.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "UTC_TIMESTAMP(6)".to_owned(),
        Some((sign, d)) => format!(
            "(UTC_TIMESTAMP(6) {sign} INTERVAL {} MICROSECOND)",
            d.as_micros()
        ),
    }
}

/// `INSERT IGNORE ...`: sea-query's `ON DUPLICATE KEY UPDATE k = k` polyfill counts a duplicate
/// as 1 row under `CLIENT_FOUND_ROWS` (which sqlx sets). `INSERT IGNORE` also turns other errors
/// (over-long values, NULLs) into warnings: callers validate the values first.
pub(super) fn insert_if_absent(backend: DbBackend, insert: &InsertStatement) -> Statement {
    let mut stmt = backend.build(insert);
    stmt.sql = stmt.sql.replacen("INSERT ", "INSERT IGNORE ", 1);
    stmt
}

/// Unchanged: MySQL relays poll.
pub(super) fn with_wakeup(insert: Statement, _notify: Option<Duration>) -> Statement {
    insert
}

/// `stmt`, an `UPDATE` or `DELETE` of one table whose `WHERE` names its rows by primary key
/// (`id IN (...)`), made to read the table through the primary key alone.
///
/// | backend | SQL |
/// | --- | --- |
/// | MySQL / MariaDB | `UPDATE t FORCE INDEX (PRIMARY) SET ...`, `DELETE t FROM t FORCE INDEX (PRIMARY) WHERE ...` |
/// | Postgres, SQLite | `stmt` unchanged |
///
/// Why: InnoDB locks every row an `UPDATE`/`DELETE` reads, not only those it changes, and in
/// autocommit under REPEATABLE READ it waits for a row another transaction holds. On a small or
/// young table MariaDB's optimizer may read `id IN (4 ids)` as a full scan of PRIMARY
/// (EXPLAIN: `type=index`, or `ALL` for a `DELETE`), so a mark of the relay's own `SENDING`
/// rows would wait out `innodb_lock_wait_timeout` on the uncommitted `WAIT` row of an open
/// business transaction. Forced onto PRIMARY the plan is `type=range`, one unique look-up per
/// id, and locks only the rows named.
/// READ COMMITTED alone is no cure for a `DELETE` (InnoDB's semi-consistent read, which skips
/// a locked row that does not match, serves `UPDATE` only), and a single-table `DELETE` takes no
/// index hint, hence the multi-table form. Postgres takes no such locks: an `UPDATE` never waits
/// on a row that is invisible to it.
///
/// # Errors
/// [`DbErr::Custom`] when `stmt` is not of the form this expects (a programming error).
pub(super) fn by_primary_key(mut stmt: Statement) -> Result<Statement, DbErr> {
    // The multi-table DELETE form takes no ORDER BY or LIMIT (MySQL's grammar): refuse those
    // here rather than fail at run time on MySQL alone.
    let rewritten = if stmt.sql.contains(" ORDER BY ") || stmt.sql.contains(" LIMIT ") {
        None
    } else if let Some(rest) = stmt.sql.strip_prefix("DELETE FROM ") {
        rest.split_once(' ').map(|(table, tail)| {
            format!("DELETE {table} FROM {table} FORCE INDEX (PRIMARY) {tail}")
        })
    } else if stmt.sql.starts_with("UPDATE ") {
        stmt.sql
            .split_once(" SET ")
            .map(|(head, tail)| format!("{head} FORCE INDEX (PRIMARY) SET {tail}"))
    } else {
        None
    };
    stmt.sql = rewritten.ok_or_else(|| {
        DbErr::Custom(format!(
            "by_primary_key: not a single-table UPDATE or DELETE without ORDER BY/LIMIT: {}",
            stmt.sql
        ))
    })?;
    Ok(stmt)
}

/// The batch claim: one short `READ COMMITTED` transaction (MariaDB has no `UPDATE ...
/// RETURNING` and no `LIMIT` in an `IN` subquery), see [`claim_locked`].
pub(super) async fn claim_batch<C>(db: &C, owner: &str, n: u64) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let locking = locking_candidates_query(DbBackend::MySql, n).build(DbBackend::MySql);
    crate::store::retry_transient(|| claim_locked(db, owner, locking.clone())).await
}

/// The ordered claim's heads: [`claim_locked`] over [`crate::store::ordered_heads_query`]
/// (`SELECT e.*, <now> AS claim_now FROM (<window>) AS w STRAIGHT_JOIN t_event_record AS e ON
/// e.id = w.id WHERE ... AND (SELECT MAX(p.id) ...) IS NULL [AND NOT EXISTS (<an earlier
/// FAIL>)] AND NOT EXISTS (<an event of the key out>) ... FOR UPDATE SKIP LOCKED`; the deep
/// claim joins its candidates with `INNER JOIN` and orders by `e.next_retry_time`). InnoDB
/// applies the locking clause to the outer rows only: the predecessor subqueries are
/// consistent (non-locking) reads of committed rows, so a predecessor another relay is
/// claiming right now (locked, not yet committed) is read as `WAIT`, still blocking, instead
/// of being skipped as a locked row (see `store/ordered.rs` for the whole argument).
pub(super) async fn claim_ordered_heads<C>(
    db: &C,
    owner: &str,
    policy: crate::config::OrderedPolicy,
    n: u64,
    scan: crate::store::HeadScan,
) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let locking = DbBackend::MySql.build(&crate::store::ordered_heads_query(
        DbBackend::MySql,
        policy,
        n,
        true,
        scan,
    ));
    crate::store::retry_transient(|| claim_locked(db, owner, locking.clone())).await
}

/// `SELECT *, <now> AS claim_now FROM t_event_record WHERE status = 'WAIT' AND next_retry_time
/// <= now ORDER BY next_retry_time LIMIT :n FOR UPDATE SKIP LOCKED`: the first statement of the
/// MySQL/MariaDB batch claim.
pub fn locking_candidates_query(backend: DbBackend, n: u64) -> Select<Entity> {
    crate::store::candidates_query(backend, n)
        .expr_as(crate::store::dialect::now(backend), "claim_now")
        .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = :now,
/// update_time = :now WHERE id IN (:ids) AND status = 'WAIT'`: the second statement of the
/// MySQL/MariaDB batch claim, over the rows the first one locked (`now` is the database clock
/// it read).
pub fn claim_locked_statement(
    ids: &[i64],
    owner: &str,
    now: sea_orm::prelude::DateTimeUtc,
) -> UpdateMany<Entity> {
    Entity::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .col_expr(Column::ClaimOwner, Expr::val(owner))
        .col_expr(Column::ClaimedAt, Expr::val(now))
        .col_expr(Column::UpdateTime, Expr::val(now))
        .filter(Column::Id.is_in(ids.iter().copied()))
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
}

/// A row locked by the MySQL/MariaDB batch claim, with the database's clock read in the same
/// statement.
struct LockedRow {
    model: Model,
    now: sea_orm::prelude::DateTimeUtc,
}

impl FromQueryResult for LockedRow {
    fn from_query_result(res: &sea_orm::QueryResult, pre: &str) -> Result<Self, DbErr> {
        Ok(LockedRow {
            model: Model::from_query_result(res, pre)?,
            now: res.try_get(pre, "claim_now")?,
        })
    }
}

/// The MySQL/MariaDB batch claim, one short `READ COMMITTED` transaction:
/// `SELECT *, <now> AS claim_now ... FOR UPDATE SKIP LOCKED`, then `UPDATE ... SET status =
/// 'SENDING', claim_owner = :owner, claimed_at = :claim_now, update_time = :claim_now WHERE id
/// IN (...) AND status = 'WAIT'`, commit. The rows are locked from the select to the commit, so
/// the claimed models are the selected ones with the claim applied: no re-read. The claim time
/// is the database's clock read by the locking select (a round trip before the `UPDATE`, so
/// the lease is shorter by that much, never longer), never the application's. The returned
/// `claimed_at`/`update_time` equal the stored values because the migration makes the columns
/// `DATETIME(6)` (a hand-made table with less precision would round them).
///
/// `locking` is the first statement: [`locking_candidates_query`] for the batch claim,
/// [`crate::store::ordered_heads_query`] for the ordered claim's heads.
async fn claim_locked<C>(db: &C, owner: &str, locking: Statement) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let backend = db.get_database_backend();
    // READ COMMITTED: InnoDB then takes no gap locks for the locking read, so the claim never
    // blocks concurrent inserts of new events (under REPEATABLE READ its next-key locks on the
    // WAIT range would make `with_event` inserts wait).
    let txn = db
        .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
        .await?;
    let locked: Vec<LockedRow> = LockedRow::find_by_statement(locking).all(&txn).await?;
    let Some(now) = locked.first().map(|r| r.now) else {
        txn.commit().await?;
        return Ok(Vec::new());
    };
    let ids: Vec<i64> = locked.iter().map(|r| r.model.id).collect();
    let updated = claim_locked_statement(&ids, owner, now);
    // Through PRIMARY, like every statement that names its rows by id (see
    // `dialect::by_primary_key`); not retried here, a failure ends the whole transaction.
    let updated = txn
        .execute_raw(by_primary_key(updated.build(backend))?)
        .await?
        .rows_affected();
    if updated != ids.len() as u64 {
        // Cannot happen while the rows are locked; if it does, claim nothing rather than
        // report rows this instance may not own.
        if let Err(e) = txn.rollback().await {
            tracing::warn!(error = %e, "rollback after a batch-claim mismatch failed");
        }
        return Err(DbErr::Custom(format!(
            "batch claim for {owner} updated {} of {} locked rows; rolled back",
            updated,
            ids.len()
        )));
    }
    txn.commit().await?;
    Ok(locked
        .into_iter()
        .map(|r| Model {
            status: EventStatus::Sending,
            claim_owner: Some(owner.to_owned()),
            claimed_at: Some(now),
            update_time: now,
            ..r.model
        })
        .collect())
}
