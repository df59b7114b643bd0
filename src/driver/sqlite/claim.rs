//! The SQLite batch claim: a lock-free read of whether anything is due, then one `UPDATE ...
//! RETURNING` without a lock clause (one writer at a time).
use sea_orm::sea_query::UpdateStatement;
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_outbox_entity::event_record::Model;

use crate::driver::claim::claim_returning;
use crate::driver::RelayDb;

/// `claim` (the batch claim or the ordered claim's heads) when [`crate::driver::Driver::due_ids`]
/// finds anything due, read without a lock (WAL mode) through
/// `idx_t_event_record_status_next_retry`. The probe keeps an idle relay off the write lock,
/// which an `UPDATE` takes even when it matches no row (a business transaction's write after a
/// read then fails with `database is locked`).
pub(crate) async fn claim_if_due(
    db: &RelayDb,
    claim: &UpdateStatement,
) -> Result<Vec<Model>, DbErr> {
    if db.query_one(&db.driver().due_ids(1)).await?.is_none() {
        return Ok(Vec::new());
    }
    claim_returning(db, claim).await
}
