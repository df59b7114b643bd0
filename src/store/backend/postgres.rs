//! PostgreSQL: `CURRENT_TIMESTAMP`, `RETURNING`, `FOR UPDATE SKIP LOCKED`, `LISTEN`/`NOTIFY`.
use std::time::Duration;

use sea_orm::sea_query::UpdateStatement;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use sea_orm_outbox_entity::event_record::Model;

use crate::store::dialect::WAKE_CHANNEL;

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

/// Unchanged: an `UPDATE` never waits on a row that is invisible to it.
pub(super) fn by_primary_key(stmt: Statement) -> Result<Statement, DbErr> {
    Ok(stmt)
}

/// `WITH ins AS (<insert>), woke AS (SELECT pg_notify('sea_orm_outbox', '')) SELECT ins.id
/// FROM ins, woke` when `notify`: the same round trip queues the notification, delivered at
/// commit and dropped on rollback (identical notifications of one transaction are delivered
/// once).
pub(super) fn with_wakeup(insert: Statement, notify: bool) -> Statement {
    if !notify {
        return insert;
    }
    Statement {
        sql: format!(
            "WITH ins AS ({}), woke AS (SELECT pg_notify('{WAKE_CHANNEL}', '')) \
             SELECT ins.id FROM ins, woke",
            insert.sql
        ),
        ..insert
    }
}

/// `UPDATE ... WHERE status = 'WAIT' AND id = ANY(ARRAY(SELECT id ... FOR UPDATE SKIP LOCKED))
/// RETURNING *`: `id = ANY(ARRAY(subquery))` runs the locking subquery once (an InitPlan); with
/// `id IN (subquery)` Postgres may run it more than once and claim more than `n` rows.
pub(super) fn claim_batch_statement(owner: &str, n: u64) -> UpdateStatement {
    crate::store::claim_update(DbBackend::Postgres, owner, n, true)
}

/// [`claim_batch_statement`], one round trip.
pub(super) async fn claim_batch<C: ConnectionTrait>(
    db: &C,
    owner: &str,
    n: u64,
) -> Result<Vec<Model>, DbErr> {
    super::claim_returning(db, &claim_batch_statement(owner, n)).await
}
