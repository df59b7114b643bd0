//! The SQLite batch claim: a lock-free read of whether anything is due, then one `UPDATE ...
//! RETURNING` without a lock clause (one writer at a time).
use sea_orm::sea_query::{SelectStatement, UpdateStatement};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::{Column, Model};

use crate::driver::claim::claim_returning;
use crate::driver::{candidates_query, Driver};

/// `SELECT id FROM t_event_record WHERE status = 'WAIT' AND next_retry_time <= now ORDER BY
/// next_retry_time LIMIT 1`: whether anything is due, read without a lock (WAL mode) through
/// `idx_t_event_record_status_next_retry`.
fn due_probe_query(driver: Driver) -> SelectStatement {
    candidates_query(driver, 1)
        .clear_selects()
        .column(Column::Id)
        .to_owned()
}

/// Whether [`due_probe_query`] finds anything due.
async fn anything_due<C: ConnectionTrait>(db: &C, driver: Driver) -> Result<bool, DbErr> {
    Ok(db.query_one(&due_probe_query(driver)).await?.is_some())
}

/// [`due_probe_query`], then, when something is due, `claim` (the batch claim or the ordered
/// claim's heads). The probe keeps an idle relay off the write lock, which an `UPDATE` takes
/// even when it matches no row (a business transaction's write after a read then fails with
/// `database is locked`).
pub(crate) async fn claim_if_due<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    claim: &UpdateStatement,
) -> Result<Vec<Model>, DbErr> {
    if !anything_due(db, driver).await? {
        return Ok(Vec::new());
    }
    claim_returning(db, claim).await
}
