//! Statements whose form the driver chooses per backend: [`ByIds`] and [`InsertIfAbsent`] keep
//! their parts as sea-query expressions until [`Driver::by_ids`] or
//! [`Driver::insert_if_absent`] writes the statement of one backend.
use sea_orm::sea_query::{DynIden, Expr, IntoIden, OnConflict, Query};
use sea_orm::{DbBackend, Statement};
use sea_orm_outbox_entity::event_record::Column;

use super::{Driver, Table};

/// An `UPDATE` (or `DELETE`) of the outbox table whose `WHERE` names its rows by id: every
/// guarded transition, the reclaim, the dead-letter and purge statements. Sent through the
/// primary key alone ([`Driver::by_ids`]), so that it never reads, locks or waits on rows it
/// does not name; its status guard is built by [`Driver::status_guard`].
#[derive(Debug, Clone)]
pub struct ByIds {
    /// The outbox table.
    table: Table,
    /// `Some(assignments)` for an `UPDATE`, in order; `None` for a `DELETE`.
    pub(super) set: Option<Vec<(Column, Expr)>>,
    /// The conditions joined by `AND`, in order.
    pub(super) filter: Vec<Expr>,
}

impl ByIds {
    /// An `UPDATE` of `table`, of no column yet.
    pub fn update(table: Table) -> Self {
        ByIds {
            table,
            set: Some(Vec::new()),
            filter: Vec::new(),
        }
    }

    /// A `DELETE` from `table`.
    pub fn delete(table: Table) -> Self {
        ByIds {
            table,
            set: None,
            filter: Vec::new(),
        }
    }

    /// The table.
    pub fn table(&self) -> Table {
        self.table
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

    /// The statement as `driver` sends it.
    pub fn build(&self, driver: Driver) -> Statement {
        driver.by_ids(self)
    }

    /// The statement as sea-query writes it for `backend`.
    pub(super) fn plain(&self, backend: DbBackend) -> Statement {
        match &self.set {
            Some(set) => {
                let mut update = Query::update();
                update.table(self.table);
                for (column, value) in set {
                    update.value(*column, value.clone());
                }
                for condition in &self.filter {
                    update.and_where(condition.clone());
                }
                backend.build(&update)
            }
            None => {
                let mut delete = Query::delete();
                delete.from_table(self.table);
                for condition in &self.filter {
                    delete.and_where(condition.clone());
                }
                backend.build(&delete)
            }
        }
    }
}

/// An `INSERT` of one row into a table with a unique key, which [`Driver::insert_if_absent`]
/// writes so that a row whose key is taken is skipped.
#[derive(Debug, Clone)]
pub struct InsertIfAbsent {
    pub(super) table: DynIden,
    pub(super) columns: Vec<DynIden>,
    /// In the columns' order.
    pub(super) values: Vec<Expr>,
    key: Vec<DynIden>,
}

impl InsertIfAbsent {
    /// One row of `values` for `columns` into `table`, whose unique key is `key`.
    pub fn new<T, C, K>(table: T, columns: C, values: Vec<Expr>, key: K) -> Self
    where
        T: IntoIden,
        C: IntoIterator,
        C::Item: IntoIden,
        K: IntoIterator,
        K::Item: IntoIden,
    {
        InsertIfAbsent {
            table: table.into_iden(),
            columns: columns.into_iter().map(IntoIden::into_iden).collect(),
            values,
            key: key.into_iter().map(IntoIden::into_iden).collect(),
        }
    }

    /// `INSERT ... ON CONFLICT (key) DO NOTHING` (Postgres, SQLite 3.24+).
    pub(super) fn on_conflict_do_nothing(&self, backend: DbBackend) -> Statement {
        let mut insert = Query::insert();
        insert
            .into_table(self.table.clone())
            .columns(self.columns.iter().cloned())
            .values_panic(self.values.iter().cloned())
            .on_conflict(
                OnConflict::columns(self.key.iter().cloned())
                    .do_nothing()
                    .to_owned(),
            );
        backend.build(&insert)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::Alias;

    #[test]
    fn insert_if_absent_per_backend() {
        let insert = InsertIfAbsent::new(
            Alias::new("t"),
            [Alias::new("k"), Alias::new("v")],
            vec![Expr::val(1), Expr::val(2)],
            [Alias::new("k")],
        );
        assert_eq!(
            Driver::MySql.insert_if_absent(&insert).sql,
            "INSERT IGNORE INTO `t` (`k`, `v`) VALUES (?, ?)"
        );
        assert_eq!(
            Driver::Postgres.insert_if_absent(&insert).sql,
            r#"INSERT INTO "t" ("k", "v") VALUES ($1, $2) ON CONFLICT ("k") DO NOTHING"#
        );
        assert_eq!(
            Driver::Sqlite.insert_if_absent(&insert).sql,
            r#"INSERT INTO "t" ("k", "v") VALUES (?, ?) ON CONFLICT ("k") DO NOTHING"#
        );
    }

    #[test]
    fn by_ids_per_backend() {
        use sea_orm::sea_query::ExprTrait;
        let update = ByIds::update(Table::DEFAULT)
            .set(Column::RetryCount, Expr::val(0))
            .filter(Expr::col(Column::Id).is_in([1_i64, 2]));
        assert_eq!(
            update.build(Driver::MySql).sql,
            "UPDATE `t_event_record` FORCE INDEX (PRIMARY) SET `retry_count` = ? WHERE `id` IN \
             (?, ?)"
        );
        assert_eq!(
            update.build(Driver::Postgres).sql,
            r#"UPDATE "t_event_record" SET "retry_count" = $1 WHERE "id" IN ($2, $3)"#
        );
        let app = Table::new(Some("app"), "outbox_events").expect("valid");
        let delete = ByIds::delete(app).filter(Expr::col(Column::Id).is_in([1_i64, 2]));
        assert_eq!(
            delete.build(Driver::MySql).sql,
            "DELETE `app`.`outbox_events` FROM `app`.`outbox_events` FORCE INDEX (PRIMARY) \
             WHERE `id` IN (?, ?)"
        );
        assert_eq!(
            delete.build(Driver::Sqlite).sql,
            r#"DELETE FROM "app"."outbox_events" WHERE "id" IN (?, ?)"#
        );
    }
}
