//! Statements whose MySQL form sea-query cannot write: an index hint on `UPDATE`/`DELETE`
//! ([`through_primary_key`]) and `INSERT IGNORE` ([`insert_ignore`]).
use std::fmt::Write as _;

use sea_orm::sea_query::{
    Condition, Expr, InsertStatement, IntoIden, MysqlQueryBuilder, QueryBuilder, QuotedBuilder,
    SqlWriterValues, TableName, TableRefBuilder,
};
use sea_orm::{DbBackend, Statement};

use crate::driver::ByIds;

/// `stmt` written to read the table through the primary key alone: `UPDATE t FORCE INDEX
/// (PRIMARY) SET ... WHERE ...`, or `DELETE t FROM t FORCE INDEX (PRIMARY) WHERE ...` (a
/// single-table `DELETE` takes no index hint). InnoDB locks every row an `UPDATE`/`DELETE`
/// reads, and MariaDB may scan a small table whole, waiting on the uncommitted rows of open
/// business transactions. sea-query has no index hint here, so the frame is written by hand and
/// each part by sea-query's MySQL builder.
pub(crate) fn through_primary_key(stmt: &ByIds) -> Statement {
    let q = MysqlQueryBuilder;
    let mut sql = writer();
    let table = TableName::from(stmt.driver.table());
    match stmt.set.as_deref() {
        Some(set) => {
            push(&mut sql, "UPDATE ");
            q.prepare_table_name(&table, &mut sql);
            push(&mut sql, " FORCE INDEX (PRIMARY) SET ");
            for (i, (column, value)) in set.iter().enumerate() {
                if i > 0 {
                    push(&mut sql, ", ");
                }
                q.prepare_iden(&column.into_iden(), &mut sql);
                push(&mut sql, " = ");
                q.prepare_expr(value, &mut sql);
            }
        }
        None => {
            push(&mut sql, "DELETE ");
            q.prepare_table_name(&table, &mut sql);
            push(&mut sql, " FROM ");
            q.prepare_table_name(&table, &mut sql);
            push(&mut sql, " FORCE INDEX (PRIMARY)");
        }
    }
    if !stmt.filter.is_empty() {
        let all = stmt
            .filter
            .iter()
            .fold(Condition::all(), |all, c| all.add(c.clone()));
        push(&mut sql, " WHERE ");
        q.prepare_expr(&Expr::from(all), &mut sql);
    }
    statement(sql)
}

/// `INSERT IGNORE INTO t (...) VALUES (...)`: sea-query's `ON DUPLICATE KEY UPDATE k = k`
/// polyfill of `ON CONFLICT DO NOTHING` counts a duplicate as 1 row under `CLIENT_FOUND_ROWS`
/// (which sqlx sets). `INSERT IGNORE` also turns other errors (over-long values, NULLs) into
/// warnings: callers validate the values first.
pub(crate) fn insert_ignore(insert: &InsertStatement) -> Statement {
    let mut stmt = DbBackend::MySql.build(insert);
    stmt.sql = stmt.sql.replacen("INSERT ", "INSERT IGNORE ", 1);
    stmt
}

/// Appends `text` to `sql` (a writer in memory: it cannot fail).
fn push(sql: &mut SqlWriterValues, text: &str) {
    let _ = sql.write_str(text);
}

/// A writer of MySQL's SQL text that collects the values to bind (`?` placeholders).
fn writer() -> SqlWriterValues {
    let (placeholder, numbered) = MysqlQueryBuilder.placeholder();
    SqlWriterValues::new(placeholder, numbered)
}

/// The statement `sql` wrote.
fn statement(sql: SqlWriterValues) -> Statement {
    let (sql, values) = sql.into_parts();
    Statement::from_sql_and_values(DbBackend::MySql, sql, values.0)
}
