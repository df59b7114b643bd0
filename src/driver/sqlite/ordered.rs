//! The ordered claim's heads on SQLite (see `driver/ordered.rs`): `e.id IN (<candidates>)`
//! for both scans, the checks on `e`; one writer at a time, so nothing to lock.
use sea_orm::sea_query::{Alias, Expr, ExprTrait, SelectStatement};
use sea_orm_outbox_entity::event_record::Column;

use crate::driver::ordered::{HeadsFrom, CANDIDATE};
use crate::driver::Driver;

/// `FROM t_event_record AS e WHERE e.id IN (<c>) ... ORDER BY e.next_retry_time` (a window reads
/// `id` alone).
pub(crate) fn from_candidates(
    driver: Driver,
    q: &mut SelectStatement,
    c: SelectStatement,
) -> HeadsFrom {
    let e = Alias::new(CANDIDATE);
    q.from_as(driver.table(), e.clone())
        .and_where(Expr::col((e.clone(), Column::Id)).in_subquery(c));
    HeadsFrom {
        checks_here: true,
        ordered_by: e,
    }
}
