//! Postgres: the oldest snapshot holder, from `pg_stat_activity`.
use sea_orm::sea_query::{Expr, ExprTrait, Order, Query, SelectStatement};

/// `SELECT pid::int8 AS pid, EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - xact_start))::float8 AS
/// age_seconds, state, usename::text AS user_name, concat_ws(' ', NULLIF(application_name, ''),
/// client_addr::text) AS client FROM pg_stat_activity WHERE datname = current_database() AND
/// backend_type = 'client backend' AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
/// AND pid <> pg_backend_pid() ORDER BY xact_start LIMIT :limit`: the oldest transactions of
/// other clients of this database that hold a snapshot (`backend_xmin`) or a transaction id
/// (`backend_xid`), either of which keeps vacuum from removing dead rows. Without the role
/// `pg_read_all_stats` (or superuser) the connections of other roles show no `backend_xmin` and
/// are not seen. The query text is not read: it may hold literals (passwords, personal data);
/// the pid finds it in `pg_stat_activity`.
pub(crate) fn snapshot_holders(limit: u64) -> SelectStatement {
    Query::select()
        .expr_as(Expr::cust("pid::int8"), "pid")
        .expr_as(
            Expr::cust("EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - xact_start))::float8"),
            "age_seconds",
        )
        .expr_as(Expr::col("state"), "state")
        .expr_as(Expr::cust("usename::text"), "user_name")
        .expr_as(
            Expr::cust("concat_ws(' ', NULLIF(application_name, ''), client_addr::text)"),
            "client",
        )
        .from("pg_stat_activity")
        .and_where(Expr::col("datname").eq(Expr::cust("current_database()")))
        .and_where(Expr::col("backend_type").eq(Expr::cust("'client backend'")))
        .and_where(
            Expr::col("backend_xmin")
                .is_not_null()
                .or(Expr::col("backend_xid").is_not_null()),
        )
        .and_where(Expr::col("pid").ne(Expr::cust("pg_backend_pid()")))
        .order_by("xact_start", Order::Asc)
        .limit(limit)
        .to_owned()
}
