//! The outbox's statements: the only code that knows SQL and backends.
//!
//! One function per statement of the design, each deciding by `rows_affected` and returning a
//! typed outcome. Every guard (`status`, `claim_owner`) is part of the `WHERE` clause, so a late
//! worker can never overwrite a row another instance has taken over. Times come from
//! [`dialect`], the database clock.
//!
//! Each statement is built by a `*_statement` function and executed by another, so its SQL can be
//! rendered per backend (and `EXPLAIN`ed in tests) without a database.
pub mod consumed;
pub mod dialect;

use std::time::Duration;

use sea_orm::sea_query::{
    Expr, ExprTrait, InsertStatement, LockBehavior, LockType, Order, Query, QueryStatementBuilder,
    UpdateStatement,
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult, IsolationLevel,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, Select, TransactionSession, TransactionTrait,
    UpdateMany,
};
use sea_orm_outbox_entity::event_record::{self, Column, Entity, Model};
use sea_orm_outbox_entity::EventStatus;

use crate::error::is_transient;
use crate::event::NewEvent;

/// Attempts a guarded statement makes when it meets a transient conflict (deadlock,
/// serialization failure, SQLite busy) before the error is returned.
pub const TRANSIENT_ATTEMPTS: u32 = 4;

/// Runs `op` again (after 10, 20, 40 ms) while it fails with a transient conflict. Only for
/// statements whose failed run changed nothing and that are safe to repeat: every guarded
/// `UPDATE` here is (MariaDB, for one, may pick a reclaim and a claim as deadlock victims).
async fn retry_transient<T, F, Fut>(mut op: F) -> Result<T, DbErr>
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
fn truncate_reason(reason: &str) -> &str {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Runs `query`, an `UPDATE` or `DELETE` whose `WHERE` names its rows by id (`id IN (...)`),
/// reading the table through the primary key only ([`dialect::by_primary_key`]: on MySQL and
/// MariaDB it would otherwise wait on rows of open transactions that it does not change), and
/// returns `rows_affected`. Transient conflicts are retried ([`TRANSIENT_ATTEMPTS`]).
///
/// # Errors
/// Any database error.
pub async fn exec_by_ids<C, Q>(db: &C, query: &Q) -> Result<u64, DbErr>
where
    C: ConnectionTrait,
    Q: QueryTrait,
{
    let backend = db.get_database_backend();
    let stmt = dialect::by_primary_key(backend, query.build(backend))?;
    Ok(retry_transient(|| db.execute_raw(stmt.clone()))
        .await?
        .rows_affected())
}

/// Outcome of [`claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// `rows_affected == 1`: the lease is ours.
    Won,
    /// `rows_affected == 0`: another instance claimed it first (or it is no longer due). Normal
    /// with many scanners; not an error.
    Lost,
}

/// Outcome of an owner-guarded transition ([`mark_success`], [`release_for_retry`],
/// [`mark_fail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Transition {
    /// The row was still `SENDING` under our lease and now has its new state.
    Applied,
    /// `rows_affected == 0`: our lease was reclaimed meanwhile; the row was left as it is so the
    /// new owner's outcome stands.
    LeaseLost,
}

impl Transition {
    fn from_rows(rows: u64) -> Self {
        if rows == 1 {
            Transition::Applied
        } else {
            Transition::LeaseLost
        }
    }
}

/// `INSERT` of a new `WAIT` event due now (database clock), `retry_count` 0.
pub fn insert_statement(backend: DbBackend, event: &NewEvent) -> InsertStatement {
    let now = dialect::now(backend);
    let mut insert = Query::insert();
    insert
        .into_table(Entity)
        .columns([
            Column::BizNo,
            Column::EventType,
            Column::Payload,
            Column::Status,
            Column::RetryCount,
            Column::NextRetryTime,
            Column::CreateTime,
            Column::UpdateTime,
        ])
        .values_panic([
            Expr::val(event.biz_no()),
            Expr::val(event.event_type()),
            Expr::val(event.payload()),
            Expr::val(EventStatus::Wait.as_str()),
            Expr::val(0),
            now.clone(),
            now.clone(),
            now,
        ]);
    if dialect::insert_returns_id(backend) {
        insert.returning_col(Column::Id);
    }
    insert
}

/// Inserts `event` as a `WAIT` row due now and returns its id. On Postgres the same statement
/// also queues a `NOTIFY` on [`dialect::WAKE_CHANNEL`] (unless the event says [`NewEvent::notify_relays`]`(false)`), delivered when the transaction commits
/// (never on rollback), which wakes listening relays at once. Does not validate: callers go
/// through [`crate::OutboxExt::with_event`].
///
/// # Errors
/// Any database error (for example a missing table).
pub async fn insert_event<C: ConnectionTrait>(db: &C, event: &NewEvent) -> Result<i64, DbErr> {
    let backend = db.get_database_backend();
    let stmt = insert_statement(backend, event);
    if dialect::insert_returns_id(backend) {
        let row = db
            .query_one_raw(dialect::with_wakeup(
                backend,
                backend.build(&stmt),
                event.notifies_relays(),
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("INSERT ... RETURNING id returned no row".into()))?;
        row.try_get_by_index::<i64>(0)
    } else {
        let res = db.execute(&stmt).await?;
        i64::try_from(res.last_insert_id())
            .map_err(|_| DbErr::Custom("last insert id does not fit i64".into()))
    }
}

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

/// An update of event `id` guarded by `status = 'SENDING' AND claim_owner = :owner`.
fn owned(id: i64, owner: &str) -> UpdateMany<Entity> {
    Entity::update_many()
        .filter(Column::Id.eq(id))
        .filter(Column::Status.eq(EventStatus::Sending.as_str()))
        .filter(Column::ClaimOwner.eq(owner))
}

/// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id = :id AND status =
/// 'SENDING' AND claim_owner = :owner`. The lease columns stay as a record of who sent it.
///
/// # Errors
/// Any database error.
pub async fn mark_success<C: ConnectionTrait>(
    db: &C,
    id: i64,
    owner: &str,
) -> Result<Transition, DbErr> {
    let stmt = mark_success_statement(db.get_database_backend(), id, owner);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`mark_success`].
pub fn mark_success_statement(backend: DbBackend, id: i64, owner: &str) -> UpdateMany<Entity> {
    owned(id, owner)
        .col_expr(Column::Status, Expr::val(EventStatus::Success.as_str()))
        .col_expr(Column::UpdateTime, dialect::now(backend))
}

/// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
/// retry_count = :retry_count, next_retry_time = now + :backoff, last_error = :reason,
/// update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner = :owner`.
///
/// # Errors
/// Any database error.
pub async fn release_for_retry<C: ConnectionTrait>(
    db: &C,
    id: i64,
    owner: &str,
    retry_count: i32,
    backoff: Duration,
    reason: &str,
) -> Result<Transition, DbErr> {
    let backend = db.get_database_backend();
    let stmt = release_for_retry_statement(backend, id, owner, retry_count, backoff, reason);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`release_for_retry`].
pub fn release_for_retry_statement(
    backend: DbBackend,
    id: i64,
    owner: &str,
    retry_count: i32,
    backoff: Duration,
    reason: &str,
) -> UpdateMany<Entity> {
    owned(id, owner)
        .col_expr(Column::Status, Expr::val(EventStatus::Wait.as_str()))
        .col_expr(Column::ClaimOwner, Expr::cust("NULL"))
        .col_expr(Column::ClaimedAt, Expr::cust("NULL"))
        .col_expr(Column::RetryCount, Expr::val(retry_count))
        .col_expr(Column::NextRetryTime, dialect::now_plus(backend, backoff))
        .col_expr(Column::LastError, Expr::val(truncate_reason(reason)))
        .col_expr(Column::UpdateTime, dialect::now(backend))
}

/// `UPDATE t_event_record SET status = 'FAIL', retry_count = :retry_count, last_error = :reason,
/// update_time = now WHERE id = :id AND status = 'SENDING' AND claim_owner = :owner`: a dead
/// letter.
///
/// # Errors
/// Any database error.
pub async fn mark_fail<C: ConnectionTrait>(
    db: &C,
    id: i64,
    owner: &str,
    retry_count: i32,
    reason: &str,
) -> Result<Transition, DbErr> {
    let stmt = mark_fail_statement(db.get_database_backend(), id, owner, retry_count, reason);
    Ok(Transition::from_rows(exec_by_ids(db, &stmt).await?))
}

/// The statement of [`mark_fail`].
pub fn mark_fail_statement(
    backend: DbBackend,
    id: i64,
    owner: &str,
    retry_count: i32,
    reason: &str,
) -> UpdateMany<Entity> {
    owned(id, owner)
        .col_expr(Column::Status, Expr::val(EventStatus::Fail.as_str()))
        .col_expr(Column::RetryCount, Expr::val(retry_count))
        .col_expr(Column::LastError, Expr::val(truncate_reason(reason)))
        .col_expr(Column::UpdateTime, dialect::now(backend))
}

/// What a reclaim pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct Reclaimed {
    /// Expired leases put back to `WAIT` (retry_count + 1).
    pub requeued: u64,
    /// Expired leases whose retries were used up: now `FAIL` (dead letters).
    pub dead_lettered: u64,
}

impl Reclaimed {
    /// Every expired lease handled.
    pub fn total(&self) -> u64 {
        self.requeued + self.dead_lettered
    }
}

/// The reason stored in `last_error` when a lease expires.
pub const LEASE_EXPIRED: &str = "lease expired: the sender died or hung mid-send";

/// Expired leases handled per statement by [`reclaim_stuck`] (and rows per batch of the other
/// batched maintenance statements): a backlog of a million expired leases after an outage is
/// many short statements, never one giant one.
pub const RECLAIM_BATCH: u64 = 1000;

/// `SELECT id FROM t_event_record WHERE status = 'SENDING' AND claimed_at < now - :lease ORDER
/// BY claimed_at LIMIT :batch`: the oldest expired leases, read through `idx_t_event_record_status_claimed_at`
/// without locking anything.
pub fn expired_leases_query(backend: DbBackend, lease: Duration, batch: u64) -> Select<Entity> {
    Entity::find()
        .select_only()
        .column(Column::Id)
        .filter(Column::Status.eq(EventStatus::Sending.as_str()))
        .filter(Expr::col(Column::ClaimedAt).lt(dialect::now_minus(backend, lease)))
        .order_by_asc(Column::ClaimedAt)
        .limit(batch)
}

/// `UPDATE t_event_record SET status = 'WAIT' | 'FAIL', claim_owner = NULL, claimed_at = NULL,
/// retry_count = retry_count + 1, last_error = 'lease expired ...', update_time = now WHERE id
/// IN (:ids) AND status = 'SENDING' AND claimed_at < now - :lease AND retry_count <
/// :max_retries` (to `WAIT`) or `>= :max_retries` (to `FAIL`). Judged by `claimed_at` alone,
/// never by `next_retry_time`; the guards are checked again on each row, so a lease renewed
/// since [`expired_leases_query`] read it is left alone.
///
/// A reclaim counts as a failed attempt, so a message that kills its sender every time ends in
/// `FAIL` after the retry limit instead of circling forever (the seed's design would loop).
pub fn reclaim_statement(
    backend: DbBackend,
    ids: &[i64],
    lease: Duration,
    max_retries: u32,
    to: EventStatus,
) -> UpdateMany<Entity> {
    let limit = i32::try_from(max_retries).unwrap_or(i32::MAX);
    let stmt = Entity::update_many()
        .col_expr(Column::Status, Expr::val(to.as_str()))
        .col_expr(Column::ClaimOwner, Expr::cust("NULL"))
        .col_expr(Column::ClaimedAt, Expr::cust("NULL"))
        .col_expr(Column::RetryCount, Expr::col(Column::RetryCount).add(1))
        .col_expr(Column::LastError, Expr::val(LEASE_EXPIRED))
        .col_expr(Column::UpdateTime, dialect::now(backend))
        .filter(Column::Id.is_in(ids.iter().copied()))
        .filter(Column::Status.eq(EventStatus::Sending.as_str()))
        .filter(Expr::col(Column::ClaimedAt).lt(dialect::now_minus(backend, lease)));
    if to == EventStatus::Fail {
        stmt.filter(Column::RetryCount.gte(limit))
    } else {
        stmt.filter(Column::RetryCount.lt(limit))
    }
}

/// Handles every lease older than `lease` (an instance died or hung mid-send): back to `WAIT`
/// with `retry_count + 1`, or `FAIL` once `retry_count` has reached `max_retries`.
///
/// Works in batches of at most `batch` leases until a batch comes back short: each batch reads
/// the ids ([`expired_leases_query`], no locks) and then updates exactly those rows through the
/// primary key ([`reclaim_statement`], [`exec_by_ids`]). A range `UPDATE` over the status
/// index would, on MySQL/MariaDB, also lock (and wait on) rows of open business transactions
/// that it never changes.
///
/// # Errors
/// [`DbErr::Custom`] when `batch` is 0; any database error (batches done before it stay done).
pub async fn reclaim_stuck<C: ConnectionTrait>(
    db: &C,
    lease: Duration,
    max_retries: u32,
    batch: u64,
) -> Result<Reclaimed, DbErr> {
    if batch == 0 {
        return Err(DbErr::Custom(
            "reclaim batch size must be at least 1".into(),
        ));
    }
    let backend = db.get_database_backend();
    let mut done = Reclaimed::default();
    loop {
        let ids: Vec<i64> = expired_leases_query(backend, lease, batch)
            .into_tuple()
            .all(db)
            .await?;
        if ids.is_empty() {
            break;
        }
        let to_fail = reclaim_statement(backend, &ids, lease, max_retries, EventStatus::Fail);
        let failed = exec_by_ids(db, &to_fail).await?;
        let to_wait = reclaim_statement(backend, &ids, lease, max_retries, EventStatus::Wait);
        let requeued = exec_by_ids(db, &to_wait).await?;
        done.dead_lettered += failed;
        done.requeued += requeued;
        // A short batch is the last; a full one that changed nothing (every row renewed or
        // handled by another instance meanwhile) ends the pass too, so it can never spin.
        if (ids.len() as u64) < batch || failed + requeued == 0 {
            break;
        }
    }
    Ok(done)
}

/// `UPDATE ... WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner = :owner`, the guard
/// of the statements below.
fn owned_many(ids: &[i64], owner: &str) -> UpdateMany<Entity> {
    Entity::update_many()
        .filter(Column::Id.is_in(ids.iter().copied()))
        .filter(Column::Status.eq(EventStatus::Sending.as_str()))
        .filter(Column::ClaimOwner.eq(owner))
}

/// Runs an [`owned_many`] statement through the primary key ([`exec_by_ids`]) and returns how
/// many rows were still ours; nothing at all for no ids.
async fn update_owned<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    stmt: UpdateMany<Entity>,
) -> Result<u64, DbErr> {
    if ids.is_empty() {
        return Ok(0);
    }
    exec_by_ids(db, &stmt).await
}

/// `UPDATE t_event_record SET status = 'SUCCESS', update_time = now WHERE id IN (:ids) AND
/// status = 'SENDING' AND claim_owner = :owner`: one statement for a round's deliveries. Returns
/// how many rows were still ours (the rest were reclaimed meanwhile: late acks).
///
/// # Errors
/// Any database error.
pub async fn mark_success_many<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = mark_success_many_statement(db.get_database_backend(), ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`mark_success_many`].
pub fn mark_success_many_statement(
    backend: DbBackend,
    ids: &[i64],
    owner: &str,
) -> UpdateMany<Entity> {
    owned_many(ids, owner)
        .col_expr(Column::Status, Expr::val(EventStatus::Success.as_str()))
        .col_expr(Column::UpdateTime, dialect::now(backend))
}

/// `UPDATE t_event_record SET status = 'WAIT', claim_owner = NULL, claimed_at = NULL,
/// update_time = now WHERE id IN (:ids) AND status = 'SENDING' AND claim_owner = :owner`: hands
/// claimed but unsent events back at once (graceful shutdown), `retry_count` and
/// `next_retry_time` unchanged, so another instance can send them without waiting for the lease.
///
/// # Errors
/// Any database error.
pub async fn release_unsent<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = release_unsent_statement(db.get_database_backend(), ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`release_unsent`].
pub fn release_unsent_statement(
    backend: DbBackend,
    ids: &[i64],
    owner: &str,
) -> UpdateMany<Entity> {
    owned_many(ids, owner)
        .col_expr(Column::Status, Expr::val(EventStatus::Wait.as_str()))
        .col_expr(Column::ClaimOwner, Expr::cust("NULL"))
        .col_expr(Column::ClaimedAt, Expr::cust("NULL"))
        .col_expr(Column::UpdateTime, dialect::now(backend))
}

/// `UPDATE t_event_record SET claimed_at = now WHERE id IN (:ids) AND status = 'SENDING' AND
/// claim_owner = :owner`: renews the leases of sends still in flight. Returns how many were
/// still ours; fewer than `ids.len()` means some lease was lost (see [`owned_ids`]).
///
/// # Errors
/// Any database error.
pub async fn renew_leases<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<u64, DbErr> {
    let stmt = renew_leases_statement(db.get_database_backend(), ids, owner);
    update_owned(db, ids, stmt).await
}

/// The statement of [`renew_leases`].
pub fn renew_leases_statement(backend: DbBackend, ids: &[i64], owner: &str) -> UpdateMany<Entity> {
    owned_many(ids, owner).col_expr(Column::ClaimedAt, dialect::now(backend))
}

/// The ids among `ids` still `SENDING` under `owner`'s lease.
///
/// # Errors
/// Any database error.
pub async fn owned_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
    owner: &str,
) -> Result<Vec<i64>, DbErr> {
    Entity::find()
        .select_only()
        .column(Column::Id)
        .filter(Column::Id.is_in(ids.iter().copied()))
        .filter(Column::Status.eq(EventStatus::Sending.as_str()))
        .filter(Column::ClaimOwner.eq(owner))
        .into_tuple::<i64>()
        .all(db)
        .await
}

/// `UPDATE t_event_record SET status = 'SENDING', claim_owner = :owner, claimed_at = now,
/// update_time = now WHERE status = 'WAIT' AND id IN (SELECT id FROM t_event_record WHERE
/// status = 'WAIT' AND next_retry_time <= now ORDER BY next_retry_time LIMIT :n) RETURNING *`:
/// the batch claim of SQLite (one writer at a time, so no lock clause) and, written
/// `id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED))`, of Postgres.
pub fn claim_batch_statement(backend: DbBackend, owner: &str, n: u64) -> UpdateStatement {
    let now = dialect::now(backend);
    let mut due = Query::select();
    due.column(Column::Id)
        .from(Entity)
        .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()))
        .and_where(Expr::col(Column::NextRetryTime).lte(now.clone()))
        .order_by(Column::NextRetryTime, Order::Asc)
        .limit(n);
    if backend == DbBackend::Postgres {
        due.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    let mut update = Query::update();
    update
        .table(Entity)
        .value(Column::Status, Expr::val(EventStatus::Sending.as_str()))
        .value(Column::ClaimOwner, Expr::val(owner))
        .value(Column::ClaimedAt, now.clone())
        .value(Column::UpdateTime, now)
        .and_where(Expr::col(Column::Status).eq(EventStatus::Wait.as_str()));
    if backend == DbBackend::Postgres {
        // `id = ANY(ARRAY(subquery))` runs the subquery once (an InitPlan). With `id IN
        // (subquery)` Postgres may run the locking subquery more than once and claim more than
        // `n` rows.
        update.and_where(Expr::cust_with_expr(
            r#""id" = ANY(ARRAY($1))"#,
            Expr::SubQuery(None, Box::new(due.into_sub_query_statement())),
        ));
    } else {
        update.and_where(Expr::col(Column::Id).in_subquery(due));
    }
    update.returning_all();
    update
}

/// Claims up to `n` due events for `owner` in one round trip without waiting on rows other
/// instances are claiming, and returns them (status `SENDING`), oldest due first.
///
/// - Postgres: one `UPDATE ... WHERE id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED))
///   RETURNING *` (the array form runs the locking subquery exactly once).
/// - SQLite: the same statement without the lock clause (SQLite has one writer at a time).
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
    let backend = db.get_database_backend();
    let mut claimed = if dialect::update_returns_rows(backend) {
        let stmt = claim_batch_statement(backend, owner, n);
        let rows = retry_transient(|| db.query_all(&stmt)).await?;
        rows.iter()
            .map(|r| Model::from_query_result(r, ""))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        retry_transient(|| claim_batch_locking(db, owner, n)).await?
    };
    claimed.sort_by(|a, b| {
        a.next_retry_time
            .cmp(&b.next_retry_time)
            .then(a.id.cmp(&b.id))
    });
    Ok(claimed)
}

/// `SELECT *, <now> AS claim_now FROM t_event_record WHERE status = 'WAIT' AND next_retry_time
/// <= now ORDER BY next_retry_time LIMIT :n FOR UPDATE SKIP LOCKED`: the first statement of the
/// MySQL/MariaDB batch claim.
pub fn locking_candidates_query(backend: DbBackend, n: u64) -> Select<Entity> {
    candidates_query(backend, n)
        .expr_as(dialect::now(backend), "claim_now")
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
async fn claim_batch_locking<C>(db: &C, owner: &str, n: u64) -> Result<Vec<Model>, DbErr>
where
    C: ConnectionTrait + TransactionTrait,
{
    let backend = db.get_database_backend();
    // READ COMMITTED: InnoDB then takes no gap locks for the locking read, so the claim never
    // blocks concurrent inserts of new events (under REPEATABLE READ its next-key locks on the
    // WAIT range made `with_event` inserts wait while a business transaction stayed open).
    let txn = db
        .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
        .await?;
    let locked: Vec<LockedRow> = locking_candidates_query(backend, n)
        .into_model::<LockedRow>()
        .all(&txn)
        .await?;
    let Some(now) = locked.first().map(|r| r.now) else {
        txn.commit().await?;
        return Ok(Vec::new());
    };
    let ids: Vec<i64> = locked.iter().map(|r| r.model.id).collect();
    let updated = claim_locked_statement(&ids, owner, now);
    // Through PRIMARY, like every statement that names its rows by id (see
    // `dialect::by_primary_key`); not retried here, a failure ends the whole transaction.
    let updated = txn
        .execute_raw(dialect::by_primary_key(backend, updated.build(backend))?)
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

/// Reads one event by id.
///
/// # Errors
/// Any database error.
pub async fn find_event<C: ConnectionTrait>(
    db: &C,
    id: i64,
) -> Result<Option<event_record::Model>, DbErr> {
    Entity::find_by_id(id).one(db).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_claim_sql() {
        let sql = claim_batch_statement(DbBackend::Postgres, "me", 20)
            .to_string(sea_orm::sea_query::PostgresQueryBuilder);
        assert!(sql.contains(r#""id" = ANY(ARRAY((SELECT"#), "{sql}");
        assert!(sql.contains("FOR UPDATE SKIP LOCKED"), "{sql}");
    }
}
