//! Statements whose MySQL form sea-query cannot write, written into its text: an index hint on
//! `UPDATE`/`DELETE` ([`through_primary_key`]) and `INSERT IGNORE` ([`insert_ignore`]).
use sea_orm::sea_query::InsertStatement;
use sea_orm::{DbBackend, Statement};

use crate::driver::Table;

/// `stmt`, sea-query's `UPDATE t SET ...` or `DELETE FROM t WHERE ...` of `table`, written to
/// read the table through the primary key alone: `UPDATE t FORCE INDEX (PRIMARY) SET ...`, or
/// `DELETE t FROM t FORCE INDEX (PRIMARY) WHERE ...` (a single-table `DELETE` takes no index
/// hint). InnoDB locks every row an `UPDATE`/`DELETE` reads, and MariaDB may scan a small table
/// whole, waiting on the uncommitted rows of open business transactions.
pub(crate) fn through_primary_key(stmt: &mut Statement, table: Table) {
    let t = table.quoted('`');
    let (from, to) = if stmt.sql.starts_with("UPDATE ") {
        (
            format!("UPDATE {t} "),
            format!("UPDATE {t} FORCE INDEX (PRIMARY) "),
        )
    } else {
        let to = format!("DELETE {t} FROM {t} FORCE INDEX (PRIMARY) ");
        (format!("DELETE FROM {t} "), to)
    };
    stmt.sql = stmt.sql.replacen(&from, &to, 1);
    debug_assert!(stmt.sql.starts_with(&to), "no index hint in {}", stmt.sql);
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
