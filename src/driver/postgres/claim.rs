//! The Postgres batch claim: one `UPDATE ... RETURNING` whose ids come from `FOR UPDATE SKIP
//! LOCKED` inside `id = ANY(ARRAY(..))`, and the statement that marks one claim's deliveries
//! and claims the next batch at once.
use sea_orm::sea_query::{
    Expr, ExprTrait, Query, SelectStatement, SubQueryStatement, UpdateStatement,
};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value};
use sea_orm_outbox_entity::event_record::{Column, Model};
use sea_orm_outbox_entity::EventStatus;

use super::{now_sql, primary_key_only};
use crate::driver::{retry_transient, Driver};
use crate::Completion;

/// `UPDATE ... WHERE ("status" = 'WAIT') IS TRUE AND "id" = ANY(ARRAY(SELECT "id" FROM
/// (SELECT "id" ... ORDER BY "next_retry_time" ASC LIMIT <bucket> FOR UPDATE SKIP LOCKED) AS
/// "due" LIMIT $n)) RETURNING <CLAIM_RETURNING>`. `id = ANY(ARRAY(..))` runs the locking
/// subquery once (with `id IN (..)` Postgres may run it again and claim more than `n` rows); the
/// boolean test keeps the update on the primary key ([`primary_key_only`]).
///
/// Every constant is inlined and the inner `LIMIT` is a literal ([`claim_limit_bucket`]), so
/// the generic plan is the custom plan and each connection plans the claim once per bucket; the
/// outer `LIMIT $n` locks and claims exactly `n` rows at most, oldest due first.
pub(crate) fn claim_batch_statement(driver: Driver, owner: &str, n: u64) -> UpdateStatement {
    let due_sql = format!(
        r#"SELECT "id" FROM (SELECT "id" FROM {table} WHERE "status" = '{wait}' AND "next_retry_time" <= {now} ORDER BY "next_retry_time" ASC LIMIT {bucket} FOR UPDATE SKIP LOCKED) AS "due""#,
        table = driver.table().quoted('"'),
        wait = EventStatus::Wait.as_str(),
        now = now_sql(None),
        bucket = claim_limit_bucket(n),
    );
    let mut update = driver.claim_update(
        owner,
        wait_guard(),
        Expr::cust_with_values(
            format!(r#""id" = ANY(ARRAY({due_sql} LIMIT $1))"#),
            [i64::try_from(n).unwrap_or(i64::MAX)],
        ),
    );
    update.returning(Query::returning().columns(CLAIM_RETURNING));
    update
}

/// `("status" = 'WAIT') IS TRUE`, the outer guard of the claims whose ids come from `id =
/// ANY(ARRAY(..))` ([`primary_key_only`]).
fn wait_guard() -> Expr {
    primary_key_only(
        Expr::col(Column::Status).eq(Expr::Constant(EventStatus::Wait.as_str().into())),
    )
}

/// The claim over the ids `due` selects (with its own lock clause), `("status" = 'WAIT') IS
/// TRUE AND id = ANY(ARRAY(<due>))`: the ordered claim's heads.
pub(crate) fn claim_of(driver: Driver, owner: &str, due: SelectStatement) -> UpdateStatement {
    let ids = Expr::cust_with_expr(
        r#""id" = ANY(ARRAY($1))"#,
        Expr::SubQuery(None, Box::new(SubQueryStatement::SelectStatement(due))),
    );
    driver.claim_update(owner, wait_guard(), ids)
}

/// The columns the Postgres batch claim returns, decoded by position: those whose values the
/// relay does not know. [`claimed_models`] fills in the other three (`status`, `claim_owner`,
/// and `update_time`, set to the same `CURRENT_TIMESTAMP` as `claimed_at`), assuming no
/// `BEFORE UPDATE` trigger rewrites them.
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

/// The [`Model`]s of the rows claimed by `owner`, read by position from the
/// [`CLAIM_RETURNING`] columns starting at column `first`; a row of the `LEFT JOIN`'s empty side
/// holds none. The columns the claim set are filled in: `status` `SENDING`, `claim_owner`
/// `owner`, `update_time` = `claimed_at`.
pub(crate) fn claimed_models(
    rows: &[sea_orm::QueryResult],
    first: usize,
    owner: &str,
) -> Result<Vec<Model>, DbErr> {
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(id) = row.try_get_by_index::<Option<i64>>(first)? else {
            continue;
        };
        let at = |k: usize| first + k;
        let claimed_at: sea_orm::prelude::DateTimeUtc = row.try_get_by_index(at(6))?;
        claimed.push(Model {
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
        });
    }
    Ok(claimed)
}

/// The literal `LIMIT` of the batch claim's sub-select: `n` rounded up to a power of two (at
/// least 1, at most 2^62), so that the prepared statement has one generic plan per bucket.
pub(crate) fn claim_limit_bucket(n: u64) -> u64 {
    n.clamp(1, 1 << 62).next_power_of_two()
}

/// [`claim_batch_statement`], one round trip.
pub(crate) async fn claim_batch<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    owner: &str,
    n: u64,
) -> Result<Vec<Model>, DbErr> {
    let stmt = claim_batch_statement(driver, owner, n);
    let rows = retry_transient(|| db.query_all(&stmt)).await?;
    claimed_models(&rows, 0, owner)
}

/// `ids` as a Postgres array literal, `{1,2,3}`, cast to `bigint[]` in the statement, so the
/// statement's text is the same for any number of ids.
fn bigint_array(ids: &[i64]) -> String {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{{{}}}", ids.join(","))
}

/// One claim's deliveries: their ids, the claim (`claim_owner`) and how to complete them.
pub(crate) type Done<'a> = (&'a [i64], &'a str, Completion);

/// One statement that completes one claim's deliveries (marked `SUCCESS`, or deleted with
/// [`Completion::Delete`]) and claims the next batch (see
/// [`crate::driver::mark_success_and_claim_batch`]): `WITH "outbox_done" AS (UPDATE ... SET
/// "status" = 'SUCCESS' ... RETURNING "id"), "outbox_claimed" AS (<claim_batch_statement>)
/// SELECT (SELECT COUNT(*) FROM "outbox_done") AS "outbox_marked", "outbox_claimed".* ...`.
/// Both updates run on one snapshot, where the marked rows are `SENDING`, so the claim never
/// touches them. One row per claimed event, or one row of NULLs when nothing was claimed.
pub(crate) fn mark_success_and_claim_statement(
    driver: Driver,
    (done_ids, done_owner, completion): Done<'_>,
    owner: &str,
    n: u64,
) -> Statement {
    let claim = DbBackend::Postgres.build(&claim_batch_statement(driver, owner, n));
    let mut values = claim.values.map(|v| v.0).unwrap_or_default();
    let (ids_at, owner_at) = (values.len() + 1, values.len() + 2);
    values.push(Value::from(bigint_array(done_ids)));
    values.push(Value::from(done_owner));
    let sql = format!(
        r#"WITH "outbox_done" AS ({done} {table} {set}WHERE "id" = ANY(CAST(${ids_at} AS bigint[])) AND ("status" = '{sending}') IS TRUE AND "claim_owner" = ${owner_at} RETURNING "id"), "outbox_claimed" AS ({claim}) SELECT (SELECT COUNT(*) FROM "outbox_done") AS "outbox_marked", "outbox_claimed".* FROM (SELECT 1) AS "outbox_one" LEFT JOIN "outbox_claimed" ON TRUE"#,
        done = match completion {
            Completion::Update => "UPDATE",
            Completion::Delete => "DELETE FROM",
        },
        table = driver.table().quoted('"'),
        set = match completion {
            Completion::Update => format!(
                r#"SET "status" = '{}', "update_time" = {} "#,
                EventStatus::Success.as_str(),
                now_sql(None)
            ),
            Completion::Delete => String::new(),
        },
        sending = EventStatus::Sending.as_str(),
        claim = claim.sql,
    );
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// [`mark_success_and_claim_statement`], one round trip (transient conflicts retried: the
/// statement is atomic); the rows marked and the events claimed.
pub(crate) async fn mark_success_and_claim<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    done: Done<'_>,
    owner: &str,
    n: u64,
) -> Result<(u64, Vec<Model>), DbErr> {
    let stmt = mark_success_and_claim_statement(driver, done, owner, n);
    let rows = retry_transient(|| db.query_all_raw(stmt.clone())).await?;
    // Every row carries the same count (the `LEFT JOIN` gives one row when nothing is claimed).
    let marked = match rows.first() {
        Some(r) => r.try_get_by_index::<i64>(0)?,
        None => 0,
    };
    let claimed = claimed_models(&rows, 1, owner)?;
    Ok((u64::try_from(marked).unwrap_or(0), claimed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_claim_sql() {
        let sql = claim_batch_statement(Driver::Postgres, "me", 20)
            .to_string(sea_orm::sea_query::PostgresQueryBuilder);
        assert!(
            sql.contains(r#""id" = ANY(ARRAY(SELECT "id" FROM (SELECT"#),
            "{sql}"
        );
        assert!(
            sql.contains("LIMIT 32 FOR UPDATE SKIP LOCKED) AS \"due\" LIMIT 20)"),
            "{sql}"
        );
        // `claimed_models` fills `update_time` in from `claimed_at`: both must be set from the
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
