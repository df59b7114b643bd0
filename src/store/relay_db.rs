//! The relay's connection: a [`DatabaseConnection`] that, in
//! [`StatementProtocol::Simple`] on Postgres, sends each statement as one simple-protocol
//! `Query` message with its values inlined, so that a transaction-mode pooler (PgBouncer
//! < 1.21) passes it through; otherwise it delegates every call unchanged (prepared statements).
//!
//! Writes go through [`ConnectionTrait::execute_unprepared`] (sqlx's simple query; its
//! `rows_affected` decides the guarded transitions as with prepared statements), reads through
//! `sqlx::raw_sql(..).fetch_all(pool)`, whose rows come back in the text format and decode
//! into the models as the binary ones do (tested in `tests/statements.rs`).
use sea_orm::sea_query::{inject_parameters, PostgresQueryBuilder};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    ExecResult, IsolationLevel, QueryResult, Statement, TransactionError, TransactionOptions,
    TransactionTrait,
};

use crate::config::StatementProtocol;
use crate::error::OutboxError;

/// A connection of the relay: `db`, with its statements sent as simple-protocol queries with
/// inlined values when `simple` (Postgres only). The worker and its maintenance services run
/// every statement through it; reached from outside only by the crate's tests (feature
/// `test-support`).
#[derive(Debug, Clone)]
pub struct RelayDb {
    db: DatabaseConnection,
    simple: bool,
}

impl RelayDb {
    /// `db` with the statements of `protocol`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for [`StatementProtocol::Simple`] on a backend other
    /// than Postgres (MySQL/MariaDB and SQLite have no transaction-mode pooler to pass).
    pub fn new(db: DatabaseConnection, protocol: StatementProtocol) -> Result<Self, OutboxError> {
        let simple = match protocol {
            StatementProtocol::Extended => false,
            StatementProtocol::Simple => {
                check_simple(db.get_database_backend())?;
                true
            }
        };
        Ok(RelayDb { db, simple })
    }

    /// `db` unchanged (prepared statements).
    pub fn extended(db: DatabaseConnection) -> Self {
        RelayDb { db, simple: false }
    }

    /// The connection underneath.
    pub fn inner(&self) -> &DatabaseConnection {
        &self.db
    }
}

/// Refuses [`StatementProtocol::Simple`] on a backend other than Postgres.
pub(crate) fn check_simple(backend: DbBackend) -> Result<(), OutboxError> {
    if backend == DbBackend::Postgres && cfg!(feature = "postgres") {
        Ok(())
    } else {
        Err(OutboxError::InvalidConfig(format!(
            "statement_protocol Simple is for Postgres behind a transaction-mode pooler; \
             this connection is {backend:?}"
        )))
    }
}

/// The SQL of `stmt` with its values written in (Postgres literals, sea-query's escaping:
/// `E'it\'s'`); the SQL as it is when there are none.
pub fn inline_postgres(stmt: &Statement) -> String {
    match &stmt.values {
        Some(values) if !values.0.is_empty() => {
            inject_parameters(&stmt.sql, &values.0, &PostgresQueryBuilder)
        }
        _ => stmt.sql.clone(),
    }
}

#[cfg(feature = "postgres")]
async fn fetch_simple(db: &DatabaseConnection, sql: String) -> Result<Vec<QueryResult>, DbErr> {
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

#[cfg(not(feature = "postgres"))]
async fn fetch_simple(_: &DatabaseConnection, _: String) -> Result<Vec<QueryResult>, DbErr> {
    Err(DbErr::Custom("built without the postgres feature".into()))
}

#[async_trait::async_trait]
impl ConnectionTrait for RelayDb {
    fn get_database_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        if self.simple {
            self.db.execute_unprepared(&inline_postgres(&stmt)).await
        } else {
            self.db.execute_raw(stmt).await
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.db.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        if self.simple {
            Ok(fetch_simple(&self.db, inline_postgres(&stmt))
                .await?
                .into_iter()
                .next())
        } else {
            self.db.query_one_raw(stmt).await
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        if self.simple {
            fetch_simple(&self.db, inline_postgres(&stmt)).await
        } else {
            self.db.query_all_raw(stmt).await
        }
    }

    fn support_returning(&self) -> bool {
        self.db.support_returning()
    }
}

/// Transactions are the inner connection's, with prepared statements: only the MySQL/MariaDB
/// claim opens one, and [`StatementProtocol::Simple`] is Postgres only.
#[async_trait::async_trait]
impl TransactionTrait for RelayDb {
    type Transaction = DatabaseTransaction;

    async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        self.db.begin().await
    }

    async fn begin_with_config(
        &self,
        isolation_level: Option<IsolationLevel>,
        access_mode: Option<AccessMode>,
    ) -> Result<DatabaseTransaction, DbErr> {
        self.db
            .begin_with_config(isolation_level, access_mode)
            .await
    }

    async fn begin_with_options(
        &self,
        options: TransactionOptions,
    ) -> Result<DatabaseTransaction, DbErr> {
        self.db.begin_with_options(options).await
    }

    async fn transaction<F, T, E>(&self, callback: F) -> Result<T, TransactionError<E>>
    where
        F: for<'c> FnOnce(
                &'c DatabaseTransaction,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'c>,
            > + Send,
        T: Send,
        E: std::fmt::Display + std::fmt::Debug + Send,
    {
        self.db.transaction(callback).await
    }

    async fn transaction_with_config<F, T, E>(
        &self,
        callback: F,
        isolation_level: Option<IsolationLevel>,
        access_mode: Option<AccessMode>,
    ) -> Result<T, TransactionError<E>>
    where
        F: for<'c> FnOnce(
                &'c DatabaseTransaction,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'c>,
            > + Send,
        T: Send,
        E: std::fmt::Display + std::fmt::Debug + Send,
    {
        self.db
            .transaction_with_config(callback, isolation_level, access_mode)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::Value;

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
            inline_postgres(&stmt),
            r#"UPDATE "t" SET "last_error" = E'it\'s \\ bad', "n" = 7 WHERE "s" = 'it''s $1' AND "o" = NULL"#
        );
    }

    #[test]
    fn simple_is_postgres_only() {
        assert!(check_simple(DbBackend::MySql).is_err());
        assert!(check_simple(DbBackend::Sqlite).is_err());
    }
}
