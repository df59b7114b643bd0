//! MySQL/MariaDB: the oldest snapshot holder, from `information_schema.innodb_trx`.
use sea_orm::sea_query::{Alias, Expr, ExprTrait, JoinType, Order, Query, SelectStatement};

/// `SELECT CAST(t.trx_mysql_thread_id AS SIGNED) AS pid, TIMESTAMPDIFF(MICROSECOND,
/// t.trx_started, CONVERT_TZ(UTC_TIMESTAMP(6), '+00:00', 'SYSTEM')) / 1e6 AS age_seconds,
/// t.trx_state AS state, p.USER AS user_name, p.HOST AS client FROM information_schema.innodb_trx
/// AS t LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = t.trx_mysql_thread_id WHERE
/// p.DB = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID() ORDER BY t.trx_started
/// LIMIT :limit`: the oldest InnoDB transactions of other connections whose default database is
/// this one, as the Postgres check sees this database's connections. (InnoDB's purge is one for the
/// whole server: an old transaction of another database holds it back too, unnamed here.)
///
/// InnoDB gives `trx_started` in the server's system time zone, whatever the connection's, in
/// whole seconds (truncated: the age reads up to 1 s high), and refills the table's cache only
/// when it was last read more than 100 ms before: readers polling it faster than that, together,
/// see it frozen. Needs the `PROCESS` privilege. The query text is not read: it may hold
/// literals.
pub(crate) fn snapshot_holders(limit: u64) -> SelectStatement {
    let (t, p) = (Alias::new("t"), Alias::new("p"));
    let thread = || Expr::col((t.clone(), Alias::new("trx_mysql_thread_id")));
    Query::select()
        .expr_as(
            Expr::cust("CAST(`t`.`trx_mysql_thread_id` AS SIGNED)"),
            "pid",
        )
        .expr_as(
            Expr::cust(
                "TIMESTAMPDIFF(MICROSECOND, `t`.`trx_started`, CONVERT_TZ(UTC_TIMESTAMP(6), \
                 '+00:00', 'SYSTEM')) / 1e6",
            ),
            "age_seconds",
        )
        .expr_as(Expr::col((t.clone(), Alias::new("trx_state"))), "state")
        .expr_as(Expr::col((p.clone(), Alias::new("USER"))), "user_name")
        .expr_as(Expr::col((p.clone(), Alias::new("HOST"))), "client")
        .from_as(("information_schema", "innodb_trx"), t.clone())
        .join_as(
            JoinType::LeftJoin,
            ("information_schema", "PROCESSLIST"),
            p.clone(),
            Expr::col((p.clone(), Alias::new("ID")))
                .equals((t.clone(), Alias::new("trx_mysql_thread_id"))),
        )
        .and_where(Expr::col((p.clone(), Alias::new("DB"))).eq(Expr::cust("DATABASE()")))
        .and_where(thread().ne(Expr::cust("CONNECTION_ID()")))
        .order_by((t, Alias::new("trx_started")), Order::Asc)
        .limit(limit)
        .to_owned()
}

/// Whether `err` is MySQL/MariaDB refusing `information_schema.innodb_trx` to a user without
/// the `PROCESS` privilege (error 1227): the snapshot holders are then not visible, as
/// Postgres shows no other role's without `pg_read_all_stats`.
pub(crate) fn lacks_process_privilege(err: &sea_orm::DbErr) -> bool {
    #[cfg(feature = "mysql")]
    {
        use sea_orm::sqlx::mysql::MySqlDatabaseError;
        use sea_orm::sqlx::Error::Database;
        use sea_orm::DbErr;
        use sea_orm::RuntimeErr::SqlxError;
        if let DbErr::Query(SqlxError(e)) | DbErr::Exec(SqlxError(e)) = err {
            if let Database(e) = e.as_ref() {
                return e
                    .try_downcast_ref::<MySqlDatabaseError>()
                    .is_some_and(|e| e.number() == 1227);
            }
        }
    }
    let _ = err;
    false
}
