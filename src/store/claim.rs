//! Claiming: the candidate read and per-row claim of the seed, and the batch claim.
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, QueryStatementBuilder, UpdateStatement};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select, TransactionTrait, UpdateMany,
};
use sea_orm_outbox_entity::event_record::{Column, Entity, Model};
use sea_orm_outbox_entity::EventStatus;

// Reached by the statement snapshots (feature `test-support`) only: the MySQL claim runs them
// from its backend file.
#[allow(unused_imports)]
pub use super::backend::mysql::{claim_locked_statement, locking_candidates_query};
use super::{dialect, exec_by_ids, Claim, Dialect};

/// `SELECT * FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
/// next_retry_time LIMIT batch`: served by `idx_t_event_record_status_next_retry`. Takes no lock.
pub fn candidates_query(backend: DbBackend, batch: u64) -> Select<Entity> {
    Entity::find()
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
        .filter(Expr::col(Column::NextRetryTime).lte(dialect::now(backend)))
        .order_by_asc(Column::NextRetryTime)
        .limit(batch)
}

/// The due `WAIT` events, oldest due first, at most `batch`. Several instances seeing the same
/// rows is normal: [`claim`] decides who sends.
///
/// # Errors
/// Any database error.
pub async fn select_candidates<C: ConnectionTrait>(
    db: &C,
    batch: u64,
) -> Result<Vec<Model>, DbErr> {
    candidates_query(db.get_database_backend(), batch)
        .all(db)
        .await
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE id = :id AND status = 'WAIT' AND next_retry_time <= now AND
/// retry_count = :seen_retry_count`.
///
/// The last two guards go beyond the seed: a candidate read before another instance released it
/// with back-off is not claimed early, and the `retry_count` the worker computes from stays the
/// row's real one.
pub fn claim_statement(
    backend: DbBackend,
    id: i64,
    seen_retry_count: i32,
    owner: &str,
) -> UpdateMany<Entity> {
    let now = dialect::now(backend);
    Entity::update_many()
        .col_expr(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .col_expr(Column::ClaimOwner, Expr::val(owner))
        .col_expr(Column::ClaimedAt, now.clone())
        .col_expr(Column::UpdateTime, now.clone())
        .filter(Column::Id.eq(id))
        .filter(Column::Status.eq(EventStatus::Wait.as_str()))
        .filter(Expr::col(Column::NextRetryTime).lte(now))
        .filter(Column::RetryCount.eq(seen_retry_count))
}

/// Takes the lease on event `id` (seen with `seen_retry_count`) for `owner`.
///
/// # Errors
/// Any database error.
pub async fn claim<C: ConnectionTrait>(
    db: &C,
    id: i64,
    seen_retry_count: i32,
    owner: &str,
) -> Result<Claim, DbErr> {
    let backend = db.get_database_backend();
    let rows = exec_by_ids(db, &claim_statement(backend, id, seen_retry_count, owner)).await?;
    Ok(if rows == 1 { Claim::Won } else { Claim::Lost })
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND id IN (SELECT id FROM t_event_record WHERE
/// status = 'WAIT' AND next_retry_time <= now ORDER BY next_retry_time LIMIT :n) RETURNING *`:
/// the batch claim of SQLite (one writer at a time, so no lock clause) and, where the backend
/// can skip locked rows ([`Dialect::skip_locked`]), written `("status" = 'WAIT') IS TRUE AND
/// id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED))` as Postgres runs it, returning the
/// columns whose values the relay does not know instead of `*` (see `claim_update`).
/// MySQL/MariaDB run the two statements of [`locking_candidates_query`] and
/// [`claim_locked_statement`] instead (the form below, which they reject, is rendered for them
/// only for comparison).
pub fn claim_batch_statement(backend: DbBackend, owner: &str, n: u64) -> UpdateStatement {
    let d = Dialect::of(backend);
    claim_update(backend, owner, n, d.skip_locked() && d.returning())
}

/// The statement of [`claim_batch_statement`]; `locking` gives the Postgres form (`FOR UPDATE
/// SKIP LOCKED` inside `id = ANY(ARRAY(..))`).
///
/// The Postgres form is written so that its generic plan is its custom plan: every constant
/// inlined (`'WAIT'`, `'SENDING'`) and the row count split in two, the sub-select's own
/// `LIMIT` a literal ([`claim_limit_bucket`] of `n`: the next power of two) and the outer
/// `LIMIT $n` the exact count:
///
/// ```text
/// ... WHERE ("status" = 'WAIT') IS TRUE AND "id" = ANY(ARRAY(SELECT "id" FROM (SELECT "id" FROM
///   "t_event_record" WHERE "status" = 'WAIT' AND "next_retry_time" <= CURRENT_TIMESTAMP
///   ORDER BY "next_retry_time" ASC LIMIT <bucket> FOR UPDATE SKIP LOCKED) AS "due"
///   LIMIT $n)) RETURNING "id", "biz_no", "event_type", "payload", "retry_count",
///   "next_retry_time", "claimed_at", "last_error", "create_time", "headers"
/// ```
///
/// It returns the [`CLAIM_RETURNING`] columns, not `*`: the three the claim sets to known
/// values (`status`, `claim_owner`, `update_time`) are filled in by [`claimed_model`].
///
/// A generic plan cannot see its parameters: with `status = $1 ... LIMIT $2` Postgres finds it
/// far dearer than a custom plan and plans the claim anew at every execution
/// (`choose_custom_plan` in `plancache.c`). With the literal bucket the estimates agree and the
/// connection reuses one plan after five executions (measured: BENCHMARKS.md). The outer
/// `LIMIT` stops pulling rows after `n`, and rows are locked only as they are pulled, so no more
/// than `n` rows are locked or claimed, oldest due first. A connection's statement cache holds
/// one statement per bucket: eight up to 128, fifteen up to
/// [`crate::config::MAX_BATCH_SIZE`]. The ordered claim
/// ([`crate::store::ordered_heads_statement`]) binds its values and is planned each time.
pub(crate) fn claim_update(
    backend: DbBackend,
    owner: &str,
    n: u64,
    locking: bool,
) -> UpdateStatement {
    if locking {
        let due_sql = format!(
            r#"SELECT "id" FROM (SELECT "id" FROM "t_event_record" WHERE "status" = '{wait}' AND "next_retry_time" <= {now} ORDER BY "next_retry_time" ASC LIMIT {bucket} FOR UPDATE SKIP LOCKED) AS "due""#,
            wait = EventStatus::Wait.as_str(),
            now = dialect::now_sql(backend, None),
            bucket = claim_limit_bucket(n),
        );
        let mut update = claim_update_with(
            backend,
            owner,
            true,
            Expr::cust_with_values(
                format!(r#""id" = ANY(ARRAY({due_sql} LIMIT $1))"#),
                [i64::try_from(n).unwrap_or(i64::MAX)],
            ),
        );
        update.returning(Query::returning().columns(CLAIM_RETURNING));
        return update;
    }
    let mut due = Query::select();
    due.column(Column::Id)
        .from(Entity)
        .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
        .and_where(Expr::col(Column::NextRetryTime).lte(dialect::now(backend)))
        .order_by(Column::NextRetryTime, Order::Asc)
        .limit(n);
    claim_update_of(backend, owner, due, locking)
}

/// The columns the Postgres batch claim returns (the locking form of [`claim_update`], and the
/// claim half of [`mark_success_and_claim_statement`]), in this order: those whose values the
/// relay does not know (`claimed_at` is set by the claim, but to the server's clock). The other
/// three are known without reading them: `status` is `SENDING`, `claim_owner` the
/// claimer, and `update_time` equals `claimed_at` (both are set to the statement's
/// `CURRENT_TIMESTAMP`, one value for the whole transaction; see [`claim_update_with`]).
/// [`claimed_model`] completes the [`Model`]. This assumes no `BEFORE UPDATE` trigger on
/// `t_event_record` rewrites `status`, `claim_owner` or `update_time` (a trigger that did would
/// break the state machine's guards anyway).
///
/// Not `RETURNING *`: ten columns decoded by position cost the relay less CPU per event than
/// thirteen by name (BENCHMARKS.md).
pub(crate) const CLAIM_RETURNING: [Column; 10] = [
    Column::Id,
    Column::BizNo,
    Column::EventType,
    Column::Payload,
    Column::RetryCount,
    Column::NextRetryTime,
    Column::ClaimedAt,
    Column::LastError,
    Column::CreateTime,
    Column::Headers,
];

/// The [`Model`] of a row claimed by `owner`, read by position from the [`CLAIM_RETURNING`]
/// columns starting at column `first` of `row` (0 for the claim alone, 1 after the mark's count
/// in [`mark_success_and_claim_statement`]); `None` when the row has no claimed event (the
/// `LEFT JOIN`'s empty side: its id is `NULL`). The columns the claim set are filled in:
/// `status` `SENDING`, `claim_owner` `owner`, `update_time` = `claimed_at`.
///
/// # Errors
/// [`DbErr`] when a column has another type than the entity's (a column missing fails the
/// statement itself, before this).
pub(crate) fn claimed_model(
    row: &sea_orm::QueryResult,
    first: usize,
    owner: &str,
) -> Result<Option<Model>, DbErr> {
    let Some(id) = row.try_get_by_index::<Option<i64>>(first)? else {
        return Ok(None);
    };
    let at = |k: usize| first + k;
    let claimed_at: sea_orm::prelude::DateTimeUtc = row.try_get_by_index(at(6))?;
    Ok(Some(Model {
        id,
        biz_no: row.try_get_by_index(at(1))?,
        event_type: row.try_get_by_index(at(2))?,
        payload: row.try_get_by_index(at(3))?,
        status: EventStatus::Sending,
        retry_count: row.try_get_by_index(at(4))?,
        next_retry_time: row.try_get_by_index(at(5))?,
        claim_owner: Some(owner.to_owned()),
        claimed_at: Some(claimed_at),
        last_error: row.try_get_by_index(at(7))?,
        create_time: row.try_get_by_index(at(8))?,
        update_time: claimed_at,
        headers: row.try_get_by_index(at(9))?,
    }))
}

/// [`claimed_model`] of every row of `rows` that holds a claimed event, in order.
///
/// # Errors
/// As [`claimed_model`].
pub(crate) fn claimed_models(
    rows: &[sea_orm::QueryResult],
    first: usize,
    owner: &str,
) -> Result<Vec<Model>, DbErr> {
    let mut claimed = Vec::with_capacity(rows.len());
    for r in rows {
        claimed.extend(claimed_model(r, first, owner)?);
    }
    Ok(claimed)
}

/// The literal `LIMIT` of the Postgres batch claim's sub-select (see
/// [`claim_batch_statement`]): `n` rounded up to a power of two, at least 1, so that the claim's
/// prepared statement has one generic plan per bucket.
pub fn claim_limit_bucket(n: u64) -> u64 {
    // At most 2^62, so that the literal fits Postgres' bigint.
    n.clamp(1, 1 << 62).next_power_of_two()
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND id IN (<due>) RETURNING *`, or with `locking`
/// `("status" = 'WAIT') IS TRUE AND id = ANY(ARRAY(<due>))` (`due` then carries its own lock
/// clause; the guard: [`claim_update_with`]): the claim over the ids
/// `due` selects (SQLite's batch claim, or the ordered claim's heads; the Postgres batch claim is
/// [`claim_update`]'s own form).
pub(crate) fn claim_update_of(
    backend: DbBackend,
    owner: &str,
    due: sea_orm::sea_query::SelectStatement,
    locking: bool,
) -> UpdateStatement {
    let cond = if locking {
        // `id = ANY(ARRAY(subquery))` runs the subquery once (an InitPlan). With `id IN
        // (subquery)` Postgres may run the locking subquery more than once and claim more than
        // `n` rows.
        Expr::cust_with_expr(
            r#""id" = ANY(ARRAY($1))"#,
            Expr::SubQuery(None, Box::new(due.into_sub_query_statement())),
        )
    } else {
        Expr::col(Column::Id).in_subquery(due)
    };
    claim_update_with(backend, owner, locking, cond)
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND <ids> RETURNING *`, the statuses as literals
/// (constants of every claim; see [`claim_update`] for why literals). The Postgres batch claim
/// replaces `RETURNING *` with [`CLAIM_RETURNING`] and relies on `claimed_at` and `update_time`
/// being set from the one `now` below (`CURRENT_TIMESTAMP` on Postgres: the same value for the
/// whole transaction), so that [`claimed_model`] can fill in `update_time`; keep them so.
///
/// With `locking` (the Postgres forms, whose ids come from `id = ANY(ARRAY(..))`) the outer
/// guard is written `("status" = 'WAIT') IS TRUE`: the same condition (the column is `NOT
/// NULL`), but no index can serve it, so the ids drive the update through the primary key.
/// Written plainly, with statistics that saw few `WAIT` rows, Postgres may read every `WAIT`
/// row through an index leading with `status` and filter them on the id array, which is slower
/// (BENCHMARKS.md; the same reason as [`crate::store::dialect::by_primary_key`]'s).
fn claim_update_with(backend: DbBackend, owner: &str, locking: bool, ids: Expr) -> UpdateStatement {
    let wait = if locking {
        Expr::cust(format!(
            r#"("status" = '{}') IS TRUE"#,
            EventStatus::Wait.as_str()
        ))
    } else {
        Expr::col(Column::Status).eq(dialect::status_literal(EventStatus::Wait))
    };
    let now = dialect::now(backend);
    let mut update = Query::update();
    update
        .table(Entity)
        .value(
            Column::Status,
            dialect::status_literal(EventStatus::Sending),
        )
        .value(Column::ClaimOwner, Expr::val(owner))
        .value(Column::ClaimedAt, now.clone())
        .value(Column::UpdateTime, now)
        .and_where(wait)
        .and_where(ids);
    update.returning_all();
    update
}

/// Claims up to `n` due events for `owner` without waiting on rows other instances are
/// claiming, and returns them (status `SENDING`), oldest due first.
///
/// - Postgres: one `UPDATE ... WHERE ("status" = 'WAIT') IS TRUE AND id = ANY(ARRAY(SELECT ...
///   FOR UPDATE SKIP LOCKED)) RETURNING <the columns whose values it does not know>` (the
///   array form runs the locking subquery exactly once; the boolean guard keeps the update on
///   the primary key, see [`claim_batch_statement`]).
/// - SQLite: a lock-free read of whether anything is due, then (only when something is) the same
///   statement without the lock clause (SQLite has one writer at a time; the read keeps idle
///   relays off the write lock).
/// - MySQL/MariaDB (no `UPDATE ... RETURNING`, no `LIMIT` in an `IN` subquery): one short
///   `READ COMMITTED` transaction: `SELECT ... FOR UPDATE SKIP LOCKED` (with the database's
///   clock), `UPDATE ... WHERE id IN (...)`, commit; the locked rows are returned with the claim
///   applied.
///
/// The owner and status guards are those of [`claim`]; every event claimed is ours alone.
///
/// # Errors
/// Any database error (transient conflicts are retried first).
pub async fn claim_batch<C>(db: &C, owner: &str, n: u64) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let mut claimed = Dialect::of(db.get_database_backend())
        .claim_batch(db, owner, n)
        .await?;
    claimed.sort_by(|a, b| {
        a.next_retry_time
            .cmp(&b.next_retry_time)
            .then(a.id.cmp(&b.id))
    });
    Ok(claimed)
}

/// What [`mark_success_and_claim_batch`] did.
#[derive(Debug)]
pub struct MarkedAndClaimed {
    /// How many of the delivered ids were still the claim's and are now `SUCCESS` (the mark's
    /// `rows_affected`; the rest were reclaimed meanwhile: late acks).
    pub marked: u64,
    /// The events now claimed (status `SENDING`), oldest due first, as [`claim_batch`]
    /// returns them.
    pub claimed: Vec<Model>,
}

/// The statement of [`mark_success_and_claim_batch`] on `backend`; `None` where no single
/// statement can do both ([`Dialect::mark_and_claim_in_one`]: Postgres only).
pub fn mark_success_and_claim_statement(
    backend: DbBackend,
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Option<sea_orm::Statement> {
    Dialect::of(backend).mark_success_and_claim_statement(done_ids, done_owner, owner, n)
}

/// Marks `done_ids` (delivered events of the claim `done_owner`) `SUCCESS` exactly as
/// [`crate::store::mark_success_many`] does (guarded by `status = 'SENDING' AND claim_owner =
/// :done_owner`, its `rows_affected` returned) and claims up to `n` due events for `owner`
/// exactly as [`claim_batch`] does, in ONE statement and round trip (Postgres: a
/// data-modifying `WITH`, see [`mark_success_and_claim_statement`]): one commit per batch
/// instead of two. Both happen, or (on an error) neither.
///
/// # Errors
/// Any database error (transient conflicts are retried first); [`DbErr::Custom`] on a backend
/// without the single statement ([`Dialect::mark_and_claim_in_one`]): there, mark and claim
/// with the two functions.
pub async fn mark_success_and_claim_batch<C: ConnectionTrait>(
    db: &C,
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Result<MarkedAndClaimed, DbErr> {
    let (marked, mut claimed) = Dialect::of(db.get_database_backend())
        .mark_success_and_claim(db, done_ids, done_owner, owner, n)
        .await?;
    claimed.sort_by(|a, b| {
        a.next_retry_time
            .cmp(&b.next_retry_time)
            .then(a.id.cmp(&b.id))
    });
    Ok(MarkedAndClaimed { marked, claimed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_claim_sql() {
        let sql = claim_batch_statement(DbBackend::Postgres, "me", 20)
            .to_string(sea_orm::sea_query::PostgresQueryBuilder);
        assert!(
            sql.contains(r#""id" = ANY(ARRAY(SELECT "id" FROM (SELECT"#),
            "{sql}"
        );
        assert!(
            sql.contains("LIMIT 32 FOR UPDATE SKIP LOCKED) AS \"due\" LIMIT 20)"),
            "{sql}"
        );
        // `claimed_model` fills `update_time` in from `claimed_at`: both must be set from the
        // one transaction-stable `CURRENT_TIMESTAMP`.
        assert!(
            sql.contains(
                r#"SET "status" = 'SENDING', "claim_owner" = 'me', "claimed_at" = CURRENT_TIMESTAMP, "update_time" = CURRENT_TIMESTAMP"#
            ),
            "{sql}"
        );
        assert!(sql.ends_with(r#"RETURNING "id", "biz_no", "event_type", "payload", "retry_count", "next_retry_time", "claimed_at", "last_error", "create_time", "headers""#), "{sql}");
        assert_eq!(claim_limit_bucket(0), 1);
        assert_eq!(claim_limit_bucket(64), 64);
        assert_eq!(claim_limit_bucket(65), 128);
    }
}
