//! PostgreSQL: `CURRENT_TIMESTAMP`, `RETURNING`, `FOR UPDATE SKIP LOCKED`, `LISTEN`/`NOTIFY`.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sea_orm::sea_query::UpdateStatement;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, Value, Values};
use sea_orm_outbox_entity::event_record::Model;
use sea_orm_outbox_entity::EventStatus;

use crate::store::dialect::{NOTIFY_SLOT_LOCK_CLASS, WAKE_CHANNEL};

/// The crate feature serving Postgres, and whether this build has it.
pub(super) const FEATURE: (&str, bool) = ("postgres", cfg!(feature = "postgres"));
/// `INSERT`/`UPDATE ... RETURNING` exist.
pub(super) const RETURNING: bool = true;
/// `FOR UPDATE SKIP LOCKED` exists.
pub(super) const SKIP_LOCKED: bool = true;
/// Relays listen on [`WAKE_CHANNEL`].
pub(super) const LISTEN: bool = true;

/// `CURRENT_TIMESTAMP` (`timestamptz`, microseconds; in autocommit the statement's time), or
/// `(CURRENT_TIMESTAMP ± INTERVAL 'n microseconds')`.
pub(super) fn now_sql(offset: Option<(char, Duration)>) -> String {
    match offset {
        None => "CURRENT_TIMESTAMP".to_owned(),
        Some((sign, d)) => format!(
            "(CURRENT_TIMESTAMP {sign} INTERVAL '{} microseconds')",
            d.as_micros()
        ),
    }
}

/// The guard on the status of a statement naming its rows by id, as sea-query renders it:
/// `"t_event_record"."status" = ` and then `('SENDING')` (a literal,
/// [`crate::store::dialect::status_is`]) or `$n` (a bound value).
const STATUS_GUARD: &str = r#""t_event_record"."status" = "#;

/// `stmt` with every status guard ([`STATUS_GUARD`]) written `(<guard>) IS TRUE`, so that only
/// its id list can choose the index.
///
/// Why: every index of the table but the primary key starts with `status`, and the statistics
/// usually see few `SENDING` rows, so for `WHERE id IN (<100 ids>) AND status = 'SENDING' AND
/// claim_owner = $1` the planner prefers `idx_t_event_record_status_claimed_at` and reads every
/// event in flight, filtering on the ids: slower than the primary key, and more so the more
/// events are in flight (BENCHMARKS.md). A boolean test over the comparison is the same
/// condition for a `NOT NULL` column but no index can serve it (Postgres has no index hints;
/// MySQL's counterpart is `FORCE INDEX (PRIMARY)`). An `UPDATE` never waits on a row invisible
/// to it, so nothing else changes.
///
/// `stmt` must carry its values as bound parameters (as sea-query builds it): the rewrite reads
/// the SQL text and does not skip quoted strings, so call it before any inlining (PgBouncer's
/// simple protocol, `crate::store::inline_postgres`). A status guard of another form (a column
/// or an expression) is left unchanged.
///
/// # Errors
/// None on Postgres (the signature is the dialect's).
pub(super) fn by_primary_key(mut stmt: Statement) -> Result<Statement, DbErr> {
    if !stmt.sql.contains(STATUS_GUARD) {
        return Ok(stmt);
    }
    let mut out = String::with_capacity(stmt.sql.len() + 32);
    let mut rest = stmt.sql.as_str();
    while let Some(at) = rest.find(STATUS_GUARD) {
        out.push_str(&rest[..at]);
        let operand = &rest[at + STATUS_GUARD.len()..];
        let end = at + STATUS_GUARD.len();
        let len = guard_operand_len(operand);
        if len == 0 {
            // Another operand (a column, an expression): left as it is.
            out.push_str(&rest[at..end]);
        } else {
            out.push('(');
            out.push_str(&rest[at..end + len]);
            out.push_str(") IS TRUE");
        }
        rest = &operand[len..];
    }
    out.push_str(rest);
    stmt.sql = out;
    Ok(stmt)
}

/// The length of the operand at the start of `s`: a parenthesized status literal
/// (`('SENDING')`: capital letters and `_` between the quotes), or a placeholder (`$12`); 0
/// for anything else (which [`by_primary_key`] then leaves unchanged).
fn guard_operand_len(s: &str) -> usize {
    if let Some(inner) = s.strip_prefix("('") {
        let word = inner
            .bytes()
            .take_while(|b| b.is_ascii_uppercase() || *b == b'_')
            .count();
        if word > 0 && inner[word..].starts_with("')") {
            2 + word + 2
        } else {
            0
        }
    } else if let Some(digits) = s.strip_prefix('$') {
        1 + digits.bytes().take_while(u8::is_ascii_digit).count()
    } else {
        0
    }
}

/// The insert with the wake-up notification (see [`crate::store::dialect::with_wakeup`]), in
/// the insert's own `RETURNING` list (no `WITH`: a data-modifying CTE costs the writers more):
/// none for `None`; `... RETURNING "id", pg_notify('sea_orm_outbox', '') IS NOT NULL AS
/// notified` for `Some(ZERO)`; for `Some(interval)` the notification only when the insert gets
/// the advisory lock of the current slot of `interval`:
///
/// ```text
/// INSERT ... RETURNING "id", CASE WHEN pg_try_advisory_xact_lock(1329745752, $n::int)
///   THEN pg_notify('sea_orm_outbox', '') IS NOT NULL ELSE false END AS notified
/// ```
///
/// ([`NOTIFY_SLOT_LOCK_CLASS`]; the slot's key bound as the last parameter, see [`slot_key`];
/// `CASE` evaluates the notify only after the lock was got).
/// `pg_try_advisory_xact_lock` never waits; the lock is released when the transaction ends,
/// after the notify lock (`ProcReleaseLocks` releases the regular locks first), so the next
/// slot holder never queues behind this one's commit. The insert must end in `RETURNING "id"`
/// (as [`crate::store::insert_statement`]'s does here).
pub(super) fn with_wakeup(insert: Statement, notify: Option<Duration>) -> Statement {
    debug_assert!(insert.sql.ends_with(r#"RETURNING "id""#), "{}", insert.sql);
    let Some(interval) = notify else {
        return insert;
    };
    if interval.is_zero() {
        return Statement {
            sql: format!(
                "{}, pg_notify('{WAKE_CHANNEL}', '') IS NOT NULL AS notified",
                insert.sql
            ),
            ..insert
        };
    }
    let Some(key) = slot_key(interval, SystemTime::now()) else {
        // A clock before 1970 would give every slot one key: notify on its own instead.
        return with_wakeup(insert, Some(Duration::ZERO));
    };
    let mut values = insert.values.map(|v| v.0).unwrap_or_default();
    values.push(Value::Int(Some(key)));
    let slot = values.len();
    Statement {
        sql: format!(
            "{}, CASE WHEN pg_try_advisory_xact_lock({NOTIFY_SLOT_LOCK_CLASS}, ${slot}::int) \
             THEN pg_notify('{WAKE_CHANNEL}', '') IS NOT NULL ELSE false END AS notified",
            insert.sql
        ),
        values: Some(Values(values)),
        ..insert
    }
}

/// `SELECT pg_notify('sea_orm_outbox', '')`: the wake-up on its own (see
/// [`super::Dialect::wakeup_alone`]).
pub(super) fn wakeup_alone() -> Statement {
    Statement::from_string(
        DbBackend::Postgres,
        format!("SELECT pg_notify('{WAKE_CHANNEL}', '')"),
    )
}

/// The advisory lock key (second half) of the slot of `interval` that `now` falls in: the
/// number of whole `interval`s (in milliseconds, rounded up, at least 1) since the Unix epoch,
/// modulo 2^31 − 1; `None` for a clock before 1970 (the insert then notifies on its own).
///
/// **Why the writer's clock, not the database's.** The slot number only picks which lock the
/// concurrent inserts compete for, so that the key changes every `interval`. Nothing compares
/// it with a stored time: an insert skips its own notification only while another open
/// transaction holds the *same* key, whose commit then notifies. Clocks that differ between
/// writers change which inserts share a key: extra notifications where keys part, and at
/// worst an event that waits for the poll delay, as with the database's clock. The key is
/// taken when the statement is built, before the pool hands out a connection: an insert that
/// then took `interval` or longer and did not notify sends the notification on its own
/// afterwards ([`crate::store::insert_event`]). Reading `clock_timestamp()` in every insert
/// instead costs the writers commit rate (BENCHMARKS.md).
pub(crate) fn slot_key(interval: Duration, now: SystemTime) -> Option<i32> {
    let since = now.duration_since(UNIX_EPOCH).ok()?.as_millis();
    // The remainder is below 2^31 - 1: the conversion cannot fail.
    i32::try_from((since / slot_millis(interval)) % 2_147_483_647).ok()
}

/// `interval` in whole milliseconds, rounded up, at least 1 (the slot length).
fn slot_millis(interval: Duration) -> u128 {
    interval.as_nanos().div_ceil(1_000_000).max(1)
}

/// `UPDATE ... WHERE (status = 'WAIT') IS TRUE AND id = ANY(ARRAY(SELECT id ... FOR UPDATE SKIP
/// LOCKED)) RETURNING <the CLAIM_RETURNING columns>`: `id = ANY(ARRAY(subquery))` runs the
/// locking subquery once (an InitPlan); with `id IN (subquery)` Postgres may run it more than
/// once and claim more than `n` rows. The boolean test keeps the update on the primary key (see
/// `crate::store::claim::claim_update_with`).
pub(super) fn claim_batch_statement(owner: &str, n: u64) -> UpdateStatement {
    crate::store::claim_update(DbBackend::Postgres, owner, n, true)
}

/// [`claim_batch_statement`], one round trip.
pub(super) async fn claim_batch<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    n: u64,
) -> Result<Vec<Model>, DbErr> {
    let stmt = claim_batch_statement(owner, n);
    let rows = crate::store::retry_transient(|| db.query_all(&stmt)).await?;
    crate::store::claim::claimed_models(&rows, 0, owner)
}

/// The ordered claim's heads: [`crate::store::ordered_heads_statement`] with `FOR UPDATE
/// SKIP LOCKED` inside `id = ANY(ARRAY(..))`, one round trip. The predecessor check reads the
/// statement's snapshot: a predecessor claimed or being claimed by another relay is `WAIT` or
/// `SENDING` there, so its successor is not a head (see `store/ordered.rs`).
pub(super) async fn claim_ordered_heads<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    policy: crate::config::OrderedPolicy,
    n: u64,
    scan: crate::store::HeadScan,
) -> Result<Vec<Model>, DbErr> {
    let stmt =
        crate::store::ordered_heads_statement(DbBackend::Postgres, owner, policy, n, true, scan);
    super::claim_returning(db, &stmt).await
}

/// `ids` as a Postgres array literal, `{1,2,3}`: sent as one text value and cast to
/// `bigint[]` in the statement, so the statement's text is the same for any number of ids
/// (one prepared statement per connection, not one per count).
fn bigint_array(ids: &[i64]) -> String {
    let mut s = String::with_capacity(ids.len() * 8 + 2);
    s.push('{');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&id.to_string());
    }
    s.push('}');
    s
}

/// One statement that marks one claim's deliveries `SUCCESS` and claims the next batch (see
/// [`crate::store::mark_success_and_claim_batch`]):
///
/// ```text
/// WITH "outbox_done" AS (UPDATE "t_event_record" SET "status" = 'SUCCESS', "update_time" =
///   CURRENT_TIMESTAMP WHERE "id" = ANY(CAST(:done_ids AS bigint[])) AND ("status" =
///   'SENDING') IS TRUE AND "claim_owner" = :done_owner RETURNING "id"),
/// "outbox_claimed" AS (<claim_batch_statement(owner, n)>)
/// SELECT (SELECT COUNT(*) FROM "outbox_done") AS "outbox_marked", "outbox_claimed".*
/// FROM (SELECT 1) AS "outbox_one" LEFT JOIN "outbox_claimed" ON TRUE
/// ```
///
/// The claim part is the batch claim's own statement, unchanged (its values come first). Both
/// updates run on one snapshot: the marked rows are `SENDING` in it, so the claim (which takes
/// `WAIT` rows only) never touches them, and a row is never updated twice. The result has one
/// row per claimed event, or one row of NULLs when nothing was claimed; `outbox_marked` (on
/// every row) is the mark's `rows_affected`. The mark's status guard is a boolean test so that
/// the primary key alone serves it (see [`by_primary_key`]).
pub(super) fn mark_success_and_claim_statement(
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Statement {
    let claim = DbBackend::Postgres.build(&claim_batch_statement(owner, n));
    let mut values = claim.values.map(|v| v.0).unwrap_or_default();
    let (ids_at, owner_at) = (values.len() + 1, values.len() + 2);
    values.push(Value::from(bigint_array(done_ids)));
    values.push(Value::from(done_owner));
    let sql = format!(
        r#"WITH "outbox_done" AS (UPDATE "t_event_record" SET "status" = '{success}', "update_time" = {now} WHERE "id" = ANY(CAST(${ids_at} AS bigint[])) AND ("status" = '{sending}') IS TRUE AND "claim_owner" = ${owner_at} RETURNING "id"), "outbox_claimed" AS ({claim}) SELECT (SELECT COUNT(*) FROM "outbox_done") AS "outbox_marked", "outbox_claimed".* FROM (SELECT 1) AS "outbox_one" LEFT JOIN "outbox_claimed" ON TRUE"#,
        success = EventStatus::Success.as_str(),
        sending = EventStatus::Sending.as_str(),
        now = now_sql(None),
        claim = claim.sql,
    );
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// [`mark_success_and_claim_statement`], one round trip (transient conflicts retried: the
/// statement is atomic, a failed run changed nothing); the rows marked and the events claimed.
pub(super) async fn mark_success_and_claim<C: ConnectionTrait>(
    db: &C,
    done_ids: &[i64],
    done_owner: &str,
    owner: &str,
    n: u64,
) -> Result<(u64, Vec<Model>), DbErr> {
    let stmt = mark_success_and_claim_statement(done_ids, done_owner, owner, n);
    let rows = crate::store::retry_transient(|| db.query_all_raw(stmt.clone())).await?;
    // Every row carries the same count (the `LEFT JOIN` gives one row when nothing is claimed).
    let marked = match rows.first() {
        Some(r) => r.try_get_by_index::<i64>(0)?,
        None => 0,
    };
    let claimed = crate::store::claim::claimed_models(&rows, 1, owner)?;
    Ok((u64::try_from(marked).unwrap_or(0), claimed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_count_whole_intervals_since_the_epoch() {
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let ten = Duration::from_millis(10);
        assert_eq!(slot_key(ten, at(0)), Some(0));
        assert_eq!(slot_key(ten, at(9)), Some(0));
        assert_eq!(slot_key(ten, at(10)), Some(1));
        // 176,400,000,012 slots, modulo 2^31 - 1.
        assert_eq!(slot_key(ten, at(1_764_000_000_123)), Some(306_340_958));
        // A fraction of a millisecond rounds up; zero counts as 1 ms.
        assert_eq!(slot_key(Duration::from_micros(1_500), at(4)), Some(2));
        assert_eq!(slot_key(Duration::ZERO, at(7)), Some(7));
        // The longest interval: one key for as long as `SystemTime` lasts.
        assert_eq!(slot_key(Duration::MAX, SystemTime::now()), Some(0));
        // 1 ms slots a thousand years from now wrap around and stay in range.
        let later = UNIX_EPOCH + Duration::from_secs(1_000 * 365 * 24 * 3600);
        let ms = 1_000_u128 * 365 * 24 * 3600 * 1000;
        let expected = i32::try_from(ms % 2_147_483_647).expect("in range");
        assert_eq!(slot_key(Duration::from_millis(1), later), Some(expected));
        // Before 1970: no key.
        assert_eq!(slot_key(ten, UNIX_EPOCH - Duration::from_secs(5)), None);
    }

    #[test]
    fn the_slot_rule_binds_its_key() {
        let insert = Statement::from_sql_and_values(
            DbBackend::Postgres,
            r#"INSERT INTO "t" ("a") VALUES ($1) RETURNING "id""#,
            [1.into()],
        );
        let stmt = with_wakeup(insert, Some(Duration::from_millis(10)));
        assert_eq!(
            stmt.sql,
            r#"INSERT INTO "t" ("a") VALUES ($1) RETURNING "id", CASE WHEN pg_try_advisory_xact_lock(1329745752, $2::int) THEN pg_notify('sea_orm_outbox', '') IS NOT NULL ELSE false END AS notified"#
        );
        let values = stmt.values.expect("values").0;
        assert_eq!(values.len(), 2);
        assert!(matches!(values[1], Value::Int(Some(k)) if k >= 0));
        // Slots as long as they come: one key, 0.
        let insert = Statement::from_sql_and_values(DbBackend::Postgres, "RETURNING \"id\"", []);
        let stmt = with_wakeup(insert, Some(Duration::MAX));
        assert_eq!(stmt.values.expect("values").0, vec![Value::Int(Some(0))]);
    }

    #[test]
    fn status_guards_are_kept_off_the_indexes() {
        let stmt = Statement::from_string(
            DbBackend::Postgres,
            r#"UPDATE "t_event_record" SET "status" = ('SUCCESS') WHERE "t_event_record"."id" IN ($1, $2) AND "t_event_record"."status" = ('SENDING') AND "t_event_record"."claim_owner" = $3"#,
        );
        assert_eq!(
            by_primary_key(stmt).expect("rewrite").sql,
            r#"UPDATE "t_event_record" SET "status" = ('SUCCESS') WHERE "t_event_record"."id" IN ($1, $2) AND ("t_event_record"."status" = ('SENDING')) IS TRUE AND "t_event_record"."claim_owner" = $3"#
        );
        let bound = Statement::from_string(
            DbBackend::Postgres,
            r#"DELETE FROM "t_event_record" WHERE "t_event_record"."id" IN ($1) AND "t_event_record"."status" = $2"#,
        );
        assert_eq!(
            by_primary_key(bound).expect("rewrite").sql,
            r#"DELETE FROM "t_event_record" WHERE "t_event_record"."id" IN ($1) AND ("t_event_record"."status" = $2) IS TRUE"#
        );
        let column = Statement::from_string(
            DbBackend::Postgres,
            r#"UPDATE "t_event_record" SET "claimed_at" = NULL WHERE "t_event_record"."id" IN ($1) AND "t_event_record"."status" = "t_event_record"."status""#,
        );
        assert_eq!(
            by_primary_key(column.clone()).expect("rewrite").sql,
            column.sql
        );
        // Only a status literal counts: an expression in parentheses is left as it is.
        let expr = Statement::from_string(
            DbBackend::Postgres,
            r#"UPDATE "t_event_record" SET "claimed_at" = NULL WHERE "t_event_record"."id" IN ($1) AND "t_event_record"."status" = (lower('wait'))"#,
        );
        assert_eq!(by_primary_key(expr.clone()).expect("rewrite").sql, expr.sql);
    }

    #[test]
    fn guard_operands() {
        assert_eq!(guard_operand_len("('SENDING') AND x"), "('SENDING')".len());
        assert_eq!(
            guard_operand_len("('DEAD_LETTER')"),
            "('DEAD_LETTER')".len()
        );
        assert_eq!(guard_operand_len("$12 AND"), 3);
        assert_eq!(guard_operand_len("('a') AND"), 0);
        assert_eq!(guard_operand_len("(('SENDING'))"), 0);
        assert_eq!(guard_operand_len("('')"), 0);
        assert_eq!(guard_operand_len("\"t\".\"status\""), 0);
    }
}
