//! Database errors classified by their code (`OutboxError::db_kind`), each provoked
//! for real on the backend that can produce it: deadlock (Postgres, MariaDB), lock timeout
//! (all three), serialization failure (Postgres; InnoDB reports its conflicts as deadlocks),
//! missing table (all three) and a connection lost mid-transaction (Postgres, MariaDB; SQLite
//! has no server connection to lose).
mod common;

use common::{Backend, TestContext};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, IsolationLevel, TransactionTrait};
use sea_orm_outbox::{DbErrorKind, OutboxError};

/// The kind of a database error, as the library judges it ([`OutboxError::db_kind`]).
fn db_error_kind(err: &DbErr) -> DbErrorKind {
    OutboxError::Db(err.clone())
        .db_kind()
        .expect("a database error has a kind")
}

macro_rules! on {
    ($test:ident, $backend:ident, $label:literal, $body:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            common::run_on(Backend::$backend, $label, $body).await
        }
    };
}

on!(postgres_deadlock, Postgres, "err_deadlock", deadlock);
on!(mariadb_deadlock, MySql, "err_deadlock", deadlock);
on!(
    postgres_lock_timeout,
    Postgres,
    "err_lock_timeout",
    lock_timeout
);
on!(
    mariadb_lock_timeout,
    MySql,
    "err_lock_timeout",
    lock_timeout
);
on!(
    sqlite_lock_timeout,
    Sqlite,
    "err_lock_timeout",
    lock_timeout
);
on!(
    postgres_serialization_failure,
    Postgres,
    "err_serialization",
    serialization_failure
);
on!(
    postgres_missing_table,
    Postgres,
    "err_missing_table",
    missing_table
);
on!(
    mariadb_missing_table,
    MySql,
    "err_missing_table",
    missing_table
);
on!(
    sqlite_missing_table,
    Sqlite,
    "err_missing_table",
    missing_table
);
on!(
    postgres_connection_lost,
    Postgres,
    "err_conn_lost",
    connection_lost
);
on!(
    mariadb_connection_lost,
    MySql,
    "err_conn_lost",
    connection_lost
);

/// A table `k (id, v)` with rows 1 and 2.
async fn two_rows(db: &DatabaseConnection) {
    db.execute_unprepared("CREATE TABLE k (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        .await
        .expect("create");
    db.execute_unprepared("INSERT INTO k (id, v) VALUES (1, 0), (2, 0)")
        .await
        .expect("rows");
}

/// Updates row `first` in a transaction on `db`, waits for `go`, then updates `second`;
/// rolls back at once when that fails (a Postgres victim keeps its locks until it does).
async fn lock_then_cross(
    db: DatabaseConnection,
    first: i32,
    second: i32,
    locked: tokio::sync::mpsc::Sender<()>,
    go: tokio::sync::watch::Receiver<bool>,
) -> Result<(), DbErr> {
    let txn = db.begin().await?;
    txn.execute_unprepared(&format!("UPDATE k SET v = v + 1 WHERE id = {first}"))
        .await?;
    locked.send(()).await.expect("signal");
    let mut go = go;
    go.wait_for(|g| *g).await.expect("go");
    match txn
        .execute_unprepared(&format!("UPDATE k SET v = v + 1 WHERE id = {second}"))
        .await
    {
        Ok(_) => txn.commit().await,
        Err(e) => {
            txn.rollback().await.ok();
            Err(e)
        }
    }
}

async fn deadlock(ctx: &TestContext) {
    two_rows(&ctx.db).await;
    let (locked_tx, mut locked) = tokio::sync::mpsc::channel(2);
    let (go_tx, go) = tokio::sync::watch::channel(false);
    let a = tokio::spawn(lock_then_cross(
        ctx.pool(1).await,
        1,
        2,
        locked_tx.clone(),
        go.clone(),
    ));
    let b = tokio::spawn(lock_then_cross(ctx.pool(1).await, 2, 1, locked_tx, go));
    locked.recv().await.expect("a locked");
    locked.recv().await.expect("b locked");
    go_tx.send(true).expect("go");
    let results = [a.await.expect("a"), b.await.expect("b")];
    let errors: Vec<&DbErr> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "exactly one deadlock victim: {results:?}");
    assert_eq!(
        db_error_kind(errors[0]),
        DbErrorKind::Deadlock,
        "{}",
        errors[0]
    );
    assert!(db_error_kind(errors[0]).is_transient());
}

async fn lock_timeout(ctx: &TestContext) {
    two_rows(&ctx.db).await;
    let holder = ctx.pool(1).await;
    let txn = holder.begin().await.expect("begin");
    txn.execute_unprepared("UPDATE k SET v = 1 WHERE id = 1")
        .await
        .expect("lock row 1");
    // A second session that waits at most a moment for a lock.
    let waiter = common::connect(&ctx.url, 1).await;
    let set = match ctx.backend {
        Backend::Postgres => "SET lock_timeout = '100ms'",
        Backend::MySql => "SET SESSION innodb_lock_wait_timeout = 1",
        Backend::Sqlite => "PRAGMA busy_timeout = 0",
    };
    waiter.execute_unprepared(set).await.expect("short wait");
    let err = waiter
        .execute_unprepared("UPDATE k SET v = 2 WHERE id = 1")
        .await
        .expect_err("the row (SQLite: the database) is locked");
    txn.rollback().await.expect("rollback");
    assert_eq!(db_error_kind(&err), DbErrorKind::LockTimeout, "{err}");
    assert!(db_error_kind(&err).is_transient());
}

async fn serialization_failure(ctx: &TestContext) {
    two_rows(&ctx.db).await;
    let (one, two) = (ctx.pool(1).await, ctx.pool(1).await);
    let serializable = Some(IsolationLevel::Serializable);
    let t1 = one.begin_with_config(serializable, None).await.expect("t1");
    let t2 = two.begin_with_config(serializable, None).await.expect("t2");
    // Write skew: each reads both rows, then writes the one the other did not.
    for t in [&t1, &t2] {
        t.execute_unprepared("SELECT SUM(v) FROM k")
            .await
            .expect("read");
    }
    t1.execute_unprepared("UPDATE k SET v = 1 WHERE id = 1")
        .await
        .expect("t1 write");
    t1.commit().await.expect("t1 commits first");
    let err = match t2
        .execute_unprepared("UPDATE k SET v = 1 WHERE id = 2")
        .await
    {
        Err(e) => e,
        Ok(_) => t2.commit().await.expect_err("t2 cannot serialize"),
    };
    assert_eq!(
        db_error_kind(&err),
        DbErrorKind::SerializationFailure,
        "{err}"
    );
    assert!(db_error_kind(&err).is_transient());
}

async fn missing_table(ctx: &TestContext) {
    let err = ctx
        .db
        .execute_unprepared("SELECT * FROM no_such_table")
        .await
        .expect_err("no such table");
    assert_eq!(db_error_kind(&err), DbErrorKind::MissingTable, "{err}");
    // An application's missing table is a plain database error, not "run the outbox's
    // migration"; the outbox's own missing table is `TableMissing`.
    let app = OutboxError::from(err);
    assert_eq!(app.db_kind(), Some(DbErrorKind::MissingTable));
    assert!(matches!(app, OutboxError::Db(_)));
    assert_eq!(OutboxError::InvalidConfig("x".into()).db_kind(), None);
    ctx.db
        .execute_unprepared("DROP TABLE t_consumed_message")
        .await
        .expect("drop");
    let err = ctx
        .db
        .execute_unprepared("SELECT * FROM t_consumed_message")
        .await
        .expect_err("dropped");
    assert!(matches!(
        OutboxError::from(err),
        OutboxError::TableMissing(_)
    ));
}

async fn connection_lost(ctx: &TestContext) {
    let pool = ctx.pool(1).await;
    let txn = pool.begin().await.expect("begin");
    let (who, kill) = match ctx.backend {
        Backend::Postgres => (
            "SELECT CAST(pg_backend_pid() AS BIGINT) AS id",
            "SELECT pg_terminate_backend",
        ),
        _ => ("SELECT CAST(CONNECTION_ID() AS SIGNED) AS id", "KILL"),
    };
    let id: i64 = txn
        .query_one_raw(sea_orm::Statement::from_string(ctx.db_backend(), who))
        .await
        .expect("session id")
        .expect("row")
        .try_get("", "id")
        .expect("id");
    let sql = match ctx.backend {
        Backend::Postgres => format!("{kill}({id})"),
        _ => format!("{kill} {id}"),
    };
    ctx.db
        .execute_unprepared(&sql)
        .await
        .expect("kill the session");
    let err = txn
        .execute_unprepared("SELECT 1")
        .await
        .expect_err("the session is gone");
    assert_eq!(db_error_kind(&err), DbErrorKind::ConnectionLost, "{err:?}");
    drop(txn);
}
