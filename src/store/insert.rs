//! The event insert.
use std::time::Instant;

use sea_orm::sea_query::{Expr, InsertStatement, Query};
use sea_orm::{ConnectionTrait, DbBackend, DbErr};
use sea_orm_outbox_entity::event_record::{Column, Entity};
use sea_orm_outbox_entity::EventStatus;

use super::notify_gate::{self, Decision};
use super::{dialect, Dialect};
use crate::event::NewEvent;

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
            Column::Headers,
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
            Expr::val(event.headers_json()),
        ]);
    if dialect::insert_returns_id(backend) {
        insert.returning_col(Column::Id);
    }
    insert
}

/// Inserts `event` as a `WAIT` row due now and returns its id. On Postgres the same statement
/// may also queue a `NOTIFY` on [`dialect::WAKE_CHANNEL`], delivered when the transaction
/// commits (never on rollback), which wakes listening relays at once: unless the event says
/// [`NewEvent::notify_relays`]`(false)`, and by default only when no other open transaction
/// holds the current slot of [`NewEvent::notify_interval`] (see there), and only when no
/// insert of this process tried the slot on the same database within
/// [`NewEvent::notify_process_window`] (see there). Does not validate: callers go through
/// [`crate::OutboxExt::with_event`].
///
/// # Errors
/// Any database error (for example a missing table).
pub async fn insert_event<C: ConnectionTrait>(db: &C, event: &NewEvent) -> Result<i64, DbErr> {
    let backend = db.get_database_backend();
    let stmt = insert_statement(backend, event);
    if let Some(id) = insert_gated(db, backend, &stmt, event).await? {
        return Ok(id);
    }
    if dialect::insert_returns_id(backend) {
        let row = db
            .query_one_raw(dialect::with_wakeup(
                backend,
                backend.build(&stmt),
                event.wakeup(),
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

/// The insert behind the per-process notify gate ([`notify_gate`], see
/// [`NewEvent::notify_process_window`]): `None` when the gate does not apply (a backend without
/// the wake-up, a mock connection, no debounced notify, the window zero, or the gate off), and
/// the caller inserts as before. Otherwise the insert tries the slot's lock or skips the try as
/// the gate decides (a skip still tries when it reached another database than the gate's), and
/// returns the database's identity with its id for the gate.
async fn insert_gated<C: ConnectionTrait>(
    db: &C,
    backend: DbBackend,
    stmt: &InsertStatement,
    event: &NewEvent,
) -> Result<Option<i64>, DbErr> {
    let dialect = Dialect::of(backend);
    if !dialect.listen() || db.is_mock_connection() {
        return Ok(None);
    }
    let Some((interval, window)) = event.gated_wakeup() else {
        return Ok(None);
    };
    let gate = &notify_gate::GATE;
    let decision = gate.decide(window.min(interval), Instant::now());
    let skip_for = match decision {
        Decision::Bypass => return Ok(None),
        Decision::Attempt { .. } => None,
        Decision::Skip { db } => Some(db),
    };
    let Some(gated) = dialect.with_gated_wakeup(backend.build(stmt), interval, skip_for) else {
        return Ok(None);
    };
    let row = db
        .query_one_raw(gated)
        .await?
        .ok_or_else(|| DbErr::Custom("INSERT ... RETURNING id returned no row".into()))?;
    let id = row.try_get_by_index::<i64>(0)?;
    let reached = row.try_get::<i64>("", notify_gate::IDENTITY_COLUMN)?;
    match decision {
        Decision::Attempt { started } => gate.attempted(reached, started),
        _ => gate.skipped(reached),
    }
    Ok(Some(id))
}
