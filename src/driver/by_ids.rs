//! [`ByIds`]: the statements that name their rows by id, kept as sea-query expressions until
//! [`ByIds::build`] writes them for one backend.
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::Statement;
use sea_orm_outbox_entity::event_record::Column;

use super::{mysql, Backend, Driver};

/// An `UPDATE` (or `DELETE`) of the outbox table whose `WHERE` names its rows by id: every
/// guarded transition, the reclaim, the dead-letter and purge statements. Sent through the
/// primary key alone ([`ByIds::build`]), so that it never reads, locks or waits on rows it
/// does not name; its status guard is built by [`Driver::status_guard`].
#[derive(Debug, Clone)]
pub struct ByIds {
    /// The backend and table it is written for.
    pub(super) driver: Driver,
    /// `Some(assignments)` for an `UPDATE`, in order; `None` for a `DELETE`.
    set: Option<Vec<(Column, Expr)>>,
    /// The conditions joined by `AND`, in order.
    filter: Vec<Expr>,
    /// Whether its id list is empty: it names no row, and [`super::exec_by_ids`] skips it.
    pub(super) names_none: bool,
}

impl ByIds {
    /// An `UPDATE` of `driver`'s table, of no column yet.
    pub fn update(driver: Driver) -> Self {
        ByIds {
            driver,
            set: Some(Vec::new()),
            filter: Vec::new(),
            names_none: false,
        }
    }

    /// A `DELETE` from `driver`'s table.
    pub fn delete(driver: Driver) -> Self {
        ByIds {
            set: None,
            ..ByIds::update(driver)
        }
    }

    /// `SET column = value` (ignored by a `DELETE`).
    pub fn set(mut self, column: Column, value: Expr) -> Self {
        if let Some(set) = &mut self.set {
            set.push((column, value));
        }
        self
    }

    /// `AND condition`.
    pub fn filter(mut self, condition: Expr) -> Self {
        self.filter.push(condition);
        self
    }

    /// `AND id = :id`.
    pub fn id(self, id: i64) -> Self {
        self.filter(Expr::col(Column::Id).eq(id))
    }

    /// `AND id IN (:ids)`.
    pub fn ids(mut self, ids: &[i64]) -> Self {
        self.names_none = ids.is_empty();
        self.filter(Expr::col(Column::Id).is_in(ids.iter().copied()))
    }

    /// The statement as sent, reading the table through the primary key alone: on MySQL/MariaDB
    /// with `FORCE INDEX (PRIMARY)` (`mysql/by_ids.rs`), elsewhere by its status guard.
    pub fn build(&self) -> Statement {
        let table = self.driver.table();
        let mut stmt = match &self.set {
            Some(set) => {
                let mut update = Query::update();
                update.table(table);
                for (column, value) in set {
                    update.value(*column, value.clone());
                }
                for condition in &self.filter {
                    update.and_where(condition.clone());
                }
                self.driver.build(&update)
            }
            None => {
                let mut delete = Query::delete();
                delete.from_table(table);
                for condition in &self.filter {
                    delete.and_where(condition.clone());
                }
                self.driver.build(&delete)
            }
        };
        if self.driver.backend == Backend::MySql {
            mysql::by_ids::through_primary_key(&mut stmt, table);
        }
        stmt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Table;

    #[test]
    fn by_ids_per_backend() {
        let update = |d: Driver| {
            ByIds::update(d)
                .set(Column::RetryCount, Expr::val(0))
                .ids(&[1, 2])
        };
        assert_eq!(
            update(Driver::MySql).build().sql,
            "UPDATE `t_event_record` FORCE INDEX (PRIMARY) SET `retry_count` = ? WHERE `id` IN \
             (?, ?)"
        );
        assert_eq!(
            update(Driver::Postgres).build().sql,
            r#"UPDATE "t_event_record" SET "retry_count" = $1 WHERE "id" IN ($2, $3)"#
        );
        let app = Table::new(Some("app"), "outbox_events").expect("valid");
        let delete = |d: Driver| ByIds::delete(d.with_table(app)).ids(&[1, 2]);
        assert_eq!(
            delete(Driver::MySql).build().sql,
            "DELETE `app`.`outbox_events` FROM `app`.`outbox_events` FORCE INDEX (PRIMARY) \
             WHERE `id` IN (?, ?)"
        );
        let update_app = update(Driver::MySql.with_table(app)).build().sql;
        assert_eq!(
            update_app,
            "UPDATE `app`.`outbox_events` FORCE INDEX (PRIMARY) SET `retry_count` = ? WHERE `id` \
             IN (?, ?)"
        );
        assert_eq!(
            delete(Driver::Sqlite).build().sql,
            r#"DELETE FROM "app"."outbox_events" WHERE "id" IN (?, ?)"#
        );
    }
}
