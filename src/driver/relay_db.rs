//! The relay's connection: [`RelayDb`].
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult, Statement,
};

use std::sync::Arc;

use super::mysql::resume::ScanResume;
use super::postgres::simple;
use super::{Driver, Table};
use crate::config::StatementProtocol;
use crate::error::OutboxError;

/// A connection of the relay: `db`, with its statements sent as simple-protocol queries with
/// inlined values when `simple` (Postgres only, so that a transaction-mode pooler passes them;
/// `postgres/simple.rs`), and the driver of its statements, on the outbox table they name.
/// Otherwise every call is `db`'s; a transaction (the MySQL/MariaDB claim's) is opened on
/// [`RelayDb::inner`], with prepared statements.
#[derive(Debug, Clone)]
pub struct RelayDb {
    db: DatabaseConnection,
    simple: bool,
    driver: Driver,
    /// Where the worker's next MySQL/MariaDB batch claim starts its scan.
    resume: Arc<ScanResume>,
}

impl RelayDb {
    /// `db` with the statements of `protocol`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidConfig`] for [`StatementProtocol::Simple`] on a backend other
    /// than Postgres (MySQL/MariaDB and SQLite have no transaction-mode pooler to pass);
    /// [`OutboxError::Db`] for a backend this crate does not know.
    pub fn new(db: DatabaseConnection, protocol: StatementProtocol) -> Result<Self, OutboxError> {
        let simple = match protocol {
            StatementProtocol::Extended => false,
            StatementProtocol::Simple => {
                check_simple(db.get_database_backend())?;
                true
            }
        };
        let driver = Driver::of_db(&db)?;
        let resume = Arc::default();
        Ok(RelayDb {
            db,
            simple,
            driver,
            resume,
        })
    }

    /// `db` unchanged (prepared statements).
    #[cfg(test)]
    pub(crate) fn extended(db: DatabaseConnection) -> Self {
        RelayDb::new(db, StatementProtocol::Extended).expect("a known backend")
    }

    /// This connection with its statements naming `table` (`t_event_record` by default), and
    /// a scan resume point of its own (a point in one table says nothing of another).
    pub fn with_table(self, table: Table) -> Self {
        let driver = self.driver.with_table(table);
        let resume = Arc::default();
        RelayDb {
            driver,
            resume,
            ..self
        }
    }

    /// The outbox table its statements name.
    pub fn table(&self) -> Table {
        self.driver.table()
    }

    /// The driver of this connection's statements: its backend's, on its table.
    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// The connection underneath.
    pub fn inner(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Where this worker's next MySQL/MariaDB batch claim starts its scan.
    pub(crate) fn scan_resume(&self) -> &ScanResume {
        &self.resume
    }
}

/// Refuses [`StatementProtocol::Simple`] on a backend without a simple protocol
/// ([`Driver::simple_protocol`]: Postgres alone).
pub(crate) fn check_simple(backend: DbBackend) -> Result<(), OutboxError> {
    if Driver::of(backend).is_some_and(Driver::simple_protocol) {
        Ok(())
    } else {
        Err(OutboxError::InvalidConfig(format!(
            "statement_protocol Simple is for Postgres behind a transaction-mode pooler; \
             this connection is {backend:?}"
        )))
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for RelayDb {
    fn get_database_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        if self.simple {
            self.db.execute_unprepared(&simple::inline(&stmt)).await
        } else {
            self.db.execute_raw(stmt).await
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.db.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        if self.simple {
            Ok(self.query_all_raw(stmt).await?.into_iter().next())
        } else {
            self.db.query_one_raw(stmt).await
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        if self.simple {
            simple::fetch(&self.db, simple::inline(&stmt)).await
        } else {
            self.db.query_all_raw(stmt).await
        }
    }

    fn support_returning(&self) -> bool {
        self.db.support_returning()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_is_postgres_only() {
        assert!(check_simple(DbBackend::MySql).is_err());
        assert!(check_simple(DbBackend::Sqlite).is_err());
    }
}
