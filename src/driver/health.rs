//! The statements of [`crate::ops::health`] beyond the backlog and the heartbeats: recent dead
//! letters, and the oldest transaction holding a snapshot (which keeps Postgres' vacuum and
//! InnoDB's purge from removing the rows the relay finished with).
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ConnectionTrait, DbErr, Statement};
use sea_orm_outbox_entity::event_record::Column;
use sea_orm_outbox_entity::EventStatus;

use super::{mysql, postgres, Backend, Driver};

/// An open transaction of another connection that holds a snapshot
/// ([`Driver::snapshot_holders`]).
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
    /// `SELECT COUNT(id) AS n FROM t_event_record WHERE status = 'FAIL' AND update_time >
    /// now - :window`: the events that became dead letters within `window` (or were last
    /// touched then).
    pub fn dead_letters_since(self, window: Duration) -> SelectStatement {
        Query::select()
            .expr_as(Expr::col(Column::Id).count(), "n")
            .from(self.table())
            .and_where(Expr::col(Column::Status).eq(EventStatus::Fail.as_str()))
            .and_where(Expr::col(Column::UpdateTime).gt(self.now_minus(window)))
            .to_owned()
    }

    /// The oldest open transactions of other connections that hold a snapshot, oldest first,
    /// at most `limit`, with their ages (columns `pid`, `age_seconds`, `state`, `user_name`,
    /// `client`). Postgres: `pg_stat_activity` of this database, `postgres/health.rs`;
    /// MySQL/MariaDB: `information_schema.innodb_trx`, `mysql/health.rs`. `None` on SQLite,
    /// whose readers hold back no cleanup of other transactions.
    pub fn snapshot_holders(self, limit: u64) -> Option<Statement> {
        match self.backend {
            Backend::Postgres => Some(self.build(&postgres::health::snapshot_holders(limit))),
            Backend::MySql => Some(self.build(&mysql::health::snapshot_holders(limit))),
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

/// The rows of [`Driver::snapshot_holders`]; empty when no other transaction is open, on
/// SQLite, and on MySQL/MariaDB without the `PROCESS` privilege (which `innodb_trx` needs).
pub async fn snapshot_holders<C: ConnectionTrait>(
    db: &C,
    driver: Driver,
    limit: u64,
) -> Result<Vec<SnapshotHolder>, DbErr> {
    let Some(stmt) = driver.snapshot_holders(limit) else {
        return Ok(Vec::new());
    };
    let rows = match db.query_all_raw(stmt).await {
        Ok(rows) => rows,
        Err(e) if mysql::health::lacks_process_privilege(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter()
        .map(|r| {
            Ok(SnapshotHolder {
                pid: r.try_get("", "pid")?,
                age_seconds: r.try_get("", "age_seconds")?,
                state: r.try_get("", "state")?,
                user: r.try_get("", "user_name")?,
                client: r.try_get("", "client")?,
            })
        })
        .collect()
}
