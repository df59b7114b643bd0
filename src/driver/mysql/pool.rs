//! The guarded pool's MySQL/MariaDB side: the check for a leaked transaction, `SELECT
//! CAST(@@in_transaction AS SIGNED)` (MariaDB; MySQL proper has no such variable: there the
//! connections are not checked, said once at WARN).
use std::sync::atomic::{AtomicBool, Ordering};

use sea_orm::sqlx::mysql::MySqlPoolOptions;
use sea_orm::sqlx::{self, Row};
use sea_orm::{DatabaseConnection, SqlxMySqlConnector};

/// Whether a server without `@@in_transaction` was met (warned once per process).
static UNCHECKABLE: AtomicBool = AtomicBool::new(false);

/// See [`crate::guarded_pool`].
pub(crate) fn pool(db: &DatabaseConnection, max: u32) -> DatabaseConnection {
    let app = db.get_mysql_connection_pool();
    let connect = (*app.connect_options()).clone();
    let options: MySqlPoolOptions =
        crate::driver::pool::guarded_options(app.options(), max, |conn| Box::pin(check(conn)));
    SqlxMySqlConnector::from_sqlx_mysql_pool(options.connect_lazy_with(connect))
}

/// The check of [`crate::guarded_pool`] on one connection: whether to keep it.
async fn check(conn: &mut sqlx::MySqlConnection) -> bool {
    let checked = sqlx::raw_sql("SELECT CAST(@@in_transaction AS SIGNED)")
        .fetch_one(&mut *conn)
        .await;
    match checked {
        Ok(row) => match row.try_get::<i64, _>(0) {
            Ok(open) => crate::driver::pool::verdict(open != 0),
            Err(e) => crate::driver::pool::dead(&e),
        },
        // MySQL proper has no `@@in_transaction` (MariaDB has): nothing to check with;
        // say so once and keep the connection.
        Err(sqlx::Error::Database(e)) if e.message().contains("in_transaction") => {
            if !UNCHECKABLE.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "this MySQL server has no @@in_transaction: relay connections are not \
                     checked for leaked transactions"
                );
            }
            true
        }
        Err(e) => crate::driver::pool::dead(&e),
    }
}
