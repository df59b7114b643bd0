//! Test context: one fresh database per test on Postgres, MariaDB/MySQL and SQLite, migrated.
//! Shared by the suites of `tests/`, `cli/tests/` and `rocketmq/tests/`, and by the crate's
//! unit tests (`src/driver/tests/`, through `src/lib.rs`); it uses the crate's public items only.
//!
//! URLs of the admin connections come from `OUTBOX_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and `OUTBOX_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`). A missing server makes the test FAIL. Outside CI,
//! `OUTBOX_TEST_BACKENDS=sqlite` (comma list) limits the backends a run touches; under `CI=true`
//! every backend always runs.
#![allow(dead_code)]

pub mod completion;
pub mod events;
pub mod fleet;
pub mod freezer;
pub mod hooked_order;
pub mod http;
pub mod order;
pub mod ordered;

// Each suite uses a part of these (and of the rest of this module, see `allow(dead_code)`).
#[allow(unused_imports)]
pub use completion::{completion, deleting, observe_deletions, unobserve_deletions};
#[allow(unused_imports)]
pub use events::{
    age, age_many, claim_by_hand, count, count_written, db_now, db_now_sql, dead_letter, event,
    event_by_biz_no, insert_keys, insert_many, new_event, wait_for_success,
};
#[allow(unused_imports)]
pub use fleet::Fleet;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, EntityTrait, Schema,
};
use sea_orm_migration::MigratorTrait;
use sea_orm_outbox::{Migrator, OutboxMessage, PublishError, Publisher};

/// The backends the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    MySql,
    Sqlite,
}

impl Backend {
    fn key(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::Sqlite => "sqlite",
        }
    }

    /// Whether this run should touch `self` (always under CI).
    pub fn enabled(self) -> bool {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return true;
        }
        match std::env::var("OUTBOX_TEST_BACKENDS") {
            Ok(list) => list.split(',').any(|b| {
                b.trim() == self.key() || (b.trim() == "mariadb" && self == Backend::MySql)
            }),
            Err(_) => true,
        }
    }
}

/// A fresh, migrated database for one test; when delivered rows are deleted, with the log of
/// deletions from `t_event_record` ([`observe_deletions`]).
pub struct TestContext {
    pub backend: Backend,
    pub db: DatabaseConnection,
    pub url: String,
    admin_url: Option<String>,
    name: String,
}

/// The admin URL of `backend`'s server (see the module's documentation).
pub fn admin_url(backend: Backend) -> String {
    match backend {
        Backend::Postgres => std::env::var("OUTBOX_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        Backend::MySql => std::env::var("OUTBOX_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
        Backend::Sqlite => String::new(),
    }
}

/// `url` with its database (path) replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let cut = base.rfind('/').expect("database URL has a path");
    let mut out = format!("{}/{}", &base[..cut], db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A pool of at most `max` connections to `url` (none kept idle, 10 s to connect, no statement
/// logs); panics when the server does not answer.
pub async fn connect(url: &str, max: u32) -> DatabaseConnection {
    let mut opt = ConnectOptions::new(url.to_owned());
    opt.max_connections(max)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    Database::connect(opt)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url} (is the server running?): {e}"))
}

impl TestContext {
    /// Creates and migrates a database named after `label`.
    pub async fn new(backend: Backend, label: &str) -> Self {
        let ctx = Self::new_empty(backend, label).await;
        Migrator::up(&ctx.db, None).await.expect("migration up");
        observe_deletions(&ctx.db, &sea_orm_outbox::Outbox::default()).await;
        ctx.create_table(order::Entity).await;
        ctx.create_table(hooked_order::Entity).await;
        ctx
    }

    /// Creates `entity`'s table unless it exists.
    async fn create_table(&self, entity: impl EntityTrait) {
        let schema = Schema::new(self.db.get_database_backend());
        self.db
            .execute(schema.create_table_from_entity(entity).if_not_exists())
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", entity.table_name()));
    }

    /// Another pool on the same database (a separate "instance").
    pub async fn pool(&self, max: u32) -> DatabaseConnection {
        let db = connect(&self.url, max).await;
        if self.backend == Backend::Sqlite {
            db.execute_unprepared("PRAGMA busy_timeout=10000")
                .await
                .ok();
        }
        db
    }

    /// The database's backend.
    pub fn db_backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    /// Drops the database (best effort).
    pub async fn cleanup(self) {
        self.db.close().await.ok();
        match (&self.admin_url, self.backend) {
            (Some(admin), Backend::MySql) => {
                let c = connect(admin, 1).await;
                c.execute_unprepared(&format!("DROP DATABASE IF EXISTS `{}`", self.name))
                    .await
                    .ok();
            }
            (Some(admin), _) => {
                let c = connect(admin, 1).await;
                c.execute_unprepared(&format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    self.name
                ))
                .await
                .ok();
            }
            (None, _) => {
                let base = std::env::temp_dir().join(format!("{}.db", self.name));
                for ext in ["", "-wal", "-shm"] {
                    std::fs::remove_file(format!("{}{ext}", base.display())).ok();
                }
            }
        }
    }
}

/// Generates one `#[tokio::test]` per backend for each `async fn name(ctx: &TestContext)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on($crate::common::Backend::Postgres, stringify!($name), super::$name).await } )* }
        mod mariadb { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on($crate::common::Backend::MySql, stringify!($name), super::$name).await } )* }
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { $crate::common::run_on($crate::common::Backend::Sqlite, stringify!($name), super::$name).await } )* }
    };
}

/// Rows of `stmt` as pairs of its columns `a` and `b`.
pub async fn query_pairs<A, B>(
    db: &impl ConnectionTrait,
    stmt: sea_orm::Statement,
    (a, b): (&str, &str),
) -> Vec<(A, B)>
where
    A: sea_orm::TryGetable,
    B: sea_orm::TryGetable,
{
    db.query_all_raw(stmt)
        .await
        .expect("query")
        .iter()
        .map(|r| {
            (
                r.try_get::<A>("", a).expect(a),
                r.try_get::<B>("", b).expect(b),
            )
        })
        .collect()
}

/// One `#[tokio::test]` per entry `test_name: Backend, "label" => body;` (doc comments and
/// attributes before an entry go to its test) that runs `async fn body(ctx: &TestContext)` on
/// that one backend ([`run_on`]), for the tests that do not run everywhere.
#[macro_export]
macro_rules! backend_test {
    ($($(#[$meta:meta])* $test:ident: $backend:ident, $label:expr => $body:path;)+) => {
        $(
            $(#[$meta])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                $crate::common::run_on($crate::common::Backend::$backend, $label, $body).await
            }
        )+
    };
}

/// A publisher that fails (retryable or permanent) for chosen biz_nos and records the rest.
pub struct ScriptedPublisher {
    pub inner: sea_orm_outbox::InMemoryPublisher,
    pub fail_biz_no: Option<String>,
    pub permanent: bool,
    pub fail_all: bool,
}

impl ScriptedPublisher {
    /// Publishes everything.
    pub fn ok() -> Arc<Self> {
        Arc::new(ScriptedPublisher {
            inner: Default::default(),
            fail_biz_no: None,
            permanent: false,
            fail_all: false,
        })
    }
    /// Fails every send, for good when `permanent`.
    pub fn failing_all(permanent: bool) -> Arc<Self> {
        Arc::new(ScriptedPublisher {
            inner: Default::default(),
            fail_biz_no: None,
            permanent,
            fail_all: true,
        })
    }
    /// Fails (retryably) the sends of `biz_no`, publishes the rest.
    pub fn failing(biz_no: &str) -> Arc<Self> {
        Arc::new(ScriptedPublisher {
            inner: Default::default(),
            fail_biz_no: Some(biz_no.into()),
            permanent: false,
            fail_all: false,
        })
    }
}

#[async_trait]
impl Publisher for ScriptedPublisher {
    async fn publish(&self, m: &OutboxMessage) -> Result<(), PublishError> {
        if self.fail_all || self.fail_biz_no.as_deref() == Some(m.biz_no.as_str()) {
            return Err(if self.permanent {
                PublishError::permanent("scripted permanent failure")
            } else {
                PublishError::retryable("scripted broker outage")
            });
        }
        self.inner.publish(m).await
    }
}

/// Installs the suites' log output (`RUST_LOG`, captured per test) unless it is there.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Whether the test `name` runs on `backend` ([`Backend::enabled`]; says so when it does
/// not), with the log output installed ([`init_tracing`]).
pub fn selected(backend: Backend, name: &str) -> bool {
    if !backend.enabled() {
        eprintln!("{name}: {backend:?} not selected by OUTBOX_TEST_BACKENDS");
        return false;
    }
    init_tracing();
    true
}

/// Runs `f` on a fresh database of `backend` (skipped, loudly, only outside CI when
/// `OUTBOX_TEST_BACKENDS` leaves the backend out).
pub async fn run_on<F>(backend: Backend, name: &str, f: F)
where
    F: for<'a> AsyncFn(&'a TestContext),
{
    run_with(backend, name, true, f).await
}

/// [`run_on`] and [`run_on_empty`]: `migrated` picks [`TestContext::new`] or `new_empty`.
async fn run_with<F>(backend: Backend, name: &str, migrated: bool, f: F)
where
    F: for<'a> AsyncFn(&'a TestContext),
{
    if !selected(backend, name) {
        return;
    }
    let ctx = if migrated {
        TestContext::new(backend, name).await
    } else {
        TestContext::new_empty(backend, name).await
    };
    // A failing assertion panics inside `f`: drop the database then too (set
    // `OUTBOX_TEST_KEEP_FAILED=1` to keep it for a look), and fail the test with that panic.
    let outcome = std::panic::AssertUnwindSafe(f(&ctx)).catch_unwind().await;
    match outcome {
        Ok(()) => ctx.cleanup().await,
        Err(panic) => {
            let name = ctx.name.clone();
            if std::env::var("OUTBOX_TEST_KEEP_FAILED").as_deref() == Ok("1") {
                eprintln!("kept the failed test's database {name}");
            } else {
                // Bounded and panic-proof: a task of the test may still hold a connection (the
                // pool's close waits for it) or the server may be gone; the test's own panic is
                // what must be reported.
                let cleanup = std::panic::AssertUnwindSafe(ctx.cleanup()).catch_unwind();
                if !matches!(
                    tokio::time::timeout(Duration::from_secs(15), cleanup).await,
                    Ok(Ok(()))
                ) {
                    eprintln!("could not drop the failed test's database {name}");
                }
            }
            std::panic::resume_unwind(panic);
        }
    }
}

/// The instance id part of a `claim_owner` value (`<instance id>#<claim token>`).
pub fn instance_of(claim_owner: &str) -> &str {
    claim_owner
        .rsplit_once('#')
        .map_or(claim_owner, |(instance, _)| instance)
}

/// The suites' worker settings: 20 ms polls, lease 10 s (reclaim every 1 s), send timeout
/// 2 s, 3 retries with a 200 ms back-off base, instance id `owner`, the run's completion
/// ([`completion()`]).
pub fn test_config(owner: &str) -> sea_orm_outbox::WorkerConfig {
    sea_orm_outbox::WorkerConfig::default()
        .completion(completion())
        .poll_delay(Duration::from_millis(20))
        .lease(Duration::from_secs(10))
        .send_timeout(Duration::from_secs(2))
        .retry(sea_orm_outbox::RetryPolicy::new(
            3,
            Duration::from_millis(200),
            Duration::from_secs(60),
        ))
        .instance_id(owner)
}

impl TestContext {
    /// Like [`TestContext::new`], but the database is left empty: no outbox migration (not even
    /// its tracking table) and no `orders`/`hooked_orders`, for suites that run migrators
    /// themselves (tests/migrations.rs).
    pub async fn new_empty(backend: Backend, label: &str) -> Self {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let name = format!(
            "ot_{}_{}",
            label.chars().take(40).collect::<String>(),
            suffix
        )
        .to_lowercase();
        let (url, admin) = match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                (format!("sqlite://{}?mode=rwc", path.display()), None)
            }
            _ => {
                let admin = admin_url(backend);
                let conn = connect(&admin, 1).await;
                let quoted = match backend {
                    Backend::MySql => format!("`{name}`"),
                    _ => format!("\"{name}\""),
                };
                conn.execute_unprepared(&format!("CREATE DATABASE {quoted}"))
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
        TestContext {
            backend,
            db,
            url,
            admin_url: admin,
            name,
        }
    }
}

/// Like [`run_on`], with an empty database ([`TestContext::new_empty`]).
pub async fn run_on_empty<F>(backend: Backend, name: &str, f: F)
where
    F: for<'a> AsyncFn(&'a TestContext),
{
    run_with(backend, name, false, f).await
}

/// A loopback port nothing listens on now (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Polls `check` every `every` until it returns true or `deadline` passes; returns whether it
/// did.
pub async fn wait_until<F, Fut>(deadline: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}
