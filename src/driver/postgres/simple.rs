//! The simple protocol ([`crate::StatementProtocol::Simple`]): each statement sent as one
//! simple-protocol `Query` message with its values inlined, so that a transaction-mode pooler
//! (PgBouncer < 1.21) passes it through. Writes go through
//! [`sea_orm::ConnectionTrait::execute_unprepared`], reads through [`fetch`].
use sea_orm::sea_query::{inject_parameters, PostgresQueryBuilder};
use sea_orm::{DatabaseConnection, DbErr, QueryResult, Statement};

/// The SQL of `stmt` with its values written in (Postgres literals, sea-query's escaping:
/// `E'it\'s'`); the SQL as it is when there are none.
pub fn inline(stmt: &Statement) -> String {
    match &stmt.values {
        Some(values) if !values.0.is_empty() => {
            inject_parameters(&stmt.sql, &values.0, &PostgresQueryBuilder)
        }
        _ => stmt.sql.clone(),
    }
}

/// Runs `sql` as one simple-protocol query on `db`'s pool and returns its rows.
///
/// # Errors
/// Any database error; a pool timeout as [`sea_orm::ConnAcquireErr::Timeout`].
#[cfg(feature = "postgres")]
pub(crate) async fn fetch(db: &DatabaseConnection, sql: String) -> Result<Vec<QueryResult>, DbErr> {
    use sea_orm::sqlx;
    use sea_orm::RuntimeErr;
    let pool = db.get_postgres_connection_pool();
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
    {
        Ok(rows) => Ok(rows.into_iter().map(QueryResult::from).collect()),
        Err(sqlx::Error::PoolTimedOut) => {
            Err(DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout))
        }
        Err(sqlx::Error::PoolClosed) => Err(DbErr::ConnectionAcquire(
            sea_orm::ConnAcquireErr::ConnectionClosed,
        )),
        Err(e) => Err(DbErr::Query(RuntimeErr::SqlxError(e.into()))),
    }
}

/// Without the `postgres` feature there is no Postgres pool to read from: [`DbErr::Custom`].
#[cfg(not(feature = "postgres"))]
pub(crate) async fn fetch(_: &DatabaseConnection, _: String) -> Result<Vec<QueryResult>, DbErr> {
    Err(DbErr::Custom("built without the postgres feature".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{DbBackend, Value};

    #[test]
    fn values_are_inlined_and_escaped() {
        let stmt = Statement::from_sql_and_values(
            DbBackend::Postgres,
            r#"UPDATE "t" SET "last_error" = $1, "n" = $2 WHERE "s" = 'it''s $1' AND "o" = $3"#,
            [
                Value::from("it's \\ bad"),
                Value::from(7i32),
                Value::from(None::<String>),
            ],
        );
        assert_eq!(
            inline(&stmt),
            r#"UPDATE "t" SET "last_error" = E'it\'s \\ bad', "n" = 7 WHERE "s" = 'it''s $1' AND "o" = NULL"#
        );
    }
}
