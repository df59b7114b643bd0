//! The examples' connection pools.
//!
//! An example includes it with `#[path = "common/pool.rs"] mod pool;` (`../common/pool.rs` from
//! an example of its own folder); `scratch.rs` needs it there, under that name.
use std::time::Duration;

use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

/// A pool of at most `max` connections to `url` that keeps none open while idle, waits at most
/// `timeout` for a connection and logs no statements.
pub async fn connect(url: &str, max: u32, timeout: Duration) -> Result<DatabaseConnection, DbErr> {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(timeout)
        .sqlx_logging(false);
    Database::connect(opt).await
}
