//! A database of the run's own, for the examples that measure or break things (the bench and
//! the chaos harness): created next to an admin connection's database, or as a fresh SQLite
//! file, and dropped at the end.
//!
//! An example includes it with `#[path = "../common/scratch.rs"] mod scratch;` beside
//! `pool.rs` included as `mod pool` (this module connects through `crate::pool`).
use std::path::PathBuf;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr};

use crate::pool;

/// The error of the examples' set-up and drills.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `url` with its database (path) replaced by `db`; a URL without a path gets one.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let cut = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..cut], db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A database created for one run.
pub struct ScratchDb {
    /// Its backend.
    pub backend: DbBackend,
    /// Its URL.
    pub url: String,
    /// Its name (the SQLite file's stem).
    pub name: String,
    /// The admin URL it was created through (`None` for SQLite).
    admin: Option<String>,
    /// The SQLite file.
    sqlite_path: Option<PathBuf>,
    /// How long a connection may take (see [`pool::connect`]).
    timeout: Duration,
}

impl ScratchDb {
    /// Creates the database `name` on the server of `admin_url`, or the SQLite file
    /// `<temp dir>/<name>.db` (in WAL mode) when `admin_url` is unset, empty or `sqlite:...`.
    /// Every connection of the run waits at most `timeout` for the server.
    pub async fn create(
        admin_url: Option<&str>,
        name: String,
        timeout: Duration,
    ) -> Result<Self, BoxError> {
        match admin_url.filter(|u| !u.is_empty() && !u.starts_with("sqlite")) {
            None => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                let url = format!("sqlite://{}?mode=rwc", path.display());
                let db = pool::connect(&url, 1, timeout).await?;
                db.execute_unprepared("PRAGMA journal_mode=WAL").await?;
                db.close().await?;
                Ok(ScratchDb {
                    backend: DbBackend::Sqlite,
                    url,
                    admin: None,
                    name,
                    sqlite_path: Some(path),
                    timeout,
                })
            }
            Some(admin) => {
                let conn = pool::connect(admin, 1, timeout).await?;
                let backend = conn.get_database_backend();
                let quoted = match backend {
                    DbBackend::MySql => format!("`{name}`"),
                    _ => format!("\"{name}\""),
                };
                conn.execute_unprepared(&format!("CREATE DATABASE {quoted}"))
                    .await?;
                conn.close().await?;
                Ok(ScratchDb {
                    backend,
                    url: with_database(admin, &name),
                    admin: Some(admin.to_owned()),
                    name,
                    sqlite_path: None,
                    timeout,
                })
            }
        }
    }

    /// A pool of at most `max` connections to the database.
    pub async fn pool(&self, max: u32) -> Result<DatabaseConnection, DbErr> {
        pool::connect(&self.url, max, self.timeout).await
    }

    /// Drops the database (Postgres: closing its sessions), or removes the SQLite file with
    /// its WAL and shared-memory files.
    pub async fn drop_db(&self) -> Result<(), BoxError> {
        if let Some(path) = &self.sqlite_path {
            for ext in ["", "-wal", "-shm"] {
                std::fs::remove_file(format!("{}{ext}", path.display())).ok();
            }
            return Ok(());
        }
        if let Some(admin) = &self.admin {
            let conn = pool::connect(admin, 1, self.timeout).await?;
            let sql = match self.backend {
                DbBackend::MySql => format!("DROP DATABASE IF EXISTS `{}`", self.name),
                _ => format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
            };
            conn.execute_unprepared(&sql).await?;
            conn.close().await?;
        }
        Ok(())
    }
}
