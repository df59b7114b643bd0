//! A database of its own for each case: created, migrated, dropped.
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::Migrator;

/// The database servers the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `OUTBOX_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`).
    Postgres,
    /// `OUTBOX_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`): MariaDB or MySQL.
    MySql,
    /// A file in the temporary directory.
    Sqlite,
}

/// A migrated database of one case, dropped by [`TestDb::drop_database`].
pub struct TestDb {
    /// The database's backend.
    pub backend: Backend,
    /// Its URL.
    pub url: String,
    /// A pool of 5 connections to it.
    pub db: DatabaseConnection,
    admin: Option<String>,
    name: String,
}

impl TestDb {
    /// Creates the database `ob_<label>_<random>` on `backend` and runs the outbox's
    /// migrations on it.
    ///
    /// # Panics
    /// When the server does not answer or refuses the database.
    pub async fn create(backend: Backend, label: &str) -> TestDb {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let name =
            format!("ob_{}_{suffix}", label.chars().take(40).collect::<String>()).to_lowercase();
        let (url, admin) = match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                (format!("sqlite://{}?mode=rwc", path.display()), None)
            }
            _ => {
                let admin = admin_url(backend);
                let conn = connect(&admin, 1).await;
                conn.execute_unprepared(&format!("CREATE DATABASE {}", quoted(backend, &name)))
                    .await
                    .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
                conn.close().await.ok();
                (with_database(&admin, &name), Some(admin))
            }
        };
        let db = connect(&url, 5).await;
        if backend == Backend::Sqlite {
            db.execute_unprepared("PRAGMA journal_mode=WAL")
                .await
                .expect("WAL");
        }
        Migrator::up(&db, None).await.expect("migration up");
        TestDb {
            backend,
            url,
            db,
            admin,
            name,
        }
    }

    /// Another pool of `max` connections to the database (a relay instance of its own).
    pub async fn pool(&self, max: u32) -> DatabaseConnection {
        let db = connect(&self.url, max).await;
        if self.backend == Backend::Sqlite {
            db.execute_unprepared("PRAGMA busy_timeout=10000")
                .await
                .ok();
        }
        db
    }

    /// Drops the database (best effort).
    pub async fn drop_database(self) {
        self.db.close().await.ok();
        match &self.admin {
            Some(admin) => {
                let conn = connect(admin, 1).await;
                let force = if self.backend == Backend::Postgres {
                    " WITH (FORCE)"
                } else {
                    ""
                };
                conn.execute_unprepared(&format!(
                    "DROP DATABASE IF EXISTS {}{force}",
                    quoted(self.backend, &self.name)
                ))
                .await
                .ok();
            }
            None => {
                let base = std::env::temp_dir().join(format!("{}.db", self.name));
                for ext in ["", "-wal", "-shm"] {
                    std::fs::remove_file(format!("{}{ext}", base.display())).ok();
                }
            }
        }
    }
}

/// The admin URL of `backend`'s server, from the environment or its default.
pub(crate) fn admin_url(backend: Backend) -> String {
    match backend {
        Backend::Postgres => std::env::var("OUTBOX_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        Backend::MySql => std::env::var("OUTBOX_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
        Backend::Sqlite => String::new(),
    }
}

fn quoted(backend: Backend, name: &str) -> String {
    match backend {
        Backend::MySql => format!("`{name}`"),
        _ => format!("\"{name}\""),
    }
}

/// `url` with its database (path) replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let cut = base.rfind('/').expect("database URL has a path");
    let mut out = format!("{}/{db}", &base[..cut]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A pool of at most `max` connections to `url`.
async fn connect(url: &str, max: u32) -> DatabaseConnection {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    Database::connect(opt)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the database (is the server running?): {e}"))
}
