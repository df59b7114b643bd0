//! The statements of [`crate::ops::health`] beyond the backlog and the heartbeats: recent dead
//! letters, and the oldest transaction holding a snapshot (which keeps Postgres' vacuum and
//! InnoDB's purge from removing the rows the relay finished with).
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr, Statement};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{mysql, postgres, Backend, Driver};

/// The oldest transaction of another connection that holds a snapshot
/// ([`Driver::snapshot_holder`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotHolder {
    /// The server's id of the connection: Postgres' backend pid, MySQL/MariaDB's thread id
    /// (`KILL` takes it).
    pub pid: i64,
    /// How long its transaction has been open, seconds by the database clock.
    pub age_seconds: f64,
    /// Its state (`idle in transaction`, `active`; InnoDB's `RUNNING`, `LOCK WAIT`).
    pub state: Option<String>,
    /// The database user it runs as.
    pub user: Option<String>,
    /// Its client: Postgres' `application_name` and address, MySQL's host and port.
    pub client: Option<String>,
}

impl Driver {
    /// `SELECT COUNT(id) AS n FROM t_event_record WHERE status = 'FAIL' AND update_time > now
    /// - :window`: the events that became dead letters within `window` (or were last touched
    /// then).
    pub fn dead_letters_since(self, window: Duration) -> SelectStatement {
        Query::select()
            .expr_as(Expr::col(Column::Id).count(), "n")
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .and_where(Expr::col(Column::UpdateTime).gt(self.now_minus(window)))
            .to_owned()
    }

    /// The oldest open transaction of another connection to this database that holds a
    /// snapshot, with its age (columns `pid`, `age_seconds`, `state`, `user_name`, `client`;
    /// at most one row). Postgres: `pg_stat_activity`, `postgres/health.rs`; MySQL/MariaDB:
    /// `information_schema.innodb_trx`, `mysql/health.rs`. `None` on SQLite, whose readers
    /// hold back no cleanup of other transactions.
    pub fn snapshot_holder(self) -> Option<Statement> {
        match self.backend {
            Backend::Postgres => Some(self.build(&postgres::health::snapshot_holder())),
            Backend::MySql => Some(self.build(&mysql::health::snapshot_holder())),
            Backend::Sqlite => None,
        }
    }
}

/// The count of [`Driver::dead_letters_since`].
pub async fn dead_letters_since<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    window: Duration,
) -> Result<u64, DbErr> {
    let n: i64 = match db.query_one(&driver.dead_letters_since(window)).await? {
        Some(r) => r.try_get("", "n")?,
        None => 0,
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The row of [`Driver::snapshot_holder`]; `None` when no other transaction is open (or on
/// SQLite).
pub async fn snapshot_holder<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
) -> Result<Option<SnapshotHolder>, DbErr> {
    let Some(stmt) = driver.snapshot_holder() else {
        return Ok(None);
    };
    let Some(r) = db.query_one_raw(stmt).await? else {
        return Ok(None);
    };
    Ok(Some(SnapshotHolder {
        pid: r.try_get("", "pid")?,
        age_seconds: r.try_get("", "age_seconds")?,
        state: r.try_get("", "state")?,
        user: r.try_get("", "user_name")?,
        client: r.try_get("", "client")?,
    }))
}
