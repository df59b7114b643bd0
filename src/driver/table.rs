//! The outbox table every statement names: `t_event_record` unless the application names
//! another (and, on Postgres, a schema; on MySQL/MariaDB the schema is the database).
use std::sync::Mutex;

use sea_orm::sea_query::TableName;
use sea_orm::DbErr;
use sea_orm_outbox_migration::check_table_name;

/// An outbox table: its name and, optionally, its schema. `Copy`, so that the [`super::Driver`]
/// carrying it stays `Copy`: each distinct name is interned (leaked once). It converts into a
/// `TableName`, never a bare `Iden` that would drop the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Table {
    schema: Option<&'static str>,
    name: &'static str,
}

/// The names interned by [`Table::new`], tables' and schemas'.
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The table names given to [`Table::new`] (not their schemas'), see [`known_names`].
static TABLES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// `name`, interned: the same `&'static str` for the same text, leaked once.
fn intern(name: &str) -> &'static str {
    if name == Table::DEFAULT.name {
        return Table::DEFAULT.name;
    }
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(leaked);
    leaked
}

/// Every outbox table name this process has named: `t_event_record` and each one given to
/// [`Table::new`] (without the schemas').
pub(crate) fn known_names() -> Vec<&'static str> {
    let tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    std::iter::once(Table::DEFAULT.name)
        .chain(tables.iter().copied())
        .collect()
}

impl Table {
    /// `t_event_record`, no schema: the table of this crate's migrations.
    pub const DEFAULT: Table = Table {
        schema: None,
        name: sea_orm_outbox_migration::TABLE,
    };

    /// The table `name` in `schema` (`None`: the connection's default).
    ///
    /// # Errors
    /// [`DbErr::Custom`] naming the rule when `name` or `schema` is not 1 to 40 ASCII letters,
    /// digits and underscores, not starting with a digit
    /// ([`sea_orm_outbox_migration::check_table_name`]).
    pub fn new(schema: Option<&str>, name: &str) -> Result<Table, DbErr> {
        check_table_name(name)?;
        let schema = match schema {
            Some(schema) => {
                check_table_name(schema)
                    .map_err(|_| DbErr::Custom(format!("outbox schema name {schema:?}: use 1 to 40 ASCII letters, digits and underscores, not starting with a digit")))?;
                Some(intern(schema))
            }
            None => None,
        };
        let name = intern(name);
        let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
        if name != Table::DEFAULT.name && !tables.contains(&name) {
            tables.push(name);
        }
        Ok(Table { schema, name })
    }

    /// The table's name, without its schema.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The table's schema, if one is set.
    pub fn schema(self) -> Option<&'static str> {
        self.schema
    }

    /// The table as operators name it: `schema.name`, or `name` without a schema (the `table`
    /// label of the gauges, the `outbox_table` of the relays' heartbeats).
    pub fn label(self) -> String {
        match self.schema {
            Some(schema) => format!("{schema}.{}", self.name),
            None => self.name.to_owned(),
        }
    }

    /// The table as SQL text quoted with `quote` (`"` or `` ` ``): `"schema"."name"` or
    /// `"name"`. The names are checked, so they hold no quote.
    pub fn quoted(self, quote: char) -> String {
        match self.schema {
            Some(schema) => format!("{quote}{schema}{quote}.{quote}{}{quote}", self.name),
            None => format!("{quote}{}{quote}", self.name),
        }
    }
}

impl From<Table> for TableName {
    fn from(table: Table) -> Self {
        match table.schema {
            Some(schema) => (schema, table.name).into(),
            None => table.name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sea_query::{PostgresQueryBuilder, Query};

    #[test]
    fn names_are_checked_and_interned() {
        assert!(Table::new(None, "1abc").is_err());
        assert!(Table::new(None, "a-b").is_err());
        assert!(Table::new(Some("x y"), "ok").is_err());
        let a = Table::new(Some("app"), "outbox_events").expect("valid");
        let b = Table::new(Some("app"), "outbox_events").expect("valid");
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.name(), b.name()));
        assert_eq!(
            Table::new(None, "t_event_record").expect("valid"),
            Table::DEFAULT
        );
        let sql = Query::select()
            .expr(sea_orm::sea_query::Expr::val(1))
            .from(a)
            .to_string(PostgresQueryBuilder);
        assert_eq!(sql, r#"SELECT 1 FROM "app"."outbox_events""#);
        assert_eq!(a.quoted('`'), "`app`.`outbox_events`");
    }
}
