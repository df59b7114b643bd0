//! The guarded pool's Postgres side: connections named `application_name`, and the check for
//! a leaked transaction (`transaction_timestamp() = statement_timestamp()` as a simple query:
//! the two are equal in a statement of its own, and differ inside a transaction opened
//! earlier; a transaction that already failed refuses it with `25P02`).
use sea_orm::sqlx::postgres::PgPoolOptions;
use sea_orm::sqlx::{self, Row};
use sea_orm::{DatabaseConnection, SqlxPostgresConnector};

/// See [`crate::guarded_pool`].
pub(crate) fn pool(db: &DatabaseConnection, max: u32, name: Option<&str>) -> DatabaseConnection {
    let app = db.get_postgres_connection_pool();
    let mut connect = (*app.connect_options()).clone();
    if let Some(name) = name {
        connect = connect.application_name(name);
    }
    let options: PgPoolOptions =
        crate::driver::pool::guarded_options(app.options(), max, |conn| Box::pin(check(conn)));
    SqlxPostgresConnector::from_sqlx_postgres_pool(options.connect_lazy_with(connect))
}

/// The check of [`crate::guarded_pool`] on one connection: whether to keep it.
async fn check(conn: &mut sqlx::PgConnection) -> bool {
    let checked = sqlx::raw_sql("SELECT transaction_timestamp() = statement_timestamp()")
        .fetch_one(&mut *conn)
        .await;
    match checked {
        Ok(row) => match row.try_get::<bool, _>(0) {
            Ok(clean) => crate::driver::pool::verdict(!clean),
            Err(e) => crate::driver::pool::dead(&e),
        },
        // Inside a transaction that already failed: every statement is refused.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P02") => {
            crate::driver::pool::verdict(true)
        }
        Err(e) => crate::driver::pool::dead(&e),
    }
}

/// The most connections `db`'s pool opens; `None` for a connection without a Postgres pool (a
/// mock).
pub(crate) fn size(db: &DatabaseConnection) -> Option<u32> {
    if sea_orm::ConnectionTrait::is_mock_connection(db) {
        return None;
    }
    Some(
        db.get_postgres_connection_pool()
            .options()
            .get_max_connections(),
    )
}
